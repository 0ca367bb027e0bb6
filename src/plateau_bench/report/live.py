"""The live view: what is being measured right now, and the levels finished so far.

The load side updates a plain ``progress.LevelProgress``; the view polls it a few times a second
(Rich's ``Live`` refresh), so the hot path never formats text. The view writes to stderr, and only when
it is a terminal; tables and summaries go to stdout.
"""

from __future__ import annotations

import time

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from plateau_bench.progress import LevelProgress
from plateau_bench.report.terminal import level_table
from plateau_bench.result import LevelResult
from plateau_bench.spec import LevelSpec


class LiveView:
    """Rich live display driven by a sweep (implements the sweep observer protocol)."""

    def __init__(self, console: Console | None = None, *, enabled: bool = True,
                 est_levels: int = 12, level_s: float | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.progress = LevelProgress()
        self.levels: list[LevelResult] = []
        self._durations: list[float] = []
        self._est_levels = est_levels
        self._level_s = level_s               # --max-level-time auto: the minute a level may stretch past
        self._live: Live | None = None
        self.verdict: str | None = None       # the verdict as it stands after the levels so far
        self.waiting_for: str = ""            # why the sweep goes on

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
    def level_started(self, level: LevelSpec, phase: str) -> None:
        bound = level.duration_s
        soft = self._level_s if level.mode == "steady" and bound and self._level_s and bound > self._level_s else None
        self.progress = LevelProgress(label=level.label, phase=phase, total_requests=level.total_requests(),
                                      max_seconds=soft or bound, stretch_seconds=bound if soft else None)

    def sweep_status(self, verdict: str | None, waiting_for: str) -> None:
        """The verdict as it stands and what the sweep still waits for (the loop's status hook)."""
        self.verdict, self.waiting_for = verdict, waiting_for

    def level_finished(self, level: LevelResult) -> None:
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
        if p.stretch_seconds:
            line.append(f" (up to {p.stretch_seconds:.0f}s for long requests)")
        line.append(f" | in flight {p.in_flight} | {p.tok_per_s():,.0f} tok/s (ok requests) | failed {p.failed}")
        if p.hung:
            line.append(f" (hung {p.hung})", style="red")
        if p.draining:
            line.append(" | draining")
        if p.ci_rel is not None and p.precision is not None:
            line.append(f" | precision {p.ci_rel:.1%} (target {p.precision:.0%})")
        if p.server_running is not None:
            line.append(f" | server running {p.server_running:.0f} waiting {p.server_waiting or 0:.0f}")
        if self._durations:
            avg = sum(self._durations) / len(self._durations)
            left = max(self._est_levels - len(self._durations), 1) * avg
            line.append(f" | ~{left:.0f}s left (estimate)", style="dim")
        parts: list[RenderableType] = []
        if self.levels:
            parts.append(level_table(self.levels))
        if self.verdict or self.waiting_for:
            status = Text()
            status.append(f"verdict so far: {self.verdict or 'none yet'}", style="bold")
            if self.waiting_for:
                status.append(f" | waiting for: {self.waiting_for}")
            parts.append(status)
        parts.append(line)
        return Group(*parts)
