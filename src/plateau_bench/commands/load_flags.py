"""The load's flags: one level (``run``), a sweep's search (``sweep``), the grid and stop rules every sweep
shares (``sweep``, ``tune``). Declared once here; the plans are built in ``sweep.build``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.groups import OptionGroup
from plateau_bench.commands.options import Drain
from plateau_bench.spec import parse_duration
from plateau_bench.sweep.build import LevelAsk, SweepAsk
from plateau_bench.sweep.plan import AUTO_LEVEL_S, AUTO_STRETCH_S, SweepLimits

LEVEL = "Load level"
SEARCH = "Sweep"

Burstiness = Annotated[float, typer.Option("--burstiness", help="Open loop: gamma shape of inter-arrivals "
                                           "(1 = Poisson).", rich_help_panel=LEVEL)]
Warmup = Annotated[int, typer.Option("--warmup", help="Warm-up requests (per level), excluded from all figures.",
                                     rich_help_panel=LEVEL)]
NumRequests = Annotated[int | None, typer.Option("--num-requests", "-n", help="Requests to send per level (burst "
                                                 "default: = concurrency).", rich_help_panel=LEVEL)]
Duration = Annotated[str | None, typer.Option("--duration", help="How long a steady or rate level runs, e.g. 60s "
                                              "(sim: virtual time, default 60s).", rich_help_panel=LEVEL)]
Grid = Annotated[str | None, typer.Option("--concurrency", "-c", help="A fixed grid, e.g. 1,16,64,256 (default: "
                                          "the adaptive search).", rich_help_panel=SEARCH)]
Ceiling = Annotated[int, typer.Option("--max-concurrency", help="The sweep never goes above this concurrency.",
                                      rich_help_panel=SEARCH)]
SloFlag = Annotated[str | None, typer.Option("--slo", help="e.g. ttft_p99=2s,tpot_p99=100ms: a sweep stops at the "
                                             "first level violating it (tune ranks settings by the largest load "
                                             "meeting it).", rich_help_panel=SEARCH)]


class LevelFlags(OptionGroup, frozen=True, kw_only=True):
    """One load level (``run``): a burst, a steady closed loop, an open-loop rate or a trace's replay."""

    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", help="Closed-loop workers (burst or "
                                                    "steady).", rich_help_panel=LEVEL)] = None
    num_requests: NumRequests = None
    duration: Duration = None
    rate: Annotated[float | None, typer.Option("--rate", help="Open loop: requests/s (Poisson or gamma).",
                                               rich_help_panel=LEVEL)] = None
    burstiness: Burstiness = 1.0
    max_concurrency: Annotated[int | None, typer.Option("--max-concurrency", help="Open loop: bound on requests "
                                                        "in flight.", rich_help_panel=LEVEL)] = None
    warmup: Warmup = 0
    mode: Annotated[str | None, typer.Option("--mode", help="burst | steady | rate (default: from the other "
                                             "flags).", rich_help_panel=LEVEL)] = None
    time_scale: Annotated[float, typer.Option("--time-scale", help="--trace: replay this many times faster "
                                              "(offsets divided by it).", rich_help_panel=LEVEL)] = 1.0

    def ask(self) -> LevelAsk:
        return LevelAsk(mode=self.mode, concurrency=self.concurrency, num_requests=self.num_requests,
                        duration=self.duration, rate=self.rate, burstiness=self.burstiness,
                        max_concurrency=self.max_concurrency, warmup=self.warmup, time_scale=self.time_scale)


class GridFlags(OptionGroup, frozen=True, kw_only=True):
    """The concurrencies a sweep visits: a fixed grid, or the adaptive search up to a ceiling."""

    concurrency: Grid = None
    max_concurrency: Ceiling = 4096


