"""A trace replayed at increasing time scales (``plateau sweep --trace FILE``): where it stops keeping up.

Each level replays the whole trace (open loop, at its recorded times divided by the scale). Given
scales (``--time-scale 1,2,4``) are measured in order; ``auto`` starts at 1 and doubles until a
level no longer keeps up or the scale reaches ``max_scale``. A level keeps up when the server
completed the requests at no less than ``KEEP_UP`` of the rate they were sent at (the level's
request throughput over its window against the trace's rate at that scale) and fewer than
``max_error_rate`` of them failed: past that point the server's queue grows for as long as the
trace lasts, which is the plateau of an open loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from plateau_bench.result import LevelResult, ResultFile, SweepSettings
from plateau_bench.roofline import Roofline
from plateau_bench.spec import LevelSpec
from plateau_bench.sweep.plan import PlanDefaults, Step, SweepLimits, _common, conclude_open_loop

KEEP_UP = 0.9
MAX_SCALE = 1024.0


@dataclass(frozen=True)
class TracePlan(PlanDefaults):
    rate: float                              # the trace's mean rate at time scale 1 (requests/s)
    requests: int
    scales: tuple[float, ...] | None = None  # None: auto (1, 2, 4, ... until it stops keeping up)
    max_concurrency: int | None = None
    limits: SweepLimits = field(default_factory=SweepLimits)
    max_scale: float = MAX_SCALE

    def level(self, scale: float) -> LevelSpec:
        return LevelSpec(mode="rate", rate=self.rate * scale, num_requests=self.requests,
                         max_concurrency=self.max_concurrency, time_scale=scale)

    def next(self, levels: Sequence[LevelResult]) -> Step:
        done = {lv.label for lv in levels}
        if self.scales is not None:
            todo = next((s for s in self.scales if self.level(s).label not in done), None)
            if todo is None:
                return Step(None, reason="given time scales measured")
            return Step(self.level(todo), self.level(todo).label, "grid", "given time scales")
        if levels:
            last = levels[-1]
            scale = last.rate / self.rate if last.rate else 1.0
            if not keeps_up(last, self.limits.max_error_rate):
                return Step(None, reason=f"the replay stopped keeping up at x{scale:g}: "
                                         f"{last.request_throughput:.1f} of {last.rate or 0.0:.1f} requests/s done")
            if scale * 2 > self.max_scale:
                return Step(None, reason=f"time scale x{self.max_scale:g} reached, still keeping up")
            nxt = self.level(scale * 2)
            return Step(nxt, nxt.label, "grow", "kept up: twice as fast")
        first = self.level(1.0)
        return Step(first, first.label, "grow", "the trace as recorded")

    def settings(self) -> SweepSettings:
        return msgspec.structs.replace(_common(self.limits), mode="rate", trace=True,
                                       time_scales=list(self.scales) if self.scales is not None else None)

    def widest(self) -> int:
        return 1024   # an open loop: connections open as the replay needs them

    def conclude(self, result: ResultFile, levels: Sequence[LevelResult], slo_max: LevelResult | None,
                 engine: str | None, roofline: Roofline | None) -> None:
        conclude_open_loop(result, levels, engine, roofline)


def keeps_up(level: LevelResult, max_error_rate: float) -> bool:
    offered = level.rate or 0.0
    failed = level.failed / level.num_requests if level.num_requests else 1.0
    return failed < max_error_rate and level.request_throughput >= KEEP_UP * offered
