"""Whole adaptive sweeps and verdicts on the simulated engine in virtual time (client-side data only).

The same scenarios run over HTTP with and without /metrics in tests/sweep/test_http_sweep.py.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import LevelResult, ResultFile, SearchSettings
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import SweepState, run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, RatePlan, SweepLimits


def sweep(config: EngineConfig, input_len: int, output_len: int, plan: ConcurrencyPlan | None = None,
          previous: list[LevelResult] | None = None, goal: str = "verdict",
          warm: bool = True) -> tuple[SweepState, ResultFile]:
    plan = plan or ConcurrencyPlan(search=SearchSettings(goal=goal), limits=SweepLimits(warm=warm))
    runner = VirtualLevelRunner(config, WorkloadSpec(input_len=input_len, output_len=output_len), steady_s=30)
    return asyncio.run(run_plan(runner, plan, previous=previous or []))


@pytest.mark.parametrize("cap", [8, 24, 64])
def test_knee_lands_at_the_cap(cap: int) -> None:
    config = msgspec.structs.replace(get_preset("tiny"), max_num_seqs=cap)
    state, summary = sweep(config, 64, 64, goal="knee")
    plateau, knee = summary.plateau, summary.knee
    assert plateau is not None and knee is not None
    assert plateau.reached
    # With step time growing mildly with the batch, 95 % of the plateau is reached a little below the cap.
    assert 0.6 * cap <= knee.concurrency <= cap
    assert knee.bracket[0] <= cap
    # --goal verdict (the default) stops at the confirmed plateau: its doubling bracket holds the knee's.
    _, quick = sweep(config, 64, 64)
    assert quick.knee is not None
    assert quick.knee.bracket[0] <= knee.bracket[0] and knee.bracket[1] <= quick.knee.bracket[1]
    assert len(quick.levels) < len(summary.levels)
    verdict = diagnose(state.levels)
    assert verdict.constraint == "admission_cap"
    assert verdict.estimated_cap == cap


@pytest.mark.slow
def test_seed_a_cap_and_what_if_matches_the_twin_with_the_cap_doubled() -> None:
    state, _ = sweep(get_preset("seed-a-tp8ep"), 128, 512)
    verdict = diagnose(state.levels)
    assert verdict.constraint == "admission_cap"
    assert verdict.estimated_cap == 256
    assert verdict.confidence == "high"
    doubled = msgspec.structs.replace(get_preset("seed-a-tp8ep"), max_num_seqs=512)
    _, doubled_summary = sweep(doubled, 128, 512)
    assert doubled_summary.plateau is not None
    actual = doubled_summary.plateau.throughput
    assert verdict.predicted_throughput_doubled_cap == pytest.approx(actual, rel=0.25)


def test_seed_b_burst_to_2048_is_capped_at_1024() -> None:
    spec = ConcurrencyPlan(mode="burst", concurrencies=(1, 256, 512, 1024, 2048))
    state, _ = sweep(get_preset("seed-b-fp4"), 128, 128, spec)
    verdict = diagnose(state.levels)
    assert verdict.constraint == "admission_cap"
    assert verdict.estimated_cap == 1024


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_compute_bound_preset() -> None:
    state, _ = sweep(get_preset("compute-bound"), 128, 128)
    assert diagnose(state.levels).constraint == "compute"


@pytest.mark.slow
def test_kv_capacity_binds_before_the_cap() -> None:
    config = msgspec.structs.replace(get_preset("tiny"), kv_tokens=6000, max_num_seqs=64)
    state, _ = sweep(config, 64, 512)
    verdict = diagnose(state.levels)
    assert verdict.constraint == "kv_capacity"


def test_below_the_knee_is_not_saturated_and_the_sweep_keeps_going() -> None:
    spec = ConcurrencyPlan(concurrencies=(1, 2, 4))
    state, summary = sweep(get_preset("seed-a-tp8ep"), 128, 128, spec)
    assert diagnose(state.levels).constraint == "not_saturated"
    assert summary.plateau is None


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_budget_stops_the_sweep() -> None:
    spec = ConcurrencyPlan(limits=SweepLimits(budget_s=100.0, min_level_s=5.0))
    state, _ = sweep(get_preset("seed-a-tp8ep"), 128, 128, spec)
    assert "budget" in state.stop_reason
    assert state.spent_s <= 100.0 + max(lv.wall_s for lv in state.levels)


def test_slo_violation_stops_and_reports_the_last_level_meeting_it() -> None:
    from plateau_bench.analysis.slo import parse_slo

    spec = ConcurrencyPlan(limits=SweepLimits(slos=tuple(parse_slo("tpot_p99=20ms"))))
    state, summary = sweep(get_preset("seed-a-tp8ep"), 128, 128, spec)
    assert state.stop_reason.startswith("SLO violated")
    slo = summary.slo
    assert slo is not None
    # TPOT = 13.9 ms + 0.19 ms per sequence: 20 ms holds up to a batch of ~32.
    assert slo.max_concurrency in (16, 32)


@pytest.mark.slow   # a second or more: kept out of the inner loop
@pytest.mark.parametrize("warm", [False, True])
def test_resume_after_an_interruption_gives_the_same_result(warm: bool) -> None:
    full_state, full = sweep(get_preset("tiny"), 64, 64, warm=warm)
    cut = full_state.levels[:4]
    resumed_state, resumed = sweep(get_preset("tiny"), 64, 64, previous=cut, warm=warm)
    assert [lv.concurrency for lv in resumed_state.levels] == [lv.concurrency for lv in full_state.levels]
    assert full.plateau is not None and resumed.plateau is not None
    if warm:   # the resumed levels start from a fresh load: the same answer, within the levels' precision
        assert resumed.plateau.concurrency == full.plateau.concurrency
        assert resumed.plateau.throughput == pytest.approx(full.plateau.throughput, rel=0.02)
        assert resumed.knee is not None and full.knee is not None and resumed.knee.bracket == full.knee.bracket
    else:
        assert resumed.plateau == full.plateau
        assert resumed.knee == full.knee


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_rate_sweep_spans_synchronous_to_maximum_and_finds_the_departure() -> None:
    runner = VirtualLevelRunner(get_preset("tiny"), WorkloadSpec(input_len=64, output_len=64))
    plan = RatePlan(limits=SweepLimits(min_level_s=2.0, max_level_s=20.0))
    state, summary = asyncio.run(run_plan(runner, plan))
    rs = summary.rate_sweep
    assert rs is not None and rs.synchronous_rate is not None and rs.max_rate is not None
    # C=1: a 64-token request takes ~2.1 ms x 63 + prefill = ~0.135 s -> ~7.4 req/s.
    assert 6.0 < rs.synchronous_rate < 8.5
    assert rs.max_rate > 10 * rs.synchronous_rate
    assert len(rs.rates) == 6 and all(rs.synchronous_rate < r < rs.max_rate for r in rs.rates)
    # Open loop near the maximum queues behind the cap of 32: latency departs before the top rate.
    assert rs.departure_rate is not None and rs.departure_rate <= rs.rates[-1]
    assert [lv.mode for lv in state.levels] == ["steady", "steady"] + ["rate"] * 6
    assert summary.verdict is not None and summary.verdict.constraint == "open_loop"


def test_resume_measures_damaged_levels_again() -> None:
    # A crash during C=8 left a level with no successful request; C=4 before it is sound.
    full_state, full = sweep(get_preset("tiny"), 64, 64, ConcurrencyPlan(concurrencies=(2, 4, 8, 16, 32, 64)))
    crashed = msgspec.structs.replace(full_state.levels[2], completed=0, failed=40, level_failed=True,
                                      output_throughput=0.0, errors={"connect": 40}, dominant_error="connect")
    previous = [*full_state.levels[:2], crashed]
    state, resumed = sweep(get_preset("tiny"), 64, 64, ConcurrencyPlan(concurrencies=(2, 4, 8, 16, 32, 64)),
                           previous=previous)
    redone = next(lv for lv in state.levels if lv.concurrency == 8)
    assert redone.attempt == 2 and redone.completed > 0 and not redone.level_failed
    assert sorted(lv.concurrency or 0 for lv in state.levels) == [2, 4, 8, 16, 32, 64]
    assert resumed.verdict is not None and full.verdict is not None
    assert resumed.verdict.constraint == full.verdict.constraint == "admission_cap"


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_adaptive_resume_after_a_crash_continues_instead_of_stopping() -> None:
    full_state, _ = sweep(get_preset("tiny"), 64, 64)
    crashed = msgspec.structs.replace(full_state.levels[3], completed=0, level_failed=True, output_throughput=0.0)
    state, resumed = sweep(get_preset("tiny"), 64, 64, previous=[*full_state.levels[:3], crashed])
    assert "failed" not in state.stop_reason
    assert resumed.plateau is not None and resumed.plateau.reached


def test_auto_level_time_gives_run_b_levels_their_cycles_where_a_hard_minute_reads_one_decode_phase() -> None:
    # Run B's engine at its cap: a 61 s request cycle, so nothing ends within a minute. A hard minute reads
    # the first wave's decode phase (+50 % over a ten-minute level); the stretched level goes on until it is
    # precise or its window holds three cycles, and reads the ten-minute level's figure, in no more time.
    def levels(limits: SweepLimits) -> list[LevelResult]:
        runner = VirtualLevelRunner(get_preset("seed-b-fp4"), WorkloadSpec(input_len=128, output_len=128))
        plan = ConcurrencyPlan(mode="steady", concurrencies=(512, 1024), limits=limits)
        return asyncio.run(run_plan(runner, plan))[0].levels

    hard, auto = levels(SweepLimits(max_level_s=60.0)), levels(SweepLimits(max_level_s=60.0, level_stretch_s=600.0))
    long = levels(SweepLimits(max_level_s=600.0))
    assert hard[1].output_throughput > 1.4 * long[1].output_throughput
    assert auto[1].output_throughput == pytest.approx(long[1].output_throughput, rel=0.02)
    assert 60.0 < (auto[1].benchmark_s or 0.0) <= (long[1].benchmark_s or 0.0) < 600.0