class SearchFlags(GridFlags, frozen=True, kw_only=True):
    """What a sweep searches (``sweep``): concurrencies, rates, an SLO boundary or a trace's time scales."""

    mode: Annotated[str, typer.Option("--mode", help="steady (closed loop, steady window) | burst (num-requests = "
                                      "C, the classic benchmark).", rich_help_panel=SEARCH)] = "steady"
    rate: Annotated[str | None, typer.Option("--rate", help="Open-loop sweep instead: 'auto' (synchronous rate to "
                                             "maximum throughput) or rates, e.g. 1,2,5 req/s.",
                                             rich_help_panel=SEARCH)] = None
    burstiness: Burstiness = 1.0
    start: Annotated[int, typer.Option("--start", help="First concurrency of the search.",
                                       rich_help_panel=SEARCH)] = 1
    plateau_gain: Annotated[float, typer.Option("--plateau-gain", help="A doubling that gains less than this "
                                                "(beyond noise) is flat.", rich_help_panel=SEARCH)] = 0.05
    find: Annotated[str | None, typer.Option("--find", help="max-concurrency | max-rate: search the largest load "
                                             "meeting every --slo (bisection), instead of the plateau.",
                                             rich_help_panel=SEARCH)] = None
    resolution: Annotated[float, typer.Option("--resolution", help="--find: stop when the bracket is this close "
                                              "(relative).", rich_help_panel=SEARCH)] = 0.05
    start_rate: Annotated[float, typer.Option("--start-rate", help="--find max-rate: first rate (req/s).",
                                              rich_help_panel=SEARCH)] = 1.0
    max_rate: Annotated[float, typer.Option("--max-rate", help="--find max-rate: never above this (req/s).",
                                            rich_help_panel=SEARCH)] = 10_000.0
    time_scale: Annotated[str, typer.Option("--time-scale", help="--trace: the time scales to replay it at (comma "
                                            "list; 2 = twice as fast), or auto: 1, 2, 4, ... until it stops keeping "
                                            "up.", rich_help_panel=SEARCH)] = "auto"
    goal: Annotated[str, typer.Option("--goal", help="When the adaptive search stops: verdict (as soon as the plateau "
                                      "is confirmed: the verdict and the plateau stand, the knee bracketed by the "
                                      "last doublings), knee (then bisect the knee's bracket 3 times) or curve "
                                      "(until the knee is bracketed within 10 %).",
                                      rich_help_panel=SEARCH)] = "verdict"
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue a sweep saved in this directory (failed "
                                                "or damaged levels are measured again).",
                                                rich_help_panel=SEARCH)] = None

    def ask(self) -> SweepAsk:
        return SweepAsk(concurrency=self.concurrency, mode=self.mode, rate=self.rate, burstiness=self.burstiness,
                        start=self.start, max_concurrency=self.max_concurrency, plateau_gain=self.plateau_gain,
                        find=self.find, resolution=self.resolution, start_rate=self.start_rate,
                        max_rate=self.max_rate, time_scale=self.time_scale, goal=self.goal)


class StopRuleFlags(OptionGroup, frozen=True, kw_only=True):
    """When a level has measured enough, and when a sweep stops (``sweep``, each sweep of ``tune``)."""

    precision: Annotated[float, typer.Option("--precision", help="Steady levels end when the 95 % CI of tok/s is "
                                             "within this.", rich_help_panel=SEARCH)] = 0.02
    min_level_time: Annotated[str, typer.Option("--min-level-time", help="Shortest steady window.",
                                                rich_help_panel=SEARCH)] = "5s"
    max_level_time: Annotated[str, typer.Option("--max-level-time", help="Longest level, e.g. 90s. Default auto: "
                                                "60s, or up to 10m for a level whose requests are too long to "
                                                "leave a steady window in 60s while the server answers.",
                                                rich_help_panel=SEARCH)] = "auto"
    warmup: Warmup = 0
    drain: Drain = True
    warm_levels: Annotated[bool, typer.Option("--warm-levels/--cold-levels", help="Default --warm-levels: keep the "
                                              "server loaded between steady levels (joins spread over a request "
                                              "cycle, windows counted by token arrival, one drain at the end). "
                                              "--cold-levels: every steady level starts from an idle server and "
                                              "drains.", rich_help_panel=SEARCH)] = True
    slo: SloFlag = None
    budget: Annotated[str | None, typer.Option("--budget", help="Stop a sweep before it spends more, e.g. 10m.",
                                               rich_help_panel=SEARCH)] = None
    max_error_rate: Annotated[float, typer.Option("--max-error-rate", help="Stop when a level's failed share "
                                                  "exceeds this.", rich_help_panel=SEARCH)] = 0.2

    def limits(self, *, repeat: int = 1, burstiness: float = 1.0) -> SweepLimits:
        """The validated stop rules (each bad value a one-line error naming its flag)."""
        return SweepLimits(precision=self.precision,
                           min_level_s=parse_duration(self.min_level_time, "--min-level-time"),
                           max_level_s=self._max_level_s(), level_stretch_s=self._stretch_s(), warmup=self.warmup,
                           slos=tuple(parse_slo(self.slo)) if self.slo else (),
                           budget_s=parse_duration(self.budget, "--budget") if self.budget else None,
                           max_error_rate=self.max_error_rate, repeat=repeat, burstiness=burstiness,
                           drain=self.drain, warm=self.warm_levels)

    def _max_level_s(self) -> float:
        return AUTO_LEVEL_S if self._auto() else parse_duration(self.max_level_time, "--max-level-time")

    def _stretch_s(self) -> float | None:
        return AUTO_STRETCH_S if self._auto() else None

    def _auto(self) -> bool:
        return self.max_level_time.strip().lower() == "auto"


ONE_LEVEL, SEARCH_DEFAULTS, STOP_DEFAULTS = LevelFlags(), SearchFlags(), StopRuleFlags()
