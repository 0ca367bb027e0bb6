"""One warm steady level over HTTP: move the live closed loop (``driver.warm``) to the level's concurrency,
ask the stop rule every check (``StopRule.warm_check``: where the window opens, whether it is precise
enough) and close the level when it says so, handing back the raw ``LevelRun``.

The level's records are the requests that *ended* during it (some were sent in an earlier level), its
``in_flight`` what the requests still streaming at the close had streamed by then; telemetry and the
load generator's health are sampled over the level, on the live load's clock. A first Ctrl-C closes the
level at once (its window ends there) and nothing more is sent; the sweep then cancels what is in flight.
A level closed so before its stop rule had a window measured nothing, and is no level: ``StopRequested``
(the sweep keeps what it finished; what ended in it goes to the level before with the last requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass

from plateau_bench.aio import level_finisher
from plateau_bench.driver.health import HealthSampler
from plateau_bench.driver.level_telemetry import LevelTelemetry
from plateau_bench.driver.load_state import DEAD_TARGET_FAILURES
from plateau_bench.driver.warm import OnRecord, WarmLoad
from plateau_bench.errors import ErrorClass
from plateau_bench.level_run import (
    GAUGE_SCRAPES,
    QUEUED_NOTE,
    WHOLE_LEVEL_NOTE,
    LevelRun,
    StopRequested,
    StopRule,
    WarmCheck,
)
from plateau_bench.progress import LevelProgress
from plateau_bench.records import RequestRecord
from plateau_bench.result import INTERRUPT_NOTE, WarmLevelInfo
from plateau_bench.spec import LevelSpec
from plateau_bench.telemetry.summary import summarize
from plateau_bench.units import NS
from plateau_bench.workload.feed import PromptFeed

CHECK_S = 0.5             # between the stop rule's checks (real time; longer as the level goes on)
CYCLES_IN_WINDOW = 1.25   # a window holds at least this many request cycles (the cycle is a prediction)
WINDOW_NOTE = "warm: from where the rate settled after the concurrency changed, counted by token arrival"


@dataclass
class _Closed:
    records: list[RequestRecord]   # filled when the level closes
    partials: list[RequestRecord]
    end_ns: int
    check: WarmCheck | None
    asked_ns: int | None      # when a first Ctrl-C closed it
    hung_at_bound: int = 0    # requests hung at its time bound (``WarmLoad.hang_at_bound``)
    at_bound: bool = False    # it closed on its time bound


@dataclass
class WarmLevelContext:
    """What the runner hands one warm level besides the level itself."""

    label: str
    feed: PromptFeed
    on_record: OnRecord | None
    progress: LevelProgress | None
    telemetry: LevelTelemetry
    check_s: float = CHECK_S


async def run_warm_level(load: WarmLoad, level: LevelSpec, rule: StopRule, ctx: WarmLevelContext) -> LevelRun:
    """One warm level on the live closed loop (see the module docstring)."""
    started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")
    workers = level.concurrency or 1
    start = load.now()
    was = len(load.active)
    load.plan(workers)
    finish = asyncio.Event()

    def target_gone() -> None:
        load.stop_sending()
        finish.set()

    refused = _Refused(target_gone)
    load.begin_level(ctx.feed, _counted(ctx.on_record, ctx.progress, refused))
    load.set_workers(workers)
    health = HealthSampler(t0_ns=load.t0, in_flight=lambda: len(load.flights))
    health.start()
    try:
        closed = await _measure(load, level, rule, start, ctx, finish)
        if closed.asked_ns is not None and (closed.check is None or closed.check.window_ns is None):
            # Closed by Ctrl-C before it measured anything: no level. What ended in it goes with the live
            # load's last records to the level before (``end_warm``), as the requests still streaming there.
            load.on_record = None
            raise StopRequested(ctx.label)
        closed.records = load.close_level()
    finally:
        health_samples = await health.stop()
        samples = await ctx.telemetry.stop()
    load.learn(workers, closed.records)
    window, note, waves = _window(closed, load, start)
    settled = load.settled_ns
    settled_s = ((settled if settled is not None else closed.end_ns) - start) / NS
    info = WarmLevelInfo(from_concurrency=was, settled_s=settled_s, dropped_s=max(0.0, (window[0] - start) / NS
                                                                                   - settled_s),
                         carried_in=sum(1 for r in closed.records if r.sent_ns < start),
                         carried_out=len(closed.partials), waves=waves,
                         queued=closed.check is not None and closed.check.queued)
    return LevelRun(
        level=level, label=ctx.label, records=closed.records, in_flight=closed.partials, window_ns=window,
        window_note=note, level_start_ns=start, warm=info, benchmark_s=(closed.end_ns - start) / NS,
        started_at=started_at, t0_monotonic_ns=load.t0, server_samples=samples.server, gpu_samples=samples.gpu,
        dcgm_samples=samples.dcgm, health_samples=health_samples, prompts=ctx.feed.use(),
        notes=[*samples.notes, *_notes(closed, start, level)], target_gone=refused.gone)


@dataclass
class _Refused:
    """Refused connections in a row: a server that died answers every request at once with one, and without
    this the level would spin through thousands of instant failures until its time is up."""

    on_gone: Callable[[], None]
    in_a_row: int = 0
    gone: bool = False

    def count(self, r: RequestRecord) -> None:
        self.in_a_row = self.in_a_row + 1 if r.error == ErrorClass.CONNECT else 0
        if self.in_a_row >= DEAD_TARGET_FAILURES and not self.gone:
            self.gone = True
            self.on_gone()


def _counted(on_record: OnRecord | None, progress: LevelProgress | None, refused: _Refused) -> OnRecord:
    """The level's record handler: refused connections counted, the live view fed."""

    def handle(r: RequestRecord) -> None:
        refused.count(r)
        if progress is not None:
            progress.record(r)
            if r.error == ErrorClass.HUNG:
                progress.hung += 1
        if on_record is not None:
            on_record(r)

    return handle


