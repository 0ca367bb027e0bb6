"""What to measure next: one plan per kind of sweep, behind one interface.

A ``Plan`` looks at the levels measured so far and names the next level (its spec, label and the
phase that explains it) or why the sweep is over. The loop (``sweep.loop``) is the same for every
plan: it runs the level, persists it, and applies the stop rules every sweep shares (budget, error
rate, SLO). So a resumed sweep of any kind continues from its saved levels.

* ``ConcurrencyPlan``: closed loop. A fixed grid, or the adaptive search of ``analysis.plateau``
  (double until two flat doublings, then bisect the knee's bracket).
* ``RatePlan``: open loop. Given rates, or ``auto``: a synchronous level (C=1), a maximum-throughput
  level (C=``throughput_concurrency``), then ``steps`` rates evenly between their request rates.
* ``SloSearchPlan``: the largest load meeting every SLO (``--find``).
* ``OneLevelPlan``: exactly one given level (``plateau run``).

Beside the next level, a plan answers what the code around it would otherwise ask of its kind: the
widest load it may drive (``widest``), how many levels to expect (``planned_levels``), whether any of
its levels is a burst (``closed_steady``), whether it can be resumed, and what a result of it
concludes (``conclude``: plateau and knee, open-loop summary, SLO boundary, verdict).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.open_loop import rate_summary
from plateau_bench.analysis.plateau import next_concurrency, plateau_and_knee, point_of
from plateau_bench.analysis.slo import Slo
from plateau_bench.analysis.slo_boundary import bracket, load_of, slo_boundary
from plateau_bench.errors import ConfigError
from plateau_bench.result import LevelResult, ResultFile, SearchSettings, SloSummary, SweepSettings
from plateau_bench.roofline import Roofline
from plateau_bench.spec import LevelSpec, Mode

RATE_STEPS = 6


@dataclass(frozen=True)
class Step:
    level: LevelSpec | None    # None: the sweep is over
    label: str = ""
    phase: str = ""
    reason: str = ""           # why (shown in the live view, or as the stop reason)


class Plan(Protocol):
    """What the loop and the job ask of a plan (``PlanDefaults`` gives the common answers)."""

    @property
    def limits(self) -> SweepLimits: ...

    def next(self, levels: Sequence[LevelResult]) -> Step: ...

    def settings(self) -> SweepSettings | None: ...

    def widest(self) -> int: ...

    def planned_levels(self) -> int: ...

    def closed_steady(self) -> bool: ...

    def cannot_resume(self) -> str | None: ...

    def adaptive_search(self) -> SearchSettings | None: ...

    def single_level(self) -> LevelSpec | None: ...

    def prompts_to_prepare(self) -> int | None: ...

    def sends(self) -> int | None: ...

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None: ...


class PlanDefaults:
    """The answers most plans share; a plan overrides what its kind does differently."""

    def planned_levels(self) -> int:
        return 8

    def closed_steady(self) -> bool:
        """Whether no level is a burst (a burst of C requests would send only the first turns of sessions)."""
        return True

    def cannot_resume(self) -> str | None:
        return None

    def adaptive_search(self) -> SearchSettings | None:
        """The search whose doubling bar a growing level may stop at (``sweep.loop``), if any."""
        return None

    def single_level(self) -> LevelSpec | None:
        return None

    def prompts_to_prepare(self) -> int | None:
        """The prompts to prepare before the first level (None: each level builds its own)."""
        return None

    def sends(self) -> int | None:
        """The requests the plan sends in all, when known in advance (a dataset too small is refused)."""
        return None

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None:
        """The verdict a single level supports: only what one level can show."""
        result.verdict = diagnose(levels, engine=engine, roofline=roofline)


def conclude_open_loop(result: ResultFile, levels: Sequence[LevelResult], engine: str | None,
                       roofline: Roofline | None) -> None:
    """An open loop (given rates, an auto rate sweep, a trace at growing time scales): the rate summary and
    the verdict it supports."""
    result.rate_sweep = rate_summary(levels)
    result.verdict = diagnose(levels, engine=engine, open_loop=result.rate_sweep, roofline=roofline)


AUTO_LEVEL_S = 60.0      # --max-level-time auto: a level's time when it has a steady window by then ...
AUTO_STRETCH_S = 600.0   # ... and how long one without may go on while the server answers


@dataclass(frozen=True)
class SweepLimits:
    """Stop rules every sweep shares, and the steady-level timing."""

    precision: float = 0.02
    min_level_s: float = 5.0
    max_level_s: float = 60.0
    warmup: int = 0
    slos: tuple[Slo, ...] = ()
    budget_s: float | None = None
    max_error_rate: float = 0.2
    repeat: int = 1                # --repeat: rounds over the levels (``sweep.loop``)
    burstiness: float = 1.0        # open loop: the rate levels' gamma shape (repeats re-measure them)
    drain: bool = True             # --no-drain: a precise steady level cancels its requests in flight
    warm: bool = False             # --warm-levels: steady levels keep the server loaded between them
    level_stretch_s: float | None = None   # --max-level-time auto: a closed-loop level with no steady window
    #                                        at max_level_s goes on up to this (``analysis.convergence``)

    @property
    def steady_bound_s(self) -> float:
        """How long a closed-loop level may run at most (``max_level_s``, or its stretch)."""
        return max(self.max_level_s, self.level_stretch_s or 0.0)

    def validate(self, steady: bool) -> None:
        if self.budget_s is not None and steady and self.budget_s < self.min_level_s:
            raise ConfigError(
                f"--budget {self.budget_s:g}s is below one level (--min-level-time {self.min_level_s:g}s)"
            )
        if not 0 < self.precision < 1:
            raise ConfigError(f"--precision must be in (0, 1) (got {self.precision})")
        if self.min_level_s <= 0 or self.max_level_s < self.min_level_s:
            raise ConfigError("--min-level-time must be > 0 and <= --max-level-time")
        if not 0 < self.max_error_rate <= 1:
            raise ConfigError(f"--max-error-rate must be in (0, 1] (got {self.max_error_rate})")
        check_repeat(self.repeat)


MAX_REPEAT = 100


def check_repeat(repeat: int) -> None:
    if not 1 <= repeat <= MAX_REPEAT:
        raise ConfigError(f"--repeat must be between 1 and {MAX_REPEAT} (got {repeat})")


def _common(limits: SweepLimits) -> SweepSettings:
    return SweepSettings(precision=limits.precision, min_level_s=limits.min_level_s,
                         max_level_s=limits.max_level_s, warmup=limits.warmup,
                         slo=[s.describe() for s in limits.slos], budget_s=limits.budget_s,
                         max_error_rate=limits.max_error_rate, drain=limits.drain, warm=limits.warm,
                         level_stretch_s=limits.level_stretch_s)


@dataclass(frozen=True)
class ConcurrencyPlan(PlanDefaults):
    mode: Mode = "steady"                        # steady | burst
    concurrencies: tuple[int, ...] | None = None  # a fixed grid; None = adaptive search
    search: SearchSettings = field(default_factory=SearchSettings)
    limits: SweepLimits = field(default_factory=SweepLimits)

    def validate(self) -> None:
        self.limits.validate(self.mode == "steady")
        if not 0 < self.search.plateau_gain < 1:
            raise ConfigError(f"--plateau-gain must be in (0, 1) (got {self.search.plateau_gain})")
        if self.search.start <= 0 or self.search.max_concurrency < self.search.start:
            raise ConfigError("--start must be >= 1 and <= --max-concurrency")

    def settings(self) -> SweepSettings:
        return msgspec.structs.replace(
            _common(self.limits), mode=self.mode, search=self.search,
            concurrencies=list(self.concurrencies) if self.concurrencies else None)

    def next(self, levels: Sequence[LevelResult]) -> Step:
        if self.concurrencies is not None:
            done = {lv.concurrency for lv in levels}
            c = next((c for c in self.concurrencies if c not in done), None)
            return self._step(c, "grid", "fixed grid") if c is not None else Step(None, reason="fixed grid finished")
        decision = next_concurrency([point_of(lv) for lv in levels if lv.mode != "rate"], self.search)
        if decision.concurrency is None:
            return Step(None, reason=decision.reason)
        return self._step(decision.concurrency, decision.phase, decision.reason)

    def _step(self, c: int, phase: str, reason: str) -> Step:
        w = self.limits.warmup
        level = (LevelSpec(mode="burst", concurrency=c, num_requests=c, warmup=w) if self.mode == "burst"
                 else LevelSpec(mode="steady", concurrency=c, duration_s=self.limits.steady_bound_s, warmup=w,
                                 max_wall_s=self.limits.steady_bound_s, warm=self.limits.warm))
        return Step(level, level.label, phase, reason)

    def widest(self) -> int:
        return max(self.concurrencies) if self.concurrencies else self.search.max_concurrency

    def planned_levels(self) -> int:
        return len(self.concurrencies) if self.concurrencies else 12

    def closed_steady(self) -> bool:
        return self.mode != "burst"

    def adaptive_search(self) -> SearchSettings | None:
        return self.search if self.concurrencies is None else None

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None:
        """Plateau and knee, the largest level meeting the SLOs, and the verdict placed on them."""
        result.plateau, result.knee = plateau_and_knee(levels, self.search)
        if self.limits.slos:
            result.slo = SloSummary(bounds=[s.describe() for s in self.limits.slos],
                                    max_concurrency=slo_max.concurrency if slo_max else None,
                                    throughput=slo_max.output_throughput if slo_max else None)
        result.verdict = diagnose(levels, engine=engine, plateau_gain=self.search.plateau_gain,
                                  plateau=result.plateau, knee=result.knee, roofline=roofline)


@dataclass(frozen=True)
class RatePlan(PlanDefaults):
    rates: tuple[float, ...] | None = None       # None: auto
    throughput_concurrency: int = 256
    steps: int = RATE_STEPS
    burstiness: float = 1.0
    limits: SweepLimits = field(default_factory=SweepLimits)

    def validate(self) -> None:
        self.limits.validate(True)
        if not 0 < self.burstiness < math.inf:
            raise ConfigError(f"--burstiness must be > 0 (got {self.burstiness})")

    def settings(self) -> SweepSettings:
        return msgspec.structs.replace(
            _common(self.limits), mode="rate", rates=list(self.rates) if self.rates else None,
            throughput_concurrency=self.throughput_concurrency, rate_steps=self.steps, burstiness=self.burstiness)

    def _steady(self, c: int, phase: str) -> Step:
        level = LevelSpec(mode="steady", concurrency=c, duration_s=self.limits.steady_bound_s,
                          warmup=self.limits.warmup, max_wall_s=self.limits.steady_bound_s)
        return Step(level, f"{phase} {level.label}", phase, phase)

    def rate_grid(self, levels: Sequence[LevelResult]) -> list[float] | None:
        """The open-loop rates to measure (None until the auto levels are in)."""
        if self.rates:
            return list(self.rates)
        sync = next((lv for lv in levels if lv.phase == "synchronous"), None)
        peak = next((lv for lv in levels if lv.phase == "throughput"), None)
        if sync is None or peak is None:
            return None
        lo, hi = sync.request_throughput, peak.request_throughput
        if lo <= 0 or hi <= lo:
            return []
        return [round(lo + (hi - lo) * k / (self.steps + 1), 3) for k in range(1, self.steps + 1)]

    def next(self, levels: Sequence[LevelResult]) -> Step:
        phases = {lv.phase for lv in levels}
        if not self.rates and "synchronous" not in phases:
            return self._steady(1, "synchronous")
        if not self.rates and "throughput" not in phases:
            return self._steady(self.throughput_concurrency, "throughput")
        grid = self.rate_grid(levels) or []
        if not grid:
            return Step(None, reason="no rate range: the throughput level is not faster than the synchronous one")
        failed = next((lv for lv in levels if lv.mode == "rate" and lv.level_failed), None)
        if failed is not None:
            return Step(None, reason=f"rate {failed.rate:g}/s failed (mostly {failed.dominant_error})")
        done = {lv.rate for lv in levels if lv.mode == "rate"}
        rate = next((r for r in grid if r not in done), None)
        if rate is None:
            return Step(None, reason="rate sweep finished")
        level = LevelSpec(mode="rate", rate=rate, burstiness=self.burstiness, duration_s=self.limits.max_level_s,
                          warmup=self.limits.warmup, max_wall_s=self.limits.max_level_s)
        return Step(level, level.label, "rate", "open-loop rate")

    def widest(self) -> int:
        return self.throughput_concurrency

    def cannot_resume(self) -> str | None:
        return None if self.rates is not None else \
            "--resume continues concurrency sweeps and given rates; an auto rate sweep starts afresh"

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None:
        conclude_open_loop(result, levels, engine, roofline)


FINDS = ("max-concurrency", "max-rate")


@dataclass(frozen=True)
class SloSearchPlan(PlanDefaults):
    """``--find``: double the load until an SLO breaks, then bisect to the boundary (``analysis.slo_boundary``).

    Concurrency is bisected geometrically on integers until one apart or ``resolution`` apart; a rate
    until ``resolution`` apart. If the first load already breaks an SLO, the load is halved until one
    meets it (down to C=1, or to ``start / 64`` requests/s).
    """

    find: str = "max-concurrency"
    mode: Mode = "steady"              # closed-loop levels: steady | burst
    start: float = 1.0                 # first concurrency, or first rate (req/s)
    max_load: float = 4096.0
    resolution: float = 0.05
    burstiness: float = 1.0
    limits: SweepLimits = field(default_factory=SweepLimits)

    def validate(self) -> None:
        self.limits.validate(self.mode == "steady")
        if self.find not in FINDS:
            raise ConfigError(f"--find must be {' or '.join(FINDS)} (got {self.find!r})")
        if not self.limits.slos:
            raise ConfigError("--find searches the largest load that meets an SLO: give --slo too")
        if not 0 < self.resolution < 1:
            raise ConfigError(f"--resolution must be in (0, 1) (got {self.resolution})")
        if not 0 < self.start <= self.max_load < math.inf:
            names = ("--start-rate", "--max-rate") if self.open_loop else ("--start", "--max-concurrency")
            raise ConfigError(f"{names[0]} must be > 0 and <= {names[1]}")

    @property
    def open_loop(self) -> bool:
        return self.find == "max-rate"

    def settings(self) -> SweepSettings:
        return msgspec.structs.replace(
            _common(self.limits), mode="rate" if self.open_loop else self.mode, find=self.find,
            resolution=self.resolution, burstiness=self.burstiness if self.open_loop else None)

    def _step(self, load: float, reason: str) -> Step:
        w, t = self.limits.warmup, self.limits.max_level_s
        if self.open_loop:
            level = LevelSpec(mode="rate", rate=round(load, 4), burstiness=self.burstiness, duration_s=t, warmup=w,
                              max_wall_s=t)
        elif self.mode == "burst":
            level = LevelSpec(mode="burst", concurrency=int(load), num_requests=int(load), warmup=w)
        else:
            bound = self.limits.steady_bound_s
            level = LevelSpec(mode="steady", concurrency=int(load), duration_s=bound, warmup=w, max_wall_s=bound)
        return Step(level, level.label, "find", reason)

    def _narrow_enough(self, lo: float, hi: float) -> bool:
        return hi / lo <= 1 + self.resolution or (not self.open_loop and hi - lo <= 1)

    def _middle(self, lo: float, hi: float) -> float:
        mid = math.sqrt(lo * hi)
        return mid if self.open_loop else float(min(max(round(mid), int(lo) + 1), int(hi) - 1))

    def next(self, levels: Sequence[LevelResult]) -> Step:
        lo, hi = bracket(levels, self.limits.slos)
        if not levels:
            return self._step(self.start, "first load")
        if hi is None:
            top = max(load_of(lv) for lv in levels)
            if top * 2 > self.max_load:
                return Step(None, reason=f"every load up to {top:g} meets the SLO (the search stops at "
                                         f"{self.max_load:g})")
            return self._step(top * 2, "every SLO met: doubling")
        if lo is None:
            floor = 1.0 if not self.open_loop else self.start / 64
            if load_of(hi) / 2 < floor:
                return Step(None, reason="even the lowest load breaks the SLO")
            return self._step(load_of(hi) / 2 if self.open_loop else float(max(1, int(load_of(hi)) // 2)),
                              "the SLO breaks already: halving")
        if self._narrow_enough(load_of(lo), load_of(hi)):
            return Step(None, reason=f"SLO boundary located between {load_of(lo):g} and {load_of(hi):g}")
        return self._step(self._middle(load_of(lo), load_of(hi)), "bisecting the SLO boundary")

    def widest(self) -> int:
        return 4096 if self.open_loop else int(self.max_load)   # an open loop: as many as the rate needs

    def closed_steady(self) -> bool:
        return self.open_loop or self.mode != "burst"

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None:
        """The SLO boundary, then what the levels measured on the way show, as an open or closed loop."""
        result.slo_boundary = slo_boundary(levels, self.limits.slos, self.find)
        if self.open_loop:
            result.verdict = diagnose(levels, engine=engine, open_loop=rate_summary(levels), roofline=roofline)
            return
        ConcurrencyPlan(mode=self.mode, limits=self.limits).conclude(result, levels, slo_max, engine, roofline)


@dataclass(frozen=True)
class OneLevelPlan(PlanDefaults):
    """Exactly one given level (``plateau run``); ``repeat`` measures it that many times."""

    level: LevelSpec
    repeat: int = 1

    @property
    def limits(self) -> SweepLimits:
        return SweepLimits(repeat=self.repeat)

    def next(self, levels: Sequence[LevelResult]) -> Step:
        if levels:
            return Step(None, reason="level measured")
        return Step(self.level, self.level.label, "single", "one level")

    def settings(self) -> SweepSettings | None:
        return None

    def single_level(self) -> LevelSpec | None:
        return self.level

    def widest(self) -> int:
        return self.level.concurrency or self.level.max_concurrency or 0

    def planned_levels(self) -> int:
        return 1

    def prompts_to_prepare(self) -> int | None:
        """The requests its prompts are prepared for (an open-ended level: a generous sample)."""
        n = self.level.total_requests() or max(self.level.concurrency or 0, self.level.max_concurrency or 0, 256)
        return n + self.level.warmup

    def sends(self) -> int | None:
        """The requests it sends in all, when known in advance."""
        n = self.level.total_requests()
        return (n + self.level.warmup) * self.repeat if n else None
