"""The live view: what is being measured right now, and the levels finished so far.

The load side updates a plain ``LevelProgress``; the view polls it a few times a second (Rich's
``Live`` refresh), so the hot path never formats text. The view writes to stderr, and only when
it is a terminal; tables and summaries go to stdout.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from plateau_bench.analysis.plateau import Decision
from plateau_bench.records import LevelResult, RequestRecord
from plateau_bench.report.terminal import level_table
from plateau_bench.spec import LevelSpec


@dataclass
class LevelProgress:
    """Mutable counters of the level in progress (written by the load side, read by the view)."""

    label: str = ""
    phase: str = ""
    started: float = field(default_factory=time.monotonic)
    total_requests: int | None = None
    max_seconds: float | None = None
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    ci_rel: float | None = None
    precision: float | None = None
    server_running: float | None = None
    server_waiting: float | None = None
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4096))

    def record(self, r: RequestRecord) -> None:
        self.done += 1
        if r.error is not None:
            self.failed += 1
        self._recent.append((time.monotonic(), r.output_tokens))

    def tok_per_s(self, horizon_s: float = 5.0) -> float:
        now = time.monotonic()
        recent = [n for t, n in self._recent if now - t <= horizon_s]
        span = min(horizon_s, now - self.started)
        return sum(recent) / span if span > 0 else 0.0


class LiveView:
    """Rich live display driven by a sweep (implements the sweep observer protocol)."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True,
                 est_levels: int = 12) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.progress = LevelProgress()
        self.levels: list[LevelResult] = []
        self._durations: list[float] = []
        self._est_levels = est_levels
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=4,
                              transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    # sweep observer protocol
    def level_started(self, level: LevelSpec, decision: Decision) -> None:
        self.progress = LevelProgress(label=level.label, phase=decision.phase,
                                      total_requests=level.total_requests(), max_seconds=level.duration_s)

    def level_finished(self, outcome: object, gain: float | None) -> None:
        level = getattr(outcome, "level", None)
        if isinstance(level, LevelResult):
            self.levels.append(level)
        self._durations.append(time.monotonic() - self.progress.started)

    def _render(self) -> Group:
        p = self.progress
        elapsed = time.monotonic() - p.started
        line = Text()
        line.append(f"measuring {p.label} ", style="bold cyan")
        line.append(f"[{p.phase}] " if p.phase else "")
        if p.total_requests:
            line.append(f"{p.done}/{p.total_requests} requests ")
        else:
            line.append(f"{p.done} requests ")
        line.append(f"| {elapsed:5.1f}s")
        if p.max_seconds:
            line.append(f"/{p.max_seconds:.0f}s max")
        line.append(f" | in flight {p.in_flight} | {p.tok_per_s():,.0f} tok/s | errors {p.failed}")
        if p.ci_rel is not None and p.precision is not None:
            line.append(f" | precision {p.ci_rel:.1%} (target {p.precision:.0%})")
        if p.server_running is not None:
            line.append(f" | server running {p.server_running:.0f} waiting {p.server_waiting or 0:.0f}")
        if self._durations:
            avg = sum(self._durations) / len(self._durations)
            left = max(self._est_levels - len(self._durations), 1) * avg
            line.append(f" | ~{left:.0f}s left (estimate)", style="dim")
        parts: list[object] = []
        if self.levels:
            parts.append(level_table(self.levels))
        parts.append(line)
        return Group(*parts)  # type: ignore[arg-type]
