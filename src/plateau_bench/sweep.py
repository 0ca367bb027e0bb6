"""The sweep: run levels one after another until the search says stop, saving as it goes.

The loop holds no search logic (``analysis.plateau.next_concurrency`` decides) and no I/O of its
own beyond the ``LevelRunner`` it is given: the HTTP runner drives a real endpoint, the virtual-time
runner drives the twin's engine. After every level the result directory is rewritten, so an
interrupt or crash keeps every finished level, and ``resume`` continues from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.plateau import (
    Decision,
    Knee,
    Plateau,
    Point,
    SearchConfig,
    find_knee,
    find_plateau,
    next_concurrency,
)
from plateau_bench.analysis.slo import Slo, level_meets, violations
from plateau_bench.errors import ConfigError
from plateau_bench.records import LevelResult, RequestRecord
from plateau_bench.spec import LevelSpec, Mode


@dataclass
class LevelOutcome:
    level: LevelResult
    records: list[RequestRecord]
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    benchmark_s: float | None = None   # seconds of load spent (virtual time for the twin); None: wall clock


class LevelRunner(Protocol):
    async def run_level(
        self,
        level: LevelSpec,
        *,
        label: str,
        on_record: Callable[[RequestRecord], None] | None,
        precision: PrecisionRule | None,
    ) -> LevelOutcome: ...


@dataclass(frozen=True)
class SweepSpec:
    mode: Mode = "steady"
    concurrencies: tuple[int, ...] | None = None     # a fixed grid; None = adaptive search
    search: SearchConfig = field(default_factory=SearchConfig)
    precision: float = 0.02
    min_level_s: float = 5.0
    max_level_s: float = 60.0
    warmup: int = 0
    slos: tuple[Slo, ...] = ()
    budget_s: float | None = None
    max_error_rate: float = 0.2

    def validate(self) -> None:
        if self.budget_s is not None and self.mode == "steady" and self.budget_s < self.min_level_s:
            raise ConfigError(
                f"--budget {self.budget_s:g}s is below one level (--min-level-time {self.min_level_s:g}s)"
            )
        if not 0 < self.precision < 1:
            raise ConfigError(f"--precision must be in (0, 1) (got {self.precision})")
        if self.min_level_s <= 0 or self.max_level_s < self.min_level_s:
            raise ConfigError("--min-level-time must be > 0 and <= --max-level-time")
        if not 0 < self.search.plateau_gain < 1:
            raise ConfigError(f"--plateau-gain must be in (0, 1) (got {self.search.plateau_gain})")
        if not 0 < self.max_error_rate <= 1:
            raise ConfigError(f"--max-error-rate must be in (0, 1] (got {self.max_error_rate})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "concurrencies": list(self.concurrencies) if self.concurrencies else None,
            "search": {"start": self.search.start, "max_concurrency": self.search.max_concurrency,
                       "plateau_gain": self.search.plateau_gain, "knee_fraction": self.search.knee_fraction,
                       "refine_steps": self.search.refine_steps},
            "precision": self.precision,
            "min_level_s": self.min_level_s,
            "max_level_s": self.max_level_s,
            "warmup": self.warmup,
            "slo": [s.describe() for s in self.slos],
            "budget_s": self.budget_s,
            "max_error_rate": self.max_error_rate,
        }


@dataclass
class SweepState:
    levels: list[LevelResult] = field(default_factory=list)
    spent_s: float = 0.0
    stop_reason: str = ""
    slo_max: LevelResult | None = None


def point_of(level: LevelResult) -> Point:
    return Point(
        concurrency=level.concurrency or 0,
        throughput=level.output_throughput,
        ci_rel=level.throughput_ci_rel,
        failed=level.level_failed,
    )


def search_config_of(spec: dict[str, Any]) -> SearchConfig:
    """The search settings saved in a result's spec (defaults where absent)."""
    saved = (spec.get("sweep") or {}).get("search") or {}
    known = {k: saved[k] for k in ("start", "max_concurrency", "plateau_gain", "knee_fraction", "refine_steps")
             if k in saved}
    return SearchConfig(**known)


def plateau_and_knee(
    levels: Sequence[LevelResult], search: SearchConfig
) -> tuple[Plateau | None, Knee | None]:
    points = [point_of(lv) for lv in levels if lv.concurrency]
    plateau = find_plateau(points, search.plateau_gain)
    knee = find_knee(points, plateau, search.knee_fraction) if plateau else None
    return plateau, knee


class SweepObserver(Protocol):
    def level_started(self, level: LevelSpec, decision: Decision) -> None: ...
    def level_finished(self, outcome: LevelOutcome, gain: float | None) -> None: ...


