"""The SLO boundary search on the twin in virtual time, against the truth from a dense scan."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from plateau_bench.analysis.slo import level_meets, parse_slo
from plateau_bench.analysis.slo_boundary import slo_boundary
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import SweepState, run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SloSearchPlan, SweepLimits

pytestmark = pytest.mark.slow   # a dense scan per case: ~10 s

WORKLOAD = WorkloadSpec(input_len=64, output_len=64)
LIMITS = dict(min_level_s=2.0, max_level_s=20.0)


def _run(plan: ConcurrencyPlan | SloSearchPlan, cap: int = 24) -> tuple[SweepState, ResultFile]:
    config = msgspec.structs.replace(get_preset("tiny"), max_num_seqs=cap)
    return asyncio.run(run_plan(VirtualLevelRunner(config, WORKLOAD), plan))


def _truth(levels: list[LevelResult], slos: str) -> int:
    bounds = parse_slo(slos)
    ok = [lv.concurrency or 0 for lv in sorted(levels, key=lambda lv: lv.concurrency or 0)
          if level_meets(lv, bounds)]
    return max(ok)


@pytest.mark.parametrize("slos", ["ttft_p99=300ms", "tpot_p99=4ms", "e2e_p50=450ms"])
def test_max_concurrency_is_within_one_bisection_step_of_a_dense_scan(slos: str) -> None:
    limits = SweepLimits(slos=tuple(parse_slo(slos)), **LIMITS)  # type: ignore[arg-type]
    _, found = _run(SloSearchPlan(find="max-concurrency", max_load=128, limits=limits))
    # The SLO search measures its levels cold: the dense scan it is judged against too.
    dense, _ = _run(ConcurrencyPlan(concurrencies=tuple(range(1, 65)),
                                    limits=SweepLimits(**LIMITS, warm=False)))  # type: ignore[arg-type]
    truth = _truth(dense.levels, slos)
    assert truth < 64, "the dense scan must reach past the boundary"
    b = found.slo_boundary
    assert b is not None and b.reached and b.value is not None and b.interval is not None
    assert abs(b.value - truth) <= max(1.0, 0.05 * truth), (b, truth)
    assert b.interval[0] == b.value < b.interval[1]
    assert b.binding == parse_slo(slos)[0].describe()
    assert b.goodput_rps is not None and b.goodput_rps > 0


def test_a_cap_makes_a_cliff_and_the_binding_slo_is_named() -> None:
    limits = SweepLimits(slos=tuple(parse_slo("ttft_p99=60ms,tpot_p99=50ms")), **LIMITS)  # type: ignore[arg-type]
    _, found = _run(SloSearchPlan(find="max-concurrency", max_load=256, limits=limits), cap=24)
    b = found.slo_boundary
    assert b is not None and b.value == 24 and b.binding == "ttft_p99<=60ms" and b.shape == "cliff"


def test_max_rate_in_open_loop() -> None:
    slos = "e2e_p99=400ms"
    limits = SweepLimits(slos=tuple(parse_slo(slos)), **LIMITS)  # type: ignore[arg-type]
    state, found = _run(SloSearchPlan(find="max-rate", start=10.0, max_load=10_000, resolution=0.05,
                                      limits=limits))
    b = found.slo_boundary
    assert b is not None and b.reached and b.value is not None and b.interval is not None
    assert all(lv.mode == "rate" for lv in state.levels)
    assert b.interval[1] / b.interval[0] <= 1.05 + 1e-9
    bounds = parse_slo(slos)
    assert slo_boundary(state.levels, bounds, "max-rate") == b
    # The truth, measured apart: 3 % below the boundary meets the SLO, 3 % above the bracket does not.
    lo, hi = b.interval
    check = SloSearchPlan(find="max-rate", start=lo * 0.97, max_load=lo * 0.97, limits=limits)
    below, _ = _run(check)
    assert level_meets(below.levels[0], bounds)
    above, _ = _run(SloSearchPlan(find="max-rate", start=hi * 1.03, max_load=hi * 1.03, limits=limits))
    assert not level_meets(above.levels[0], bounds)


def test_find_needs_an_slo() -> None:
    from plateau_bench.errors import ConfigError

    with pytest.raises(ConfigError, match="give --slo"):
        SloSearchPlan().validate()
