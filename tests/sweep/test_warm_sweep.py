"""Whole warm sweeps on the twin: nothing lost, the same verdict as cold levels, the verdict's time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from plateau_bench.level_run import QUEUED_NOTE
from plateau_bench.result import LevelResult, ResultFile, Verdict, WarmLevelInfo
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import ResultWriter, kept_attempts, load_requests, load_result
from plateau_bench.sweep.loop import batch_time_s, conclude, run_plan, run_sweep, stop_rule_for
from plateau_bench.sweep.plan import AUTO_LEVEL_S, AUTO_STRETCH_S, ConcurrencyPlan, SweepLimits
from plateau_bench.sweep.warm_end import time_to_verdict

WORKLOAD = WorkloadSpec(input_len=64, output_len=64)


def saved_sweep(tmp_path: Path, limits: SweepLimits, grid: tuple[int, ...] | None = None) -> ResultFile:
    runner = VirtualLevelRunner(get_preset("tiny"), WORKLOAD, metrics=True)
    plan = ConcurrencyPlan(concurrencies=grid, limits=limits)
    result = ResultFile(kind="sweep")
    with ResultWriter(tmp_path, result) as writer:
        state = asyncio.run(run_sweep(
            runner, plan, plan.limits, stop_rule=stop_rule_for(plan.limits),
            on_level=lambda run, lv, rep: writer.add_level(lv),
            on_record=lambda label, attempt, rep, r: writer.add_request(label, r, attempt, rep)))
        conclude(result, state, plan, "vllm")
        writer.flush()
    return load_result(tmp_path)


def test_a_warm_sweep_loses_no_request_and_counts_each_once(tmp_path: Path) -> None:
    saved = saved_sweep(tmp_path, SweepLimits(max_level_s=60, warm=True))
    records = load_requests(tmp_path, attempts=kept_attempts(saved))
    indices = [r.index for recs in records.values() for r in recs]
    assert len(indices) == len(set(indices))
    assert min(indices) == 0 and max(indices) == len(indices) - 1          # every request sent is there
    for lv in saved.levels:
        assert lv.warm is not None and lv.verdict_then is not None
        assert lv.num_requests == lv.completed + lv.failed == len(records[lv.label])
    last = saved.levels[-1]
    assert any("drained after the sweep" in n for n in last.notes)
    assert saved.time_to_verdict_s is not None and saved.benchmark_seconds is not None
    # the verdict stood at the last level's close, before the sweep's end drained its requests
    assert last.warm is not None and last.warm.drained_s > 0
    assert 0 < saved.time_to_verdict_s <= saved.benchmark_seconds - last.warm.drained_s
    assert saved.verdict is not None and saved.verdict.constraint == "admission_cap"
    assert saved.verdict.estimated_cap == 32


def test_warm_and_cold_levels_give_the_same_verdict_and_plateau() -> None:
    def sweep(warm: bool) -> ResultFile:
        runner = VirtualLevelRunner(get_preset("tiny"), WORKLOAD, metrics=True)
        return asyncio.run(run_plan(runner, ConcurrencyPlan(limits=SweepLimits(warm=warm))))[1]

    warm, cold = sweep(True), sweep(False)
    assert warm.verdict is not None and cold.verdict is not None
    assert warm.verdict.constraint == cold.verdict.constraint
    assert warm.verdict.estimated_cap == cold.verdict.estimated_cap
    assert warm.plateau is not None and cold.plateau is not None
    assert warm.plateau.throughput == pytest.approx(cold.plateau.throughput, rel=0.02)
    assert all(lv.warm is None for lv in cold.levels)


def test_no_drain_cancels_the_last_requests_at_the_end(tmp_path: Path) -> None:
    saved = saved_sweep(tmp_path, SweepLimits(max_level_s=60, drain=False, warm=True), grid=(4, 16))
    last = saved.levels[-1]
    assert last.cancelled_at_end == 16 and any("cancelled at the sweep's end" in n for n in last.notes)


def level(label: str, seconds: float, verdict: str | None) -> LevelResult:
    return LevelResult(label=label, mode="steady", benchmark_s=seconds, verdict_then=verdict)


def test_time_to_verdict_is_the_time_until_the_verdict_never_changed_again() -> None:
    result = ResultFile(kind="sweep", verdict=Verdict(constraint="admission_cap", headline="", confidence="high",
                                                      estimated_cap=32))
    result.levels = [level("C=1", 10, "insufficient_data"), level("C=2", 10, "admission_cap at 32"),
                     level("C=4", 10, "compute"), level("C=8", 10, "admission_cap at 32"),
                     level("C=16", 10, "admission_cap at 32")]
    assert time_to_verdict(result) == 40.0
    result.levels[-1] = msgspec.structs.replace(result.levels[-1], verdict_then="compute")
    assert time_to_verdict(result) is None          # the last level's verdict is not the one concluded
    drained = WarmLevelInfo(from_concurrency=8, settled_s=1.0, dropped_s=0.0, drained_s=4.0)
    result.levels[-1] = msgspec.structs.replace(result.levels[-1], verdict_then="admission_cap at 32", warm=drained)
    assert time_to_verdict(result) == 40.0          # the drain at the end came after the verdict stood
    result.levels = [*result.levels[:4], msgspec.structs.replace(result.levels[-1], verdict_then="compute")]
    result.levels.append(level("C=32", 10, "admission_cap at 32"))
    result.levels[-1].warm = drained
    assert time_to_verdict(result) == 56.0          # it stood at C=32's close: 50 s before, 6 s of C=32
    result.levels = result.levels[:2]
    result.levels[0].verdict_then = None
    assert time_to_verdict(result) is None          # a level without its verdict: not known


def test_a_warm_window_holds_enough_scrapes_for_the_servers_gauges() -> None:
    # Scraped every second: every warm level that ended on its interval holds at least five scrapes, so
    # its gauges' means (running + waiting against the client's in flight) say something.
    runner = VirtualLevelRunner(get_preset("tiny"), WORKLOAD, metrics=True, scrape_s=1.0)
    result = asyncio.run(run_plan(runner, ConcurrencyPlan(limits=SweepLimits(max_level_s=60, warm=True))))[1]
    for lv in result.levels:
        assert lv.window_end_s - lv.window_start_s >= 5.0 - 1e-6, lv.label
        assert lv.telemetry.samples >= 5, lv.label


@pytest.mark.slow   # two sweeps of Run A's engine (~3 s)
def test_a_doubling_that_only_queued_ends_on_the_servers_gauges_after_one_period_of_the_batch() -> None:
    # Run A's engine admits 256: at 512 the server runs 256 with the rest in its queue, which its /metrics say
    # within a few scrapes, long before a window of whole request cycles (queued, a request's cycle doubles);
    # the level ends once its window holds one period of the batch measured at 256, its rate that batch's.
    def sweep(metrics: bool) -> ResultFile:
        runner = VirtualLevelRunner(get_preset("seed-a-tp8ep"), WorkloadSpec(input_len=128, output_len=512),
                                    metrics=metrics, scrape_s=1.0)
        limits = SweepLimits(warm=True, max_level_s=AUTO_LEVEL_S, level_stretch_s=AUTO_STRETCH_S)  # auto
        return asyncio.run(run_plan(runner, ConcurrencyPlan(limits=limits)))[1]

    scraped = sweep(True)
    queued = [lv for lv in scraped.levels if lv.warm is not None and lv.warm.queued]
    assert queued and all((lv.concurrency or 0) > 256 for lv in queued), [lv.label for lv in scraped.levels]
    by_c = {lv.concurrency: lv for lv in scraped.levels}
    for lv in queued:
        below = by_c[(lv.concurrency or 0) // 2]
        assert lv.telemetry.running_max == below.telemetry.running_max == 256
        assert (lv.telemetry.waiting_mean or 0) > 0.5 * 256 and lv.window_note.startswith(QUEUED_NOTE)
        assert lv.window_end_s - lv.window_start_s >= batch_time_s(below) - 1e-6
        assert lv.output_throughput == pytest.approx(below.output_throughput, rel=0.04)
        assert (lv.throughput_ci_rel or 1.0) <= 0.04
    assert scraped.verdict is not None and scraped.verdict.estimated_cap == 256
    # The client alone has no gauges to end a level on, and spends longer there.
    alone = sweep(False)
    assert not any(lv.warm is not None and lv.warm.queued for lv in alone.levels)
    assert alone.benchmark_seconds is not None and scraped.benchmark_seconds is not None
    assert scraped.benchmark_seconds < alone.benchmark_seconds