def _next(spec: SweepSpec, state: SweepState) -> Decision:
    if spec.concurrencies is not None:
        done = {lv.concurrency for lv in state.levels}
        for c in spec.concurrencies:
            if c not in done:
                return Decision(c, "grid", "fixed grid")
        return Decision(None, "done", "fixed grid finished")
    return next_concurrency([point_of(lv) for lv in state.levels], spec.search)


def _level_spec(spec: SweepSpec, c: int) -> LevelSpec:
    if spec.mode == "burst":
        return LevelSpec(mode="burst", concurrency=c, num_requests=c, warmup=spec.warmup)
    return LevelSpec(mode="steady", concurrency=c, duration_s=spec.max_level_s, warmup=spec.warmup)


def _estimate_next_s(spec: SweepSpec, state: SweepState) -> float:
    """A lower bound on the next level's time: a burst lasts at least as long as the last one."""
    if spec.mode == "burst" and state.levels:
        return state.levels[-1].wall_s
    return spec.min_level_s


async def run_sweep(
    runner: LevelRunner,
    spec: SweepSpec,
    *,
    on_level: Callable[[LevelOutcome], None] | None = None,
    on_record: Callable[[str, RequestRecord], None] | None = None,
    observer: SweepObserver | None = None,
    previous: Sequence[LevelResult] = (),
) -> SweepState:
    """Run the sweep; ``on_level`` persists each finished level before the next one starts."""
    state = SweepState(levels=list(previous))
    precision = (PrecisionRule(spec.precision, spec.min_level_s, spec.max_level_s)
                 if spec.mode == "steady" else None)
    while True:
        decision = _next(spec, state)
        if decision.concurrency is None:
            state.stop_reason = decision.reason
            break
        c = decision.concurrency
        if spec.budget_s is not None and state.spent_s + _estimate_next_s(spec, state) > spec.budget_s:
            state.stop_reason = f"budget of {spec.budget_s:g}s spent ({state.spent_s:.0f}s used)"
            break
        level_spec = _level_spec(spec, c)
        if observer:
            observer.level_started(level_spec, decision)
        label = level_spec.label

        def record_cb(r: RequestRecord, _label: str = label) -> None:
            if on_record:
                on_record(_label, r)

        started = time.monotonic()
        outcome = await runner.run_level(level_spec, label=label, on_record=record_cb, precision=precision)
        state.spent_s += (outcome.benchmark_s if outcome.benchmark_s is not None
                          else time.monotonic() - started)
        level = outcome.level
        level.extra.setdefault("phase", decision.phase)
        prev = [lv for lv in state.levels if lv.concurrency and level.concurrency
                and lv.concurrency < level.concurrency and not lv.level_failed]
        gain = (level.output_throughput / prev[-1].output_throughput - 1.0
                if prev and prev[-1].output_throughput > 0 else None)
        level.extra["gain"] = gain
        state.levels.append(level)
        if on_level:
            on_level(outcome)
        if observer:
            observer.level_finished(outcome, gain)
        if level.num_requests and level.failed / level.num_requests > spec.max_error_rate:
            state.stop_reason = (f"error rate {level.failed / level.num_requests:.0%} at {label} "
                                 f"(dominant: {level.dominant_error}) above --max-error-rate "
                                 f"{spec.max_error_rate:.0%}")
            break
        if spec.slos:
            if level_meets(level, spec.slos):
                if state.slo_max is None or (level.concurrency or 0) > (state.slo_max.concurrency or 0):
                    state.slo_max = level
            elif decision.phase in ("grow", "confirm", "grid"):
                state.stop_reason = f"SLO violated at {label}: {', '.join(violations(level, spec.slos))}"
                break
    return state


def summary_dict(state: SweepState, spec: SweepSpec) -> dict[str, Any]:
    """The sweep-level keys of result.json: plateau, knee, stop reason, SLO capacity."""
    plateau, knee = plateau_and_knee(state.levels, spec.search)
    out: dict[str, Any] = {
        "plateau": plateau.to_dict() if plateau else {"reached": False, "throughput": None,
                                                      "concurrency": None, "levels": []},
        "knee": knee.to_dict() if knee else {"reached": False, "throughput": None,
                                            "concurrency": None, "bracket": None},
        "stop_reason": state.stop_reason,
        "benchmark_seconds": state.spent_s,
    }
    if spec.slos:
        out["slo"] = {
            "bounds": [s.describe() for s in spec.slos],
            "max_concurrency": state.slo_max.concurrency if state.slo_max else None,
            "throughput": state.slo_max.output_throughput if state.slo_max else None,
        }
    return out


