"""The sweep's ``LevelRunner`` over the engine in virtual time: whole sweeps in seconds of wall time.

Used by the efficiency benchmark, by tests of the sweep and the diagnosis, and to answer what-if
questions with the same search a real sweep would run.

Steady levels end the way the HTTP runner ends them: the level is simulated up to the longest
allowed time, then the precision rule is replayed every ``check_s`` of virtual time on the records
finished by then; at the first check where it is satisfied the level is cut, requests still in
flight are dropped (as a stopped HTTP level cancels them), and that moment is the level's cost in
benchmark seconds. Without a precision rule a steady level lasts ``steady_s``, or four end-to-end
latencies of the previous level scaled to this concurrency, whichever is longer.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.metrics import compute_level
from plateau_bench.records import RequestRecord
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.level import simulate_level
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.sweep import LevelOutcome

NS = 1_000_000_000


def replay_precision(records: list[RequestRecord], rule: PrecisionRule, workers: int,
                     check_s: float = 0.5) -> float | None:
    """The first check time (s) at which ``rule`` would have stopped the level, else None.

    Checks come every ``check_s``, or every 2 % of the elapsed time once that is longer (the cost of
    one check grows with the records, and a 2 % later stop is within the rule's own precision).
    """
    if not records:
        return None
    by_end = sorted(records, key=lambda r: r.end_ns)
    ends = np.array([r.end_ns for r in by_end], dtype=np.int64)
    sent = np.array([r.sent_ns for r in by_end], dtype=np.int64)
    horizon = int(ends[-1])
    t = check_s * NS
    while t <= horizon:
        n_done = int(np.searchsorted(ends, t, side="right"))
        pending = sent[n_done:]
        started = pending[pending <= t]
        complete = int(started.min()) if started.size else int(t)
        if rule.done(by_end[:n_done], elapsed_s=t / NS, workers=workers, complete_until_ns=complete):
            return t / NS
        t += max(check_s * NS, 0.02 * t)
    return None


class VirtualLevelRunner:
    def __init__(self, config: EngineConfig, workload: WorkloadSpec, *, steady_s: float = 30.0,
                 chunks: bool = False, check_s: float = 1.0) -> None:
        self.config = config
        self.workload = workload
        self.steady_s = steady_s
        self.chunks = chunks
        self.check_s = check_s
        self.virtual_seconds = 0.0
        self._last: tuple[int, float] | None = None   # (concurrency, e2e p50 s) of the previous level

    async def run_level(self, level: LevelSpec, *, label: str, on_record: Callable[[RequestRecord], None] | None,
                        precision: PrecisionRule | None) -> LevelOutcome:
        cut_s: float | None = None
        if level.mode == "rate" and precision is not None:
            level = msgspec.structs.replace(level, duration_s=precision.max_s)
        if level.mode == "steady":
            if precision is not None:
                duration = precision.max_s
            else:
                duration = self.steady_s
                if self._last is not None and level.concurrency:
                    c, e2e = self._last
                    duration = max(duration, 4 * e2e * max(1.0, level.concurrency / c))
            level = msgspec.structs.replace(level, duration_s=duration)
        records = simulate_level(self.config, level, self.workload, chunks=self.chunks).records
        if level.mode != "burst" and precision is not None:
            cut_s = replay_precision(records, precision, level.concurrency or 1, self.check_s)
            if cut_s is not None:
                records = [r for r in records if r.end_ns <= cut_s * NS]
        if on_record:
            for r in records:
                on_record(r)
        lv = compute_level(records, label=label, mode=level.mode, concurrency=level.concurrency, rate=level.rate)
        spent = cut_s if cut_s is not None else lv.wall_s
        lv.extra["virtual_seconds"] = spent
        self.virtual_seconds += spent
        if lv.concurrency and lv.e2e_ms.p50:
            self._last = (lv.concurrency, lv.e2e_ms.p50 / 1000)
        return LevelOutcome(lv, records, benchmark_s=spent)
