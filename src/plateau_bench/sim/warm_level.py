"""A warm steady level on the twin: move the live closed loop to the level's concurrency, run it until
``analysis.warm`` says the window is long and precise enough, and hand back the raw level.

The joining workers are spread over one request cycle (``analysis.warm.join_times``), so that the batch
holds the steady mix of young and old requests once the last one joined.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from plateau_bench.level_run import GAUGE_SCRAPES, QUEUED_NOTE, WHOLE_LEVEL_NOTE, LevelRun, StopRule
from plateau_bench.records import RequestRecord
from plateau_bench.result import WarmLevelInfo
from plateau_bench.sim.warm import WarmDriver
from plateau_bench.spec import LevelSpec
from plateau_bench.units import NS

Gauges = Callable[[float, float], Mapping[str, float]]   # (from, to) in virtual seconds -> the scrapes' summary
CYCLES_IN_WINDOW = 1.25   # a window holds at least this many request cycles (the cycle is a prediction)
WINDOW_NOTE = "warm: from where the rate settled after the concurrency changed, counted by token arrival"


def _ns(seconds: float) -> int:
    return round(seconds * NS)


@dataclass
class _Run:
    records: list[RequestRecord]
    partials: list[RequestRecord]
    end_s: float
    window: tuple[int, int]
    note: str
    waves: bool
    queued: bool = False


def _measure(driver: WarmDriver, level: LevelSpec, rule: StopRule, start: float, check_s: float,
             gauge_window_s: float, gauges: Gauges | None) -> _Run:
    workers = level.concurrency or 1
    records: list[RequestRecord] = []
    t = start
    while True:
        t += max(check_s, 0.02 * (t - start))
        driver.advance(t)
        records += driver.finished()
        partials = driver.partials()
        settled = driver.settled_at
        seen = gauges(settled, t) if gauges is not None and settled is not None and rule.held_running is not None \
            else None
        check = rule.warm_check([r for r in records if r.error is None] + partials, level_start_ns=_ns(start),
                                settled_ns=None if settled is None else _ns(settled), now_ns=_ns(t), workers=workers,
                                min_window_s=max(CYCLES_IN_WINDOW * driver.cycle_s, gauge_window_s),
                                cycle_s=driver.cycle_s, gauges=seen)
        if check.done:
            break
    if check.window_ns is not None:
        note = WHOLE_LEVEL_NOTE if check.whole_level else QUEUED_NOTE if check.queued else WINDOW_NOTE
        return _Run(records, partials, t, check.window_ns, note, check.waves, check.queued)
    begin = _ns(settled if settled is not None else start)
    return _Run(records, partials, t, (begin, _ns(t)), "warm: the level's time ran out before its rate settled: "
                "window from where the concurrency was reached", False)


def run_warm_level(driver: WarmDriver, level: LevelSpec, rule: StopRule, *, label: str, check_s: float,
                   scrape_s: float = 0.0, gauges: Gauges | None = None) -> LevelRun:
    """One warm level on the live closed loop (see the module docstring); ``scrape_s``: the /metrics scrape
    interval, when scraped (the window then holds ``GAUGE_SCRAPES`` scrapes at least); ``gauges``: what those
    scrapes say between two virtual times (``telemetry.summary`` values), when scraped."""
    start = driver.engine.now
    was = len(driver.workers)
    driver.plan_cycle(level.concurrency or 1)
    driver.set_workers(level.concurrency or 1)
    run = _measure(driver, level, rule, start, check_s, GAUGE_SCRAPES * scrape_s, gauges)
    driver.learn(level.concurrency or 1, run.records)
    settled = driver.settled_at
    settled_s = (settled if settled is not None else run.end_s) - start
    info = WarmLevelInfo(from_concurrency=was, settled_s=settled_s,
                         dropped_s=max(0.0, run.window[0] / NS - start - settled_s),
                         carried_in=sum(1 for r in run.records if r.sent_ns < _ns(start)),
                         carried_out=len(run.partials), waves=run.waves, queued=run.queued)
    return LevelRun(level=level, label=label, records=run.records, in_flight=run.partials, window_ns=run.window,
                    window_note=run.note, level_start_ns=_ns(start), warm=info, benchmark_s=run.end_s - start,
                    notes=[])