def spec_differences(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two spec dicts (for --resume)."""
    diffs: list[str] = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            diffs.extend(spec_differences(a, b, name + "."))
        elif msgspec.json.encode(a) != msgspec.json.encode(b):
            diffs.append(f"{name}: saved {a!r}, now {b!r}")
    return diffs


# --- open-loop rate sweep ----------------------------------------------------------------------

RATE_STEPS = 6
LATENCY_DEPARTURE = 1.5   # latency "departs" from its low-load value once it exceeds it by this factor


@dataclass(frozen=True)
class RateSweepSpec:
    """``--rate auto``: synchronous rate, maximum throughput, then open-loop rates in between.

    ``rates`` given instead: just those open-loop rates (requests/s).
    """

    rates: tuple[float, ...] | None = None
    throughput_concurrency: int = 256
    steps: int = RATE_STEPS
    burstiness: float = 1.0
    precision: float = 0.02
    min_level_s: float = 5.0
    max_level_s: float = 60.0
    warmup: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "rate", "rates": list(self.rates) if self.rates else "auto",
                "throughput_concurrency": self.throughput_concurrency, "steps": self.steps,
                "burstiness": self.burstiness, "precision": self.precision, "min_level_s": self.min_level_s,
                "max_level_s": self.max_level_s, "warmup": self.warmup}


def departure_rate(levels: Sequence[LevelResult], baseline: LevelResult | None) -> float | None:
    """The lowest offered rate whose E2E p50 exceeds the low-load (synchronous) E2E p50 by ``LATENCY_DEPARTURE``.

    End-to-end latency, not TTFT: at low load TTFT is a few steps and doubles on noise, while E2E
    carries the decode time every user waits for.
    """
    if baseline is None or not baseline.e2e_ms.p50:
        return None
    for lv in sorted((lv for lv in levels if lv.rate is not None), key=lambda lv: lv.rate or 0.0):
        if lv.e2e_ms.p50 is not None and lv.e2e_ms.p50 > LATENCY_DEPARTURE * baseline.e2e_ms.p50:
            return lv.rate
    return None


async def run_rate_sweep(
    runner: LevelRunner,
    spec: RateSweepSpec,
    *,
    on_level: Callable[[LevelOutcome], None] | None = None,
    on_record: Callable[[str, RequestRecord], None] | None = None,
    observer: SweepObserver | None = None,
) -> tuple[SweepState, dict[str, Any]]:
    """Measure the rate range an open-loop client can offer and where latency departs from idle."""
    state = SweepState()
    precision = PrecisionRule(spec.precision, spec.min_level_s, spec.max_level_s)

    async def measure(level: LevelSpec, phase: str) -> LevelResult:
        label = level.label if level.mode == "rate" else f"{phase} {level.label}"
        if observer:
            observer.level_started(level, Decision(level.concurrency, phase, phase))

        def record_cb(r: RequestRecord) -> None:
            if on_record:
                on_record(label, r)

        started = time.monotonic()
        outcome = await runner.run_level(level, label=label, on_record=record_cb, precision=precision)
        state.spent_s += outcome.benchmark_s if outcome.benchmark_s is not None else time.monotonic() - started
        outcome.level.extra["phase"] = phase
        state.levels.append(outcome.level)
        if on_level:
            on_level(outcome)
        if observer:
            observer.level_finished(outcome, None)
        return outcome.level

    baseline: LevelResult | None = None
    rates = list(spec.rates or ())
    summary: dict[str, Any] = {}
    if not rates:
        baseline = await measure(LevelSpec(mode="steady", concurrency=1, duration_s=spec.max_level_s,
                                           warmup=spec.warmup), "synchronous")
        peak = await measure(LevelSpec(mode="steady", concurrency=spec.throughput_concurrency,
                                       duration_s=spec.max_level_s, warmup=spec.warmup), "throughput")
        lo, hi = baseline.request_throughput, peak.request_throughput
        if lo <= 0 or hi <= lo:
            state.stop_reason = "no rate range: the throughput level is not faster than the synchronous one"
            return state, {"rate_sweep": {"synchronous_rate": lo, "max_rate": hi, "rates": []}}
        rates = [lo + (hi - lo) * k / (spec.steps + 1) for k in range(1, spec.steps + 1)]
        summary = {"synchronous_rate": lo, "max_rate": hi}
    for rate in rates:
        lv = await measure(LevelSpec(mode="rate", rate=round(rate, 3), burstiness=spec.burstiness,
                                     duration_s=spec.max_level_s, warmup=spec.warmup), "rate")
        if lv.level_failed:
            state.stop_reason = f"rate {rate:g}/s failed (mostly {lv.dominant_error})"
            break
    else:
        state.stop_reason = "rate sweep finished"
    rate_levels = [lv for lv in state.levels if lv.rate is not None]
    summary.update({
        "rates": [lv.rate for lv in rate_levels],
        "departure_rate": departure_rate(rate_levels, baseline),
        "low_load_e2e_p50_ms": baseline.e2e_ms.p50 if baseline else None,
    })
    return state, {"rate_sweep": summary, "stop_reason": state.stop_reason, "benchmark_seconds": state.spent_s}