async def _measure(load: WarmLoad, level: LevelSpec, rule: StopRule, start: int, ctx: WarmLevelContext,
                   finish: asyncio.Event) -> _Closed:
    """Check every ``check_s`` (the checks sparser as the level goes on, as their cost grows with it) until
    the rule is done, a first Ctrl-C, the target is gone (``finish`` set) or the prompts ran out; then close
    the level."""
    progress = ctx.progress
    if progress is not None:
        progress.precision = rule.precision
    asked: list[int] = []

    def finish_now() -> None:   # a first Ctrl-C (aio.first_interrupt_finishes): the level closes at once
        asked.append(load.now())
        load.stop_sending()
        finish.set()

    check: WarmCheck | None = None
    scraper = ctx.telemetry.scraper   # its gauges need a few scrapes inside the window to mean anything
    gauge_window_s = GAUGE_SCRAPES * scraper.interval_s if scraper is not None else 0.0
    with level_finisher(finish_now):
        while True:
            wait_s = max(ctx.check_s, 0.02 * (load.now() - start) / NS)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finish.wait(), timeout=wait_s)
            if load.failure is not None:
                raise load.failure
            load.hang_silent(no_yardstick_s=rule.max_s)
            now, partials = load.now(), load.partials()
            if finish.is_set():
                break
            settled = load.settled_ns
            gauges = (summarize(scraper.samples, settled, now).values
                      if scraper is not None and rule.held_running is not None and settled is not None else None)
            check = rule.warm_check([r for r in load.level_records if r.error is None] + partials,
                                    level_start_ns=start, settled_ns=settled, now_ns=now,
                                    workers=level.concurrency or 1, min_window_s=max(CYCLES_IN_WINDOW * load.cycle_s,
                                                                                     gauge_window_s),
                                    cycle_s=load.cycle_s, gauges=gauges)
            _show(progress, load, check)
            if check.done or load.ran_out:
                break
    bound = level.max_wall_s
    hung, reached = 0, False
    if bound is not None:
        silence_s = min(load.grace_min_ns / NS, bound)
        load.time_bound = (start + round(bound * NS), silence_s)
        reached = now - start >= bound * NS
        hung = load.hang_at_bound(silence_s) if reached else 0
        partials = load.partials() if hung else partials
    return _Closed([], partials, now, check, asked[0] if asked else None, hung, reached)


def _show(progress: LevelProgress | None, load: WarmLoad, check: WarmCheck) -> None:
    if progress is None:
        return
    progress.in_flight = len(load.flights)
    progress.ci_rel = check.ci_rel


def _window(closed: _Closed, load: WarmLoad, start: int) -> tuple[tuple[int, int], str, bool]:
    """The level's window, its note, and whether first tokens came in waves."""
    check = closed.check
    if check is not None and check.window_ns is not None:
        if closed.asked_ns is None:
            note = WHOLE_LEVEL_NOTE if check.whole_level else QUEUED_NOTE if check.queued else WINDOW_NOTE
            return check.window_ns, note, check.waves
        return (check.window_ns[0], closed.end_ns), WINDOW_NOTE + " (closed by Ctrl-C)", check.waves
    settled = load.settled_ns if load.settled_ns is not None and load.settled_ns < closed.end_ns else start
    if closed.asked_ns is not None:
        return (settled, closed.end_ns), "warm: closed by Ctrl-C: window from where the concurrency was reached", False
    return (settled, closed.end_ns), ("warm: the level's time ran out before its rate settled: window from where "
                                      "the concurrency was reached"), False


def _notes(closed: _Closed, start: int, level: LevelSpec) -> list[str]:
    """What happened out of the ordinary (how the level went warm is in its ``warm`` record)."""
    notes = []
    if closed.asked_ns is not None:
        notes.append(f"{INTERRUPT_NOTE}{(closed.asked_ns - start) / NS:.1f} s: its window closes there, nothing "
                     f"was sent after it, and the {len(closed.partials)} request(s) then in flight are cancelled "
                     "(their tokens until then are in the window)")
    if closed.at_bound and closed.hung_at_bound:
        notes.append(f"reached --max-level-time ({level.max_wall_s:g} s): {closed.hung_at_bound} request(s) silent "
                     "then (no token for the grace period or the whole bound) were declared hung, not left to the "
                     "client's timeout, and their workers stopped; one silent so long later, in the sweep's final "
                     "drain, is hung there")
    return notes
