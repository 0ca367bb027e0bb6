"""The sweep's ``LevelRunner`` over the engine in virtual time: whole sweeps in seconds of wall time.

Used by the efficiency benchmark, by tests of the sweep and the diagnosis, and to answer what-if
questions with the same search a real sweep would run. Steady levels run for a fixed virtual
duration instead of stopping on precision: at least ``steady_s``, and at least four end-to-end
latencies of the previous level scaled to this concurrency, so that a heavily queued level still
holds several whole requests per worker in its steady window.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.metrics import compute_level
from plateau_bench.records import RequestRecord
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.level import simulate_level
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.sweep import LevelOutcome


class VirtualLevelRunner:
    def __init__(self, config: EngineConfig, workload: WorkloadSpec, *, steady_s: float = 30.0,
                 chunks: bool = False) -> None:
        self.config = config
        self.workload = workload
        self.steady_s = steady_s
        self.chunks = chunks
        self.virtual_seconds = 0.0
        self._last: tuple[int, float] | None = None   # (concurrency, e2e p50 s) of the previous level

    async def run_level(self, level: LevelSpec, *, label: str, on_record: Callable[[RequestRecord], None] | None,
                        precision: PrecisionRule | None) -> LevelOutcome:
        if level.mode == "steady":
            duration = self.steady_s
            if self._last is not None and level.concurrency:
                c, e2e = self._last
                duration = max(duration, 4 * e2e * max(1.0, level.concurrency / c))
            level = msgspec.structs.replace(level, duration_s=duration)
        result = simulate_level(self.config, level, self.workload, chunks=self.chunks)
        records = result.records
        if on_record:
            for r in records:
                on_record(r)
        lv = compute_level(records, label=label, mode=level.mode, concurrency=level.concurrency, rate=level.rate)
        self.virtual_seconds += lv.wall_s
        if lv.concurrency and lv.e2e_ms.p50:
            self._last = (lv.concurrency, lv.e2e_ms.p50 / 1000)
        return LevelOutcome(lv, records, benchmark_s=lv.wall_s)
