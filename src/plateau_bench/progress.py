"""Live counters of the level being measured: written by the load side, read by the live view.

A plain mutable object in the lowest layer, so the driver (which counts) and the presentation (which
polls a few times a second) share it without importing each other. The hot path only increments.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from plateau_bench.records import RequestRecord


@dataclass
class LevelProgress:
    """Counters of the level in progress."""

    label: str = ""
    phase: str = ""
    started: float = field(default_factory=time.monotonic)
    total_requests: int | None = None
    max_seconds: float | None = None
    stretch_seconds: float | None = None   # --max-level-time auto: how far past max_seconds it may go
    done: int = 0
    failed: int = 0
    hung: int = 0
    in_flight: int = 0
    draining: bool = False
    ci_rel: float | None = None
    precision: float | None = None
    server_running: float | None = None
    server_waiting: float | None = None
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4096))

    def record(self, r: RequestRecord) -> None:
        self.done += 1
        if r.error is not None:
            self.failed += 1
        else:  # tokens of failed requests are not throughput, not even live
            self._recent.append((time.monotonic(), r.output_tokens))

    def tok_per_s(self, horizon_s: float = 5.0) -> float:
        now = time.monotonic()
        recent = [n for t, n in self._recent if now - t <= horizon_s]
        span = min(horizon_s, now - self.started)
        return sum(recent) / span if span > 0 else 0.0
