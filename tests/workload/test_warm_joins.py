"""When workers join a running load, how long its cycle will be, and which workers leave."""

from __future__ import annotations

import numpy as np
import pytest

from plateau_bench.workload.warm_joins import join_times, predict_cycle, retirees


def _gaps(times: list[float], cycle: float) -> np.ndarray:
    t = np.sort(np.mod(times, cycle))
    return np.diff(np.concatenate([t, [t[0] + cycle]]))


def test_joins_after_a_lock_step_start_fill_the_cycle_evenly() -> None:
    # Four workers restarting together at t=5 in a 10 s cycle: the joiners go everywhere else, evenly.
    joins = join_times(0.0, [5.0] * 4, 4, 10.0)
    assert joins == pytest.approx([1.0, 3.0, 7.0, 9.0])
    assert all(0.0 <= t < 10.0 for t in joins)


def test_joins_into_an_even_load_interleave_with_it() -> None:
    old = [1.0, 3.0, 5.0, 7.0, 9.0]
    joins = join_times(0.0, old, 5, 10.0)
    gaps = _gaps(old + joins, 10.0)
    assert gaps == pytest.approx([1.0] * 10)


def test_many_joiners_into_few_gaps_spread_within_each_gap() -> None:
    joins = join_times(100.0, [102.0], 9, 10.0)
    assert len(joins) == 9 and all(100.0 <= t < 110.0 for t in joins)
    assert _gaps([102.0, *joins], 10.0) == pytest.approx([1.0] * 10)


def test_no_running_worker_spreads_the_joins_over_the_cycle_and_none_joining_gives_none() -> None:
    assert join_times(0.0, [], 3, 12.0) == pytest.approx([3.0, 6.0, 9.0])
    assert join_times(0.0, [1.0, 2.0], 0, 12.0) == []


def test_a_restart_later_than_the_cycle_stretches_it() -> None:
    # The predicted cycle is too short for what is running: the joins span the running requests' restarts.
    joins = join_times(0.0, [2.0, 30.0], 2, 10.0)
    assert max(joins) <= 30.0 and min(joins) >= 0.0
    assert len(set(joins)) == 2


def test_one_late_restart_stretches_the_joins_over_at_most_one_and_a_half_predicted_cycles() -> None:
    # One running request read as slow (a pace from few tokens) would restart after 500 s: the joins
    # still all go out within 15 s of a 10 s predicted cycle.
    joins = join_times(0.0, [2.0, 4.0, 500.0], 6, 10.0)
    assert len(joins) == 6 and max(joins) <= 15.0 and min(joins) >= 0.0


def test_the_cycle_at_a_new_concurrency_follows_littles_law_on_the_measured_rate_growth() -> None:
    assert predict_cycle([], 8) == 0.0
    # The request rate doubled with the concurrency (no saturation): the cycle stays.
    assert predict_cycle([(2, 1.0), (4, 1.0)], 8) == pytest.approx(1.0)
    # The rate stopped growing: the cycle grows with the concurrency.
    assert predict_cycle([(2, 1.0), (4, 2.0)], 8) == pytest.approx(4.0)
    # Half-way: rate x sqrt(2) per doubling, so the cycle x sqrt(2).
    assert predict_cycle([(2, 1.0), (4, 2 ** 0.5)], 8) == pytest.approx(2.0)
    # A level measured there already: its own cycle.
    assert predict_cycle([(2, 1.0), (8, 3.0), (4, 2.0)], 8) == pytest.approx(3.0)
    # Between measured levels with one below: from it, as if saturated (the longer cycle: joins spread wider).
    assert predict_cycle([(2, 1.0), (8, 3.0)], 4) == pytest.approx(2.0)


def test_a_single_measured_level_assumes_the_load_saturated() -> None:
    assert predict_cycle([(4, 2.0)], 8) == pytest.approx(4.0)
    assert predict_cycle([(4, 2.0)], 2) == pytest.approx(2.0)


def test_retirees_are_spread_over_the_workers_ordered_by_progress() -> None:
    order = list(range(10))   # by tokens left: 0 nearest its end
    assert retirees(order, 5) == [1, 3, 5, 7, 9]
    assert retirees(order, 2) == [2, 7]
    assert retirees(order, 0) == []
    assert sorted(retirees(order, 10)) == order
