"""Plans from what a user asks for: the flags' values in, a validated plan out (``sweep.plan``).

Every error is a ``ConfigError`` that names the flag, so the commands and config files give the same
one line. ``one_level`` is ``plateau run``'s level; ``sweep_plan`` chooses among the sweeps (a trace at
growing time scales, an SLO search, a rate sweep, a concurrency grid or search) from the same values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from plateau_bench.analysis.plateau import GOALS, SearchConfig
from plateau_bench.errors import ConfigError
from plateau_bench.spec import LevelSpec, WorkloadSpec, parse_duration, parse_float_list, parse_int_list
from plateau_bench.sweep.plan import (
    ConcurrencyPlan,
    OneLevelPlan,
    Plan,
    RatePlan,
    SloSearchPlan,
    SweepLimits,
    check_repeat,
)
from plateau_bench.sweep.trace_plan import TracePlan


@dataclass(frozen=True)
class LevelAsk:
    """One level as asked: ``plateau run``'s load flags."""

    mode: str | None = None
    concurrency: int | None = None
    num_requests: int | None = None
    duration: str | None = None
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 0
    time_scale: float = 1.0


def level_spec(ask: LevelAsk) -> LevelSpec:
    """The validated level of a burst, a steady closed loop or an open-loop rate."""
    duration_s = parse_duration(ask.duration, "--duration") if ask.duration else None
    chosen = ask.mode or ("rate" if ask.rate is not None else "steady" if duration_s else "burst")
    if chosen not in ("burst", "steady", "rate"):
        raise ConfigError(f"--mode must be burst, steady or rate (got {chosen!r})")
    if chosen == "burst" and duration_s is not None:
        raise ConfigError("--mode burst sends --num-requests requests; it cannot take --duration")
    if chosen != "rate" and ask.concurrency is None:
        raise ConfigError("--concurrency is required (or --rate for an open loop)")
    level = LevelSpec(mode=chosen, concurrency=ask.concurrency if chosen != "rate" else None,  # type: ignore[arg-type]
                      num_requests=ask.num_requests, duration_s=duration_s, rate=ask.rate,
                      burstiness=ask.burstiness, max_concurrency=ask.max_concurrency, warmup=ask.warmup)
    level.validate()
    return level


def one_level(ask: LevelAsk, workload: WorkloadSpec, repeat: int) -> OneLevelPlan:
    """``plateau run``: the level asked, a trace's replay, or a burst of whole conversations."""
    check_repeat(repeat)
    if workload.trace is not None:
        if ask.mode not in (None, "rate") or ask.concurrency is not None or ask.rate is not None or ask.duration \
                or ask.warmup:
            raise ConfigError("--trace sets its own schedule: give --time-scale (and --num-requests or "
                              "--max-concurrency), not --mode, --concurrency, --rate, --duration or --warmup")
        return OneLevelPlan(trace_level(workload, ask.time_scale, ask.max_concurrency), repeat)
    return OneLevelPlan(session_level(level_spec(ask), workload), repeat)


def session_level(level: LevelSpec, workload: WorkloadSpec) -> LevelSpec:
    """A level for multi-turn sessions: a burst sends every turn of C conversations."""
    if not workload.sessions:
        return level
    if level.mode == "burst" and level.num_requests is None and level.concurrency is not None:
        from plateau_bench.workload.lengths import nominal_length

        turns = nominal_length(workload.turns, "--turns") if workload.turns is not None else 1
        return msgspec.structs.replace(level, num_requests=level.concurrency * turns)
    return level


def trace_level(workload: WorkloadSpec, time_scale: float, max_concurrency: int | None) -> LevelSpec:
    """The open-loop level that replays ``workload.trace`` at ``time_scale``."""
    import math

    from plateau_bench.workload.trace import load_trace

    assert workload.trace is not None
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ConfigError(f"--time-scale must be > 0 and finite (got {time_scale})")
    trace = load_trace(workload.trace, limit=workload.trace_requests)
    level = LevelSpec(mode="rate", rate=trace.rate(time_scale), num_requests=len(trace.rows),
                      max_concurrency=max_concurrency, time_scale=time_scale)
    level.validate()
    return level


@dataclass(frozen=True)
class SweepAsk:
    """A sweep as asked: ``plateau sweep``'s search flags (the stop rules are the ``SweepLimits``)."""

    concurrency: str | None = None
    mode: str = "steady"
    rate: str | None = None
    burstiness: float = 1.0
    start: int = 1
    max_concurrency: int = 4096
    plateau_gain: float = 0.05
    find: str | None = None
    resolution: float = 0.05
    start_rate: float = 1.0
    max_rate: float = 10_000.0
    time_scale: str = "auto"
    goal: str = "verdict"


