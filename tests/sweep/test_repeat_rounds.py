"""``--repeat N`` on the twin: interleaved rounds, distinct draws per repeat, attributable records, resume."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from plateau_bench.level_run import LevelRun, StopRule
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.store import ResultWriter, kept_attempts, load_requests, load_result, repeats_on_disk
from plateau_bench.sweep.loop import conclude, run_plan, run_sweep, stop_rule_for
from plateau_bench.sweep.plan import ConcurrencyPlan, SearchSettings, SweepLimits

WORKLOAD = WorkloadSpec(input_len=64, output_len=64, range_ratio=0.5, seed=3)


class Recording(VirtualLevelRunner):
    """The twin in virtual time, remembering the order levels and repeats were run in."""

    def __init__(self) -> None:
        super().__init__(msgspec.structs.replace(get_preset("tiny"), max_num_seqs=16), WORKLOAD)
        self.calls: list[tuple[str, int]] = []

    async def run_level(self, level: LevelSpec, *, label: str, on_record: Callable[[RequestRecord], None] | None,
                        stop_rule: StopRule | None, repeat: int = 1, attempt: int = 1) -> LevelRun:
        self.calls.append((label, repeat))
        return await super().run_level(level, label=label, on_record=on_record, stop_rule=stop_rule, repeat=repeat)


def _limits(repeat: int) -> SweepLimits:
    return SweepLimits(min_level_s=2.0, max_level_s=8.0, precision=0.05, repeat=repeat)


def test_grid_repeats_run_in_interleaved_rounds_and_give_intervals() -> None:
    runner = Recording()
    plan = ConcurrencyPlan(concurrencies=(2, 8, 32), limits=_limits(3))
    state, result = asyncio.run(run_plan(runner, plan))
    assert runner.calls == [(f"C={c}", r) for r in (1, 2, 3) for c in (2, 8, 32)]
    for lv in result.levels:
        assert [f.repeat for f in lv.repeats] == [1, 2, 3]
        # Repeat 1 is the level's own measurement.
        assert lv.repeats[0].output_throughput == lv.output_throughput
        assert lv.repeats[0].completed == lv.completed
        values = [f.output_throughput for f in lv.repeats]
        assert len(set(values)) == 3, "each repeat draws its own lengths"
        stats = lv.repeat_stats
        assert stats is not None and stats.n == 3
        iv = stats.output_throughput
        assert iv is not None and iv.low is not None and iv.high is not None
        assert iv.mean == pytest.approx(sum(values) / 3)
        assert iv.low < min(values) <= max(values) < iv.high   # t(0.975, 2) = 4.3: wider than the range
        assert stats.ttft_p99_ms is not None and stats.e2e_p50_ms is not None
    # Benchmark time counts every repeat.
    assert state.spent_s == pytest.approx(sum(f.benchmark_s or 0 for lv in result.levels for f in lv.repeats))


def test_adaptive_sweep_repeats_the_levels_it_kept_and_finds_the_same_plateau() -> None:
    search = SearchSettings(max_concurrency=256)
    once = asyncio.run(run_plan(Recording(), ConcurrencyPlan(search=search, limits=_limits(1))))[1]
    runner = Recording()
    twice = asyncio.run(run_plan(runner, ConcurrencyPlan(search=search, limits=_limits(2))))[1]
    first_round = [c for c in runner.calls if c[1] == 1]
    assert runner.calls == first_round + [(label, 2) for label, _ in first_round]
    assert [lv.label for lv in twice.levels] == [lv.label for lv in once.levels]
    assert twice.plateau == once.plateau and twice.knee == once.knee
    assert all(len(lv.repeats) == 2 for lv in twice.levels)
    assert once.levels[0].repeats == [] and once.levels[0].repeat_stats is None


def test_repeat_records_are_tagged_and_readers_count_the_first_by_default(tmp_path: Path) -> None:
    runner = Recording()
    plan = ConcurrencyPlan(concurrencies=(4, 16), limits=_limits(2))
    result = ResultFile(kind="sweep")
    with ResultWriter(tmp_path, result) as writer:
        state = asyncio.run(run_sweep(
            runner, plan, plan.limits, stop_rule=stop_rule_for(plan.limits),
            on_level=lambda run, lv, rep: writer.add_level(lv),
            on_record=lambda label, attempt, rep, r: writer.add_request(label, r, attempt, rep)))
        conclude(result, state, plan, None)
        writer.flush()
    saved = load_result(tmp_path)
    kept = load_requests(tmp_path, attempts=kept_attempts(saved))
    every = load_requests(tmp_path, attempts=kept_attempts(saved), repeat=None)
    second = load_requests(tmp_path, repeat=2)
    for lv in saved.levels:
        assert len(kept[lv.label]) == lv.num_requests
        assert len(second[lv.label]) == lv.repeats[1].num_requests
        assert len(every[lv.label]) == sum(f.num_requests for f in lv.repeats)
    assert repeats_on_disk(tmp_path) == {("C=4", 1): 2, ("C=16", 1): 2}


def test_resume_continues_the_rounds_and_never_reuses_an_interrupted_repeat_number() -> None:
    plan = ConcurrencyPlan(concurrencies=(4, 16), limits=_limits(3))
    _, partial = asyncio.run(run_plan(Recording(), dataclasses.replace(plan, limits=_limits(2))))
    previous: list[LevelResult] = [msgspec.structs.replace(lv, repeats=list(lv.repeats)) for lv in partial.levels]
    runner = Recording()
    # Repeat 3 of C=4 was cut off by a crash: its records are on disk under repeat 3.
    state = asyncio.run(run_sweep(runner, plan, plan.limits, stop_rule=stop_rule_for(plan.limits),
                                  previous=previous, repeats_used={("C=4", 1): 3, ("C=16", 1): 2}))
    assert runner.calls == [("C=4", 4), ("C=16", 3)]
    by_label = {lv.label: lv for lv in state.levels}
    assert [f.repeat for f in by_label["C=4"].repeats] == [1, 2, 4]
    assert [f.repeat for f in by_label["C=16"].repeats] == [1, 2, 3]
    assert all(lv.repeat_stats is not None and lv.repeat_stats.n == 3 for lv in state.levels)


def test_the_budget_stops_the_rounds_and_says_so() -> None:
    limits = dataclasses.replace(_limits(5), budget_s=20.0)
    state, _ = asyncio.run(run_plan(Recording(), ConcurrencyPlan(concurrencies=(4, 16), limits=limits)))
    assert "repeats stopped in round" in state.stop_reason and "budget" in state.stop_reason
    assert state.spent_s <= 20.0 + limits.max_level_s
    assert any(len(lv.repeats) < 5 for lv in state.levels)


def test_compare_calls_a_doubled_cap_a_real_difference() -> None:
    from plateau_bench.analysis.compare import RunData, compare_runs
    from plateau_bench.report.compare import comparison_lines

    def swept(cap: int) -> ResultFile:
        runner = Recording()
        runner.config = msgspec.structs.replace(runner.config, max_num_seqs=cap)
        return asyncio.run(run_plan(runner, ConcurrencyPlan(concurrencies=(2, 32), limits=_limits(3))))[1]

    small, big = swept(8), swept(16)
    comp = compare_runs([RunData("cap8", tuple(small.levels)), RunData("cap16", tuple(big.levels))])
    (rc,) = comp.repeats
    rows = {lv.level: {m.metric: m.verdict for m in lv.metrics} for lv in rc.levels}
    # At C=32 both caps bind: twice the batch is a real throughput difference.
    assert rows["C=32"]["output_throughput"] == "real"
    assert any(line.startswith("Real or noise at C=32 (cap8 n=3, cap16 n=3; Welch's t at 95%)")
               for line in comparison_lines(comp))
