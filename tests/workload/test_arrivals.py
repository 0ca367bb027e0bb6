"""Arrival schedules: mean gap 1/rate, gamma CV 1/sqrt(shape), determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from plateau_bench.workload import arrival_offsets_ns, iter_arrival_offsets_ns


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_mean_gap_and_coefficient_of_variation(burstiness: float) -> None:
    rate = 20.0
    offsets = np.asarray(arrival_offsets_ns(50_000, rate, burstiness=burstiness, seed=3), dtype=np.float64)
    gaps = np.diff(offsets) / 1e9
    assert offsets[0] == 0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)


def test_same_seed_same_schedule_and_endless_prefix() -> None:
    a = arrival_offsets_ns(5000, 3.0, burstiness=0.5, seed=1)
    assert a == arrival_offsets_ns(5000, 3.0, burstiness=0.5, seed=1)
    assert a != arrival_offsets_ns(5000, 3.0, burstiness=0.5, seed=2)
    assert list(itertools.islice(iter_arrival_offsets_ns(3.0, burstiness=0.5, seed=1), 5000)) == a
    assert arrival_offsets_ns(0, 3.0) == []


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="rate"):
        arrival_offsets_ns(3, 0.0)
    with pytest.raises(ValueError, match="burstiness"):
        next(iter_arrival_offsets_ns(1.0, burstiness=-1.0))
