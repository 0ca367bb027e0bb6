"""The sweep's ``LevelRunner`` over the engine in virtual time: whole sweeps in seconds of wall time.

Used by the efficiency benchmark, by tests of the sweep and the diagnosis, and to answer what-if
questions with the same search a real sweep would run. Steady levels run for a fixed virtual
duration (``steady_s``) instead of stopping on precision: the engine is deterministic, so a longer
level only costs wall time.
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

    async def run_level(self, level: LevelSpec, *, label: str, on_record: Callable[[RequestRecord], None] | None,
                        precision: PrecisionRule | None) -> LevelOutcome:
        if level.mode == "steady":
            level = msgspec.structs.replace(level, duration_s=min(level.duration_s or self.steady_s, self.steady_s))
        result = simulate_level(self.config, level, self.workload, chunks=self.chunks)
        records = result.records
        if on_record:
            for r in records:
                on_record(r)
        lv = compute_level(records, label=label, mode=level.mode, concurrency=level.concurrency, rate=level.rate)
        self.virtual_seconds += lv.wall_s
        return LevelOutcome(lv, records, benchmark_s=lv.wall_s)
