"""The sweep loop: run levels one after another until the plan says stop, saving as it goes.

The loop holds no search logic (the ``Plan`` decides) and no I/O of its own beyond the ``LevelRunner``
it is given: the HTTP runner drives a real endpoint, the virtual-time runner drives the twin's engine.
Every raw level goes through ``analysis.level.build_level``, and ``on_level`` persists it before the
next one starts, so an interrupt or crash keeps every finished level.

Resume: the saved levels are the plan's starting point, except damaged ones (the level failed, had no
successful request, or the target went away): those are measured again under the next attempt
number, and only the new attempt counts anywhere.

Repeats (``--repeat N``): the plan runs as it would without them (round 1: a grid measures its list,
an adaptive search decides its levels from these first measurements); then rounds 2..N measure every
level the first round kept again, in the order it was measured, so each level's repeats are spread
over the whole sweep and a drift in the server shows as spread rather than as a trend across levels.
A repeat keeps the level's attempt and gets its own repeat number (records and telemetry are tagged
with it); its figures join the level's ``repeats`` and the intervals (``analysis.repeats``). A
resumed sweep continues the rounds where they stopped. The rounds stop when the budget is spent or a
repeat fails as a whole; a sweep stopped by its error rate gets none.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.level import build_level
from plateau_bench.analysis.repeats import add_repeat, repeat_figures
from plateau_bench.analysis.slo import goodput, level_meets, violations
from plateau_bench.level_run import LevelRun, LevelRunner, StopRequested, StopRule
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, SearchSettings, ended_by_interrupt
from plateau_bench.roofline import Roofline
from plateau_bench.spec import LevelSpec
from plateau_bench.sweep.plan import ConcurrencyPlan, Plan, RatePlan, SloSearchPlan, SweepLimits
from plateau_bench.sweep.warm_end import WarmLast, end_warm, time_to_verdict, verdict_now
from plateau_bench.units import NS
from plateau_bench.workload.warm_joins import predict_cycle


@dataclass
class SweepState:
    levels: list[LevelResult] = field(default_factory=list)
    spent_s: float = 0.0
    stop_reason: str = ""
    slo_max: LevelResult | None = None
    halted: bool = False       # stopped by the budget or the error rate: no repeat rounds
    specs: dict[str, LevelSpec] = field(default_factory=dict)   # label -> the spec the plan gave


class SweepObserver(Protocol):
    def level_started(self, level: LevelSpec, phase: str) -> None: ...
    def level_finished(self, level: LevelResult) -> None: ...


OnLevel = Callable[[LevelRun, LevelResult, int], None]   # the run, the level as kept, the run's repeat
OnRecord = Callable[[str, int, int, RequestRecord], None]   # label, attempt, repeat, record


def damaged(level: LevelResult) -> bool:
    """A level whose figures cannot stand: measured again on resume (a warm level may hold requests carried
    in from the level before and still have measured nothing of its own)."""
    measured_nothing = level.warm is not None and level.output_throughput <= 0
    return level.level_failed or level.completed == 0 or measured_nothing


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
    repeats_used: Mapping[tuple[str, int], int] | None = None,
) -> SweepState:
    """Run the sweep; ``on_level`` persists each finished level before the next one starts.

    ``attempts`` (label -> highest attempt already used, an interrupted one included) numbers the
    levels measured again; by default the saved levels' own attempts. ``repeats_used`` ((label,
    attempt) -> highest repeat already used) does the same for the repeats.
    """
    attempts = dict(attempts) if attempts is not None else {lv.label: lv.attempt for lv in previous}
    state = SweepState(levels=[lv for lv in previous if not damaged(lv)])
    ctx = _Context(runner, stop_rule, on_level, on_record, observer, state, limits,
                   plan.adaptive_search(), plan)
    stopped = False
    while True:
        step = plan.next(state.levels)
        if step.level is None:
            state.stop_reason = step.reason
            break
        if _over_budget(step.level, state, limits):
            break
        _status(observer, state, step.phase, step.reason)
        try:
            level = await _measure(ctx, step.level, step.label, step.phase, attempts.get(step.label, 0) + 1)
        except StopRequested:
            state.stop_reason, state.halted = _stopped_by_user(state, step.label), True
            stopped = True
            break
        reason = _error_stop(level, limits) or _prompts_stop(level)
        if reason:
            state.stop_reason, state.halted = reason, True
            break
        reason = _slo_stop(level, step.phase, limits, state)
        if reason:
            state.stop_reason = reason
            break
    if limits.repeat > 1 and not state.halted:
        await _repeat_rounds(ctx, dict(repeats_used or {}))
    await _end_warm(ctx, drain=limits.drain and not stopped)
    return state


WAITING_FOR = {"grow": "the throughput to stop growing",
               "confirm": "plateau confirmation (a second flat doubling, or the server's own cap with a queue)"}


def _status(observer: SweepObserver | None, state: SweepState, phase: str, reason: str) -> None:
    """The verdict as it stands and why the sweep goes on, for an observer that shows them (the live view)."""
    show = getattr(observer, "sweep_status", None)
    if show is not None:
        show(state.levels[-1].verdict_then if state.levels else None, WAITING_FOR.get(phase, reason))


def _prompts_stop(level: LevelResult) -> str | None:
    """A dataset that ran out ends the sweep: a level with more load would send the same prompts again."""
    used = level.prompts
    if used is None or not used.exhausted:
        return None
    end = (used.dataset_from or 0) + used.span
    return (f"the dataset ran out of prompts at {level.label} (all {end:,} sent once): give --allow-reuse to "
            "repeat them, each repeat counted, or a larger dataset")


def _stopped_by_user(state: SweepState, asked: str) -> str:
    """Why the sweep ended at a Ctrl-C: the level it ended early (kept), or the one it closed before that level
    had a window (``asked``: not kept)."""
    last = state.levels[-1] if state.levels else None
    if last is not None and ended_by_interrupt(last):
        return f"stopped by Ctrl-C, which ended {last.label} early"
    return f"stopped by Ctrl-C during {asked}, before it had measured a window (not kept)"


def _over_budget(spec: LevelSpec, state: SweepState, limits: SweepLimits, extra: str = "",
                 again: LevelResult | None = None) -> bool:
    """Whether the next level (``again``: a repeat of that level) would overrun ``--budget``."""
    last = again or (state.levels[-1] if state.levels else None)
    next_s = last.wall_s if spec.mode == "burst" and last is not None else limits.min_level_s
    if limits.budget_s is None or state.spent_s + next_s <= limits.budget_s:
        return False
    spent = f"budget of {limits.budget_s:g}s spent ({state.spent_s:.0f}s used)"
    state.stop_reason = f"{state.stop_reason}; {extra}{spent}" if extra else spent
    state.halted = True
    return True


@dataclass
class _Context:
    runner: LevelRunner
    stop_rule: StopRule | None
    on_level: OnLevel | None
    on_record: OnRecord | None
    observer: SweepObserver | None
    state: SweepState
    limits: SweepLimits
    search: SearchSettings | None = None
    plan: Plan | None = None
    warm_last: WarmLast | None = None    # the last level measured warm, until the live load ends


async def _end_warm(ctx: _Context, drain: bool = True) -> None:
    """End the live load of warm levels, if any: drained (or cancelled: ``--no-drain``, the user's stop)."""
    last, ctx.warm_last = ctx.warm_last, None
    await end_warm(ctx.runner, ctx.state, last, drain=drain and ctx.limits.drain, on_level=ctx.on_level,
                   on_record=ctx.on_record)


async def _repeat_rounds(ctx: _Context, used: dict[tuple[str, int], int]) -> None:
    """Rounds 2..N over the levels the first round kept (see the module docstring)."""
    levels = list(ctx.state.levels)
    for lv in levels:
        if not lv.repeats:
            add_repeat(lv, repeat_figures(lv, 1))
    for round_no in range(2, ctx.limits.repeat + 1):
        for lv in levels:
            if damaged(lv) or len(lv.repeats) >= round_no:
                continue
            spec = ctx.state.specs.get(lv.label) or saved_spec(lv, ctx.limits)
            if _over_budget(spec, ctx.state, ctx.limits, f"repeats stopped in round {round_no}: ", again=lv):
                return
            key = (lv.label, lv.attempt)
            repeat = max(used.get(key, 1), *(f.repeat for f in lv.repeats)) + 1
            used[key] = repeat
            if ctx.observer is not None:   # the live view shows the repeat's progress, not a new level
                ctx.observer.level_started(spec, f"repeat {round_no} of {ctx.limits.repeat}")
            try:
                run, measured = await _run_one(ctx, spec, lv.label, lv.attempt, repeat)
            except StopRequested:
                ctx.state.stop_reason += f"; repeats stopped in round {round_no} by Ctrl-C"
                return
            add_repeat(lv, repeat_figures(measured, repeat))
            if ctx.on_level is not None:
                ctx.on_level(run, lv, repeat)
            if damaged(measured):
                ctx.state.stop_reason += f"; repeats stopped: repeat {repeat} of {lv.label} failed"
                return


def saved_spec(level: LevelResult, limits: SweepLimits) -> LevelSpec:
    """The spec of a level saved by an earlier run of the sweep (resume), as the plans build it."""
    w, t = limits.warmup, limits.max_level_s
    if level.mode == "rate":
        return LevelSpec(mode="rate", rate=level.rate, duration_s=t, warmup=w, burstiness=limits.burstiness,
                         max_wall_s=t)
    if level.mode == "burst":
        c = level.concurrency or 1
        return LevelSpec(mode="burst", concurrency=c, num_requests=max(level.num_requests, c), warmup=w)
    bound = limits.steady_bound_s
    return LevelSpec(mode="steady", concurrency=level.concurrency, duration_s=bound, warmup=w, max_wall_s=bound)


def _decision_rule(ctx: _Context, spec: LevelSpec, phase: str) -> StopRule | None:
    """A growing level only has to show it beats its doubling partner by more than the plateau gain:
    the precision rule with that bar (``analysis.convergence``), when a partner was measured. A warm
    level of the doubling chain may also end as soon as it shows it does not (``analysis.warm``), or once the
    server's gauges show it only queued behind the batch of the level it doubled (``held_running``)."""
    rule, search = ctx.stop_rule, ctx.search
    warm_decides = spec.warm and phase == "confirm"
    if (phase != "grow" and not warm_decides) or spec.mode != "steady" or search is None \
            or not isinstance(rule, PrecisionRule):
        return rule
    c = spec.concurrency or 0
    partners = [lv for lv in ctx.state.levels if lv.concurrency and 2 * lv.concurrency <= c
                and lv.mode == "steady" and not damaged(lv)]
    if not partners:
        return rule
    partner = max(partners, key=lambda lv: lv.concurrency or 0)
    noise = partner.throughput_ci_rel or 0.0
    bar = partner.output_throughput * (1 + search.plateau_gain + noise)
    below = partner.output_throughput * (1 - noise) * (1 + search.plateau_gain) if spec.warm else None
    held = partner.telemetry.running_max if spec.warm and 2 * (partner.concurrency or 0) == c else None
    return dataclasses.replace(rule, clear_above=bar, clear_below=below, held_running=held,
                               held_cycle_s=batch_time_s(partner) if held is not None else 0.0)


def batch_time_s(level: LevelResult) -> float:
    """How long a request of ``level`` stayed in the server's batch: its median time from first token to end
    (0: unknown). A level that only queued behind that batch repeats with this period."""
    e2e, ttft = level.e2e_ms.p50, level.ttft_ms.p50
    return max(0.0, (e2e - ttft) / 1e3) if e2e and ttft is not None else 0.0


def _expected_cycle_s(spec: LevelSpec, levels: Sequence[LevelResult]) -> float:
    """The request cycle expected at a closed-loop level, for a level that may stretch
    (``analysis.convergence``): ``predict_cycle`` (the warm load's prediction) from the median request
    times of the steady levels measured so far; 0 when none was."""
    measured = [(lv.concurrency, lv.e2e_ms.p50 / 1000) for lv in levels
                if lv.mode == "steady" and lv.concurrency and lv.e2e_ms.p50 and not damaged(lv)]
    return predict_cycle(measured, spec.concurrency or 1)


async def _run_one(ctx: _Context, spec: LevelSpec, label: str, attempt: int, repeat: int,
                   rule: StopRule | None = None) -> tuple[LevelRun, LevelResult]:
    """Measure one level once: the run and its figures (nothing saved, nothing added to the state)."""
    on_record = ctx.on_record
    rule = rule if rule is not None else ctx.stop_rule
    if isinstance(rule, PrecisionRule) and rule.stretch_s is not None:
        rule = (dataclasses.replace(rule, expect_cycle_s=_expected_cycle_s(spec, ctx.state.levels))
                if spec.mode == "steady" else dataclasses.replace(rule, stretch_s=None))   # open loop: its own

    def record_cb(r: RequestRecord) -> None:
        if on_record is not None:
            on_record(label, attempt, repeat, r)

    if not spec.warm:
        await _end_warm(ctx)
    started = time.monotonic()
    run = await ctx.runner.run_level(spec, label=label, on_record=record_cb, repeat=repeat, attempt=attempt,
                                     stop_rule=None if spec.mode == "burst" else rule)
    level = build_level(run)
    if ctx.limits.slos:
        lo, hi = level.window_start_s * NS, level.window_end_s * NS
        level.goodput_rps = goodput([r for r in run.records if not r.warmup and lo <= r.end_ns <= hi],
                                    level.duration_s, ctx.limits.slos)
    level.attempt = attempt
    spent = run.benchmark_s if run.benchmark_s is not None else time.monotonic() - started
    ctx.state.spent_s += spent
    if level.benchmark_s is None:   # over HTTP: the level's wall time is its benchmark time
        level.benchmark_s = spent
    if run.warm is not None:
        ctx.warm_last = WarmLast(run, level, repeat)
    return run, level


async def _measure(ctx: _Context, spec: LevelSpec, label: str, phase: str, attempt: int) -> LevelResult:
    """A level of the plan: measured, kept in the state and persisted."""
    if ctx.observer is not None:
        ctx.observer.level_started(spec, phase)
    run, level = await _run_one(ctx, spec, label, attempt, 1, _decision_rule(ctx, spec, phase))
    ctx.state.specs[label] = spec
    level.phase = phase
    level.gain = _gain(level, ctx.state.levels)
    if ctx.limits.repeat > 1:
        add_repeat(level, repeat_figures(level, 1))
    ctx.state.levels.append(level)
    level.verdict_then = verdict_now(ctx.plan, ctx.state, getattr(ctx.runner, "engine", None))
    if ctx.observer is not None:
        ctx.observer.level_finished(level)
    if ctx.on_level is not None:
        ctx.on_level(run, level, 1)
    return level


def conclude(result: ResultFile, state: SweepState, plan: Plan, engine: str | None,
             roofline: Roofline | None = None) -> None:
    """The sweep-level fields of the result: what the plan's kind concludes (plateau, knee, SLO capacity,
    rate summary, verdict), placed on the ``roofline`` when one is given."""
    result.stop_reason = state.stop_reason
    result.benchmark_seconds = state.spent_s
    result.levels = list(state.levels)
    plan.conclude(result, state.levels, state.slo_max, engine, roofline)
    result.time_to_verdict_s = time_to_verdict(result)


__all__ = ["OnLevel", "OnRecord", "SweepObserver", "SweepState", "conclude", "damaged", "run_plan", "run_sweep",
           "stop_rule_for"]


def stop_rule_for(limits: SweepLimits) -> StopRule:
    """The analysis's precision rule with the sweep's timing."""
    from plateau_bench.analysis.convergence import PrecisionRule

    return PrecisionRule(limits.precision, limits.min_level_s, limits.max_level_s, drain=limits.drain,
                         stretch_s=limits.level_stretch_s)


async def run_plan(runner: LevelRunner, plan: ConcurrencyPlan | RatePlan | SloSearchPlan, *,
                   previous: Sequence[LevelResult] = (), engine: str | None = None) -> tuple[SweepState, ResultFile]:
    """A whole sweep without files (tests, benchmarks, what-ifs in virtual time): state and concluded result."""
    state = await run_sweep(runner, plan, plan.limits, stop_rule=stop_rule_for(plan.limits), previous=previous)
    result = ResultFile(kind="sweep")
    conclude(result, state, plan, engine)
    return state, result
