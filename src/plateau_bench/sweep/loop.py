"""The sweep loop: run levels one after another until the plan says stop, saving as it goes.

The loop holds no search logic (the ``Plan`` decides) and no I/O of its own beyond the ``LevelRunner``
it is given: the HTTP runner drives a real endpoint, the virtual-time runner drives the twin's engine.
Every raw level goes through ``analysis.level.build_level``, and ``on_level`` persists it before the
next one starts, so an interrupt or crash keeps every finished level.

Resume: the saved levels are the plan's starting point, except damaged ones (the level failed, had no
successful request, or the target went away): those are measured again under the next attempt
number, and only the new attempt counts anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.level import build_level
from plateau_bench.analysis.open_loop import rate_summary
from plateau_bench.analysis.plateau import plateau_and_knee
from plateau_bench.analysis.slo import goodput, level_meets, violations
from plateau_bench.analysis.slo_boundary import slo_boundary
from plateau_bench.level_run import LevelRun, LevelRunner, StopRule
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, SloSummary
from plateau_bench.roofline import Roofline
from plateau_bench.spec import LevelSpec
from plateau_bench.sweep.plan import ConcurrencyPlan, Plan, RatePlan, SloSearchPlan, SweepLimits
from plateau_bench.sweep.trace_plan import TracePlan
from plateau_bench.units import NS


@dataclass
class SweepState:
    levels: list[LevelResult] = field(default_factory=list)
    spent_s: float = 0.0
    stop_reason: str = ""
    slo_max: LevelResult | None = None


class SweepObserver(Protocol):
    def level_started(self, level: LevelSpec, phase: str) -> None: ...
    def level_finished(self, level: LevelResult) -> None: ...


OnLevel = Callable[[LevelRun, LevelResult], None]
OnRecord = Callable[[str, int, RequestRecord], None]   # label, attempt, record


def damaged(level: LevelResult) -> bool:
    """A level whose figures cannot stand: measured again on resume."""
    return level.level_failed or level.completed == 0


def _gain(level: LevelResult, levels: Sequence[LevelResult]) -> float | None:
    prev = [lv for lv in levels if lv.concurrency and level.concurrency and lv.mode == level.mode
            and lv.concurrency < level.concurrency and not lv.level_failed]
    prev.sort(key=lambda lv: lv.concurrency or 0)
    if not prev or prev[-1].output_throughput <= 0:
        return None
    return level.output_throughput / prev[-1].output_throughput - 1.0


def _error_stop(level: LevelResult, limits: SweepLimits) -> str | None:
    if level.num_requests and level.failed / level.num_requests > limits.max_error_rate:
        return (f"error rate {level.failed / level.num_requests:.0%} at {level.label} (dominant: "
                f"{level.dominant_error}) above --max-error-rate {limits.max_error_rate:.0%}")
    return None


def _slo_stop(level: LevelResult, phase: str, limits: SweepLimits, state: SweepState) -> str | None:
    if not limits.slos or level.concurrency is None:
        return None
    if level_meets(level, limits.slos):
        if state.slo_max is None or level.concurrency > (state.slo_max.concurrency or 0):
            state.slo_max = level
        return None
    if phase in ("grow", "confirm", "grid"):
        return f"SLO violated at {level.label}: {', '.join(violations(level, limits.slos))}"
    return None


async def run_sweep(
    runner: LevelRunner,
    plan: Plan,
    limits: SweepLimits,
    *,
    stop_rule: StopRule | None,
    on_level: OnLevel | None = None,
    on_record: OnRecord | None = None,
    observer: SweepObserver | None = None,
    previous: Sequence[LevelResult] = (),
    attempts: Mapping[str, int] | None = None,
) -> SweepState:
    """Run the sweep; ``on_level`` persists each finished level before the next one starts.

    ``attempts`` (label -> highest attempt already used, an interrupted one included) numbers the
    levels measured again; by default the saved levels' own attempts.
    """
    attempts = dict(attempts) if attempts is not None else {lv.label: lv.attempt for lv in previous}
    state = SweepState(levels=[lv for lv in previous if not damaged(lv)])
    while True:
        step = plan.next(state.levels)
        if step.level is None:
            state.stop_reason = step.reason
            break
        next_s = state.levels[-1].wall_s if step.level.mode == "burst" and state.levels else limits.min_level_s
        if limits.budget_s is not None and state.spent_s + next_s > limits.budget_s:
            state.stop_reason = f"budget of {limits.budget_s:g}s spent ({state.spent_s:.0f}s used)"
            break
        level = await _measure(runner, step.level, step.label, step.phase, attempts.get(step.label, 0) + 1,
                               stop_rule, on_record, observer, state, limits)
        if on_level is not None:
            on_level(*level)
        reason = _error_stop(level[1], limits) or _slo_stop(level[1], step.phase, limits, state)
        if reason:
            state.stop_reason = reason
            break
    return state


async def _measure(runner: LevelRunner, spec: LevelSpec, label: str, phase: str, attempt: int,
                   stop_rule: StopRule | None, on_record: OnRecord | None, observer: SweepObserver | None,
                   state: SweepState, limits: SweepLimits) -> tuple[LevelRun, LevelResult]:
    if observer is not None:
        observer.level_started(spec, phase)

    def record_cb(r: RequestRecord) -> None:
        if on_record is not None:
            on_record(label, attempt, r)

    started = time.monotonic()
    run = await runner.run_level(spec, label=label, on_record=record_cb,
                                 stop_rule=None if spec.mode == "burst" else stop_rule)
    level = build_level(run)
    if limits.slos:
        lo, hi = level.window_start_s * NS, level.window_end_s * NS
        level.goodput_rps = goodput([r for r in run.records if not r.warmup and lo <= r.end_ns <= hi],
                                    level.duration_s, limits.slos)
    level.phase = phase
    level.attempt = attempt
    level.gain = _gain(level, state.levels)
    state.spent_s += run.benchmark_s if run.benchmark_s is not None else time.monotonic() - started
    state.levels.append(level)
    if observer is not None:
        observer.level_finished(level)
    return run, level


def conclude(result: ResultFile, state: SweepState, plan: Plan, engine: str | None,
             roofline: Roofline | None = None) -> None:
    """The sweep-level fields of the result: plateau, knee, SLO capacity, rate summary, verdict
    (placed on the ``roofline`` when one is given)."""
    result.stop_reason = state.stop_reason
    result.benchmark_seconds = state.spent_s
    result.levels = list(state.levels)
    if isinstance(plan, SloSearchPlan):
        result.slo_boundary = slo_boundary(state.levels, plan.limits.slos, plan.find)
        if plan.open_loop:
            result.verdict = diagnose(state.levels, engine=engine, open_loop=rate_summary(state.levels),
                                      roofline=roofline)
            return
        plan = ConcurrencyPlan(mode=plan.mode, limits=plan.limits)
    if isinstance(plan, RatePlan | TracePlan):   # open loops: given rates, or a trace at growing time scales
        result.rate_sweep = rate_summary(state.levels)
        result.verdict = diagnose(state.levels, engine=engine, open_loop=result.rate_sweep, roofline=roofline)
        return
    if not isinstance(plan, ConcurrencyPlan):  # one level: only what a single level can show
        result.verdict = diagnose(state.levels, engine=engine, roofline=roofline)
        return
    search = plan.search
    result.plateau, result.knee = plateau_and_knee(state.levels, search)
    limits = plan.limits
    if limits.slos:
        best = state.slo_max
        result.slo = SloSummary(bounds=[s.describe() for s in limits.slos],
                                max_concurrency=best.concurrency if best else None,
                                throughput=best.output_throughput if best else None)
    result.verdict = diagnose(state.levels, engine=engine,
                              plateau_gain=search.plateau_gain,
                              plateau=result.plateau, knee=result.knee, roofline=roofline)


__all__ = ["OnLevel", "OnRecord", "SweepObserver", "SweepState", "conclude", "damaged", "run_plan", "run_sweep",
           "stop_rule_for"]


def stop_rule_for(limits: SweepLimits) -> StopRule:
    """The analysis's precision rule with the sweep's timing."""
    from plateau_bench.analysis.convergence import PrecisionRule

    return PrecisionRule(limits.precision, limits.min_level_s, limits.max_level_s)


async def run_plan(runner: LevelRunner, plan: ConcurrencyPlan | RatePlan | SloSearchPlan, *,
                   previous: Sequence[LevelResult] = (), engine: str | None = None) -> tuple[SweepState, ResultFile]:
    """A whole sweep without files (tests, benchmarks, what-ifs in virtual time): state and concluded result."""
    state = await run_sweep(runner, plan, plan.limits, stop_rule=stop_rule_for(plan.limits), previous=previous)
    result = ResultFile(kind="sweep")
    conclude(result, state, plan, engine)
    return state, result