def sweep_plan(ask: SweepAsk, limits: SweepLimits, trace: Path | None) -> Plan:
    """The plan the flags describe: a trace's time scales, an SLO search, a rate sweep or concurrencies."""
    if trace is not None:
        return trace_plan(trace, ask, limits)
    if ask.find is not None:
        return find_plan(ask, limits)
    return concurrency_or_rate_plan(ask, limits)


def concurrency_or_rate_plan(ask: SweepAsk, limits: SweepLimits) -> ConcurrencyPlan | RatePlan:
    if ask.rate is not None and ask.mode == "burst":
        raise ConfigError("--mode burst sends C requests at once; it cannot be combined with --rate")
    if ask.rate is not None and ask.concurrency:
        raise ConfigError("--rate sweeps request rates; drop --concurrency (or drop --rate)")
    if ask.rate is None:
        return concurrency_plan(ask, limits)
    if ask.start <= 0 or ask.max_concurrency < ask.start:
        raise ConfigError("--start must be >= 1 and <= --max-concurrency")
    rates = None if ask.rate.strip().lower() == "auto" else tuple(parse_float_list(ask.rate, "--rate"))
    plan = RatePlan(rates=rates, throughput_concurrency=min(ask.max_concurrency, 256), burstiness=ask.burstiness,
                    limits=limits)
    plan.validate()
    return plan


def concurrency_plan(ask: SweepAsk, limits: SweepLimits) -> ConcurrencyPlan:
    """Closed-loop levels: the given grid, or the adaptive search from ``start`` up to ``max_concurrency``."""
    if ask.mode not in ("steady", "burst"):
        raise ConfigError(f"--mode must be steady or burst (got {ask.mode!r})")
    if ask.start <= 0 or ask.max_concurrency < ask.start:
        raise ConfigError("--start must be >= 1 and <= --max-concurrency")
    if ask.goal not in GOALS:
        raise ConfigError(f"--goal must be one of {', '.join(GOALS)} (got {ask.goal!r})")
    grid = tuple(parse_int_list(ask.concurrency, "--concurrency")) if ask.concurrency else None
    plan = ConcurrencyPlan(mode=ask.mode, concurrencies=grid,  # type: ignore[arg-type]
                           search=SearchConfig(start=ask.start, max_concurrency=ask.max_concurrency,
                                               plateau_gain=ask.plateau_gain, goal=ask.goal), limits=limits)
    plan.validate()
    return plan


def find_plan(ask: SweepAsk, limits: SweepLimits) -> SloSearchPlan:
    """``--find``: the SLO boundary search in closed loop (concurrency) or open loop (rate)."""
    if ask.concurrency or ask.rate is not None:
        raise ConfigError("--find searches the load itself: drop --concurrency and --rate")
    open_loop = ask.find == "max-rate"
    plan = SloSearchPlan(find=ask.find or "", mode=ask.mode,  # type: ignore[arg-type]
                         start=ask.start_rate if open_loop else float(ask.start),
                         max_load=ask.max_rate if open_loop else float(ask.max_concurrency),
                         resolution=ask.resolution, burstiness=ask.burstiness, limits=limits)
    plan.validate()
    return plan


def trace_plan(trace: Path, ask: SweepAsk, limits: SweepLimits) -> TracePlan:
    """``--trace``: the trace at the given time scales, or doubling from 1 until it stops keeping up."""
    from plateau_bench.workload.trace import load_trace

    if ask.concurrency is not None or ask.rate is not None or ask.find is not None:
        raise ConfigError("--trace sweeps time scales (--time-scale auto or 1,2,4); it cannot take --concurrency, "
                          "--rate or --find")
    if not os.access(trace, os.R_OK):
        raise ConfigError(f"--trace {trace}: cannot read the file")
    loaded = load_trace(trace)
    scales = None if ask.time_scale.strip() == "auto" else tuple(parse_float_list(ask.time_scale, "--time-scale"))
    return TracePlan(rate=loaded.rate(), requests=len(loaded.rows), scales=scales, limits=limits)


def check_resume(plan: Plan, resume: Path | None, out: Path | None, overwrite: bool) -> None:
    """``--resume DIR`` with the other flags: refused where it cannot continue what was saved."""
    if resume is None:
        return
    refusal = plan.cannot_resume()
    if refusal is not None:
        raise ConfigError(refusal)
    if out is not None and Path(out) != Path(resume):
        raise ConfigError("--resume continues in its own directory; drop --out or make it the same")
    if overwrite:
        raise ConfigError("--resume keeps the saved levels; --overwrite replaces them: choose one")
