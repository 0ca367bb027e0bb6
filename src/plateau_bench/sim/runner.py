"""The sweep's ``LevelRunner`` over the engine in virtual time: whole sweeps in seconds of wall time.

Used by the efficiency benchmark, by tests of the sweep and the diagnosis, and to answer what-if
questions with the same search a real sweep would run.

Steady levels end the way the HTTP runner ends them: the level is simulated up to the longest
allowed time, then the precision rule is replayed every ``check_s`` of virtual time on the records
finished by then; at the first check where it is satisfied nothing more is sent: requests sent after
that moment are dropped. Those in flight drain, as an HTTP level lets them, and the end of the drain
is the level's cost in benchmark seconds (an answer the twin streams is never silent, so ``max_wall_s``
ends nothing here); under ``--no-drain`` (``may_cancel_in_flight``) a level stopped on its interval
cancels them instead, and the check time is its cost. Without a
precision rule a steady level lasts its own duration or, when it has none, ``steady_s`` or four
end-to-end latencies of the previous level scaled to this concurrency, whichever is longer.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping

import msgspec
import numpy as np

from plateau_bench.level_run import LevelRun, StopRule, WarmEnd
from plateau_bench.records import RequestRecord, TelemetrySample
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.level import SimResult, simulate_level
from plateau_bench.sim.probe import Probe, server_samples
from plateau_bench.sim.trace_keys import trace_block_keys
from plateau_bench.sim.warm import WarmDriver
from plateau_bench.sim.warm_level import run_warm_level
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.telemetry.summary import summarize
from plateau_bench.units import NS
from plateau_bench.workload.trace import load_trace


class VirtualLevelRunner:
    """Levels in virtual time. ``metrics``: each level carries the server telemetry a ``/metrics``
    scrape every ``scrape_s`` would give (vLLM's names: running, waiting, KV usage, preemptions,
    token counters); ``probe``: keep each level's ``sim.probe.Probe`` in ``probes`` by label (the
    engine's own record of what limited it). Neither changes the records."""

    def __init__(self, config: EngineConfig, workload: WorkloadSpec, *, steady_s: float = 30.0,
                 chunks: bool = False, check_s: float = 1.0, metrics: bool = False, probe: bool = False,
                 scrape_s: float = 0.5, probe_s: float = 0.1) -> None:
        self.config = config
        self.metrics = metrics
        self.keep_probes = probe
        self.scrape_s = scrape_s
        self.probe_s = probe_s
        self.probes: dict[str, Probe] = {}
        self.workload = workload
        self.steady_s = steady_s
        self.chunks = chunks
        self.check_s = check_s
        self.virtual_seconds = 0.0
        self._last: tuple[int, float] | None = None   # (concurrency, e2e p50 s) of the previous level
        # --trace: every level replays it (at its time scale), with its lengths and shared blocks
        self.trace = load_trace(workload.trace, limit=workload.trace_requests) if workload.trace else None
        self._trace_keys = trace_block_keys(self.trace, config.block_size) if self.trace else None
        # warm steady levels share one live closed loop (``sim.warm``), ended by ``end_warm``
        self._live: WarmDriver | None = None
        self._live_probe: Probe | None = None

    async def run_level(self, level: LevelSpec, *, label: str, on_record: Callable[[RequestRecord], None] | None,
                        stop_rule: StopRule | None, repeat: int = 1, attempt: int = 1) -> LevelRun:
        if (level.warm and level.mode == "steady" and stop_rule is not None and level.num_requests is None
                and self.trace is None):
            return self._warm_level(level, label, on_record, stop_rule)
        level = self._sized(level, stop_rule)
        probe, result, (records, cancelled, cut_s) = self._simulate(level, repeat, stop_rule)
        if stop_rule is not None and level.mode == "steady" and stop_rule.bound_s > stop_rule.max_s \
                and (cut_s is None or cut_s > stop_rule.max_s):
            # The rule would have stretched the level (``analysis.convergence``): simulate it for as long as
            # it may run (the same requests from the start) and replay the rule on that.
            level = msgspec.structs.replace(level, duration_s=stop_rule.bound_s)
            probe, result, (records, cancelled, cut_s) = self._simulate(level, repeat, stop_rule)
        if on_record:
            for r in records:
                on_record(r)
        spent = cut_s if cancelled and cut_s is not None else _spent_s(records)
        self.virtual_seconds += spent
        self._remember(level, records)
        samples: list[TelemetrySample] = []
        if probe is not None:
            if self.keep_probes:
                self.probes[label] = probe
            if self.metrics:
                samples = server_samples(probe.snapshots, self.config.kv_tokens // self.config.block_size
                                         * self.config.block_size, interval_s=self.scrape_s,
                                         front_end=self.config.front_end_ms_per_request > 0)
        return LevelRun(level=level, label=label, records=records, benchmark_s=spent,
                        cancelled_at_end=cancelled, sim_preemptions=result.state.preemptions,
                        sim_virtual_end_s=result.state.now,
                        server_samples=samples, engine="vllm" if self.metrics else None)

    def _simulate(self, level: LevelSpec, repeat: int, stop_rule: StopRule | None
                  ) -> tuple[Probe | None, SimResult, tuple[list[RequestRecord], int, float | None]]:
        """The level simulated to its duration, and what it keeps once its stop rule is replayed."""
        probe = Probe(min(self.probe_s, self.scrape_s)) if self.metrics or self.keep_probes else None
        trace = self.trace
        workload = self.workload if repeat == 1 else msgspec.structs.replace(
            self.workload, seed=self.workload.seed + repeat - 1)
        result = simulate_level(
            self.config, level, workload, chunks=self.chunks, probe=probe,
            lengths=[(r.input_len, r.output_len) for r in trace.rows] if trace else None,
            offsets_ns=trace.offsets_ns(level.time_scale or 1.0) if trace else None, block_keys=self._trace_keys)
        return probe, result, _stopped(result.records, level, stop_rule, self.check_s)

    def _warm_level(self, level: LevelSpec, label: str, on_record: Callable[[RequestRecord], None] | None,
                    stop_rule: StopRule) -> LevelRun:
        if self._live is None:
            probe = Probe(min(self.probe_s, self.scrape_s)) if self.metrics or self.keep_probes else None
            self._live = WarmDriver(self.config, self.workload, chunks=self.chunks, probe=probe)
            self._live_probe = probe
        run = run_warm_level(self._live, level, stop_rule, label=label, check_s=self.check_s,
                             scrape_s=self.scrape_s if self.metrics else 0.0,
                             gauges=self._gauges if self.metrics and self._live_probe is not None else None)
        if on_record:
            for r in run.records:
                on_record(r)
        self.virtual_seconds += run.benchmark_s or 0.0
        probe = self._live_probe
        if probe is not None and self.keep_probes:
            self.probes[label] = probe
        if probe is not None and self.metrics:
            run.server_samples = self._scraped(run.level_start_ns / NS, self._live.engine.now)
            run.engine = "vllm"
        return run

    def _scraped(self, from_s: float, to_s: float) -> list[TelemetrySample]:
        """What ``/metrics`` scraped every ``scrape_s`` recorded of the live engine between two virtual times
        (the probe's snapshots are in time order: the span is found by bisection, not by a scan of the sweep)."""
        probe = self._live_probe
        if probe is None:
            return []
        snapshots = probe.snapshots
        first = bisect.bisect_left(snapshots, from_s - self.scrape_s, key=lambda s: s.t)
        last = bisect.bisect_right(snapshots, to_s, lo=first, key=lambda s: s.t)
        return server_samples(snapshots[first:last],
                              self.config.kv_tokens // self.config.block_size * self.config.block_size,
                              interval_s=self.scrape_s, front_end=self.config.front_end_ms_per_request > 0)

    def _gauges(self, from_s: float, to_s: float) -> Mapping[str, float]:
        """The scrapes' summary between two virtual times (a warm level's stop rule reads it as it runs)."""
        return summarize(self._scraped(from_s, to_s), round(from_s * NS), round(to_s * NS)).values

    async def end_warm(self, drain: bool) -> WarmEnd | None:
        """End the live closed loop, if there is one: drained (its last requests' records) or cancelled."""
        live, self._live = self._live, None
        if live is None:
            return None
        start = live.engine.now
        if drain:
            records = live.drain()
            return WarmEnd(records=records, cancelled=0, seconds=live.engine.now - start)
        return WarmEnd(records=live.finished(), cancelled=live.cancel(), seconds=0.0)

    def _sized(self, level: LevelSpec, stop_rule: StopRule | None) -> LevelSpec:
        """The level with the duration it is simulated for."""
        if level.mode == "burst":
            return level
        if stop_rule is not None:
            return msgspec.structs.replace(level, duration_s=stop_rule.max_s)
        if level.mode != "steady" or level.duration_s is not None:
            return level
        duration = self.steady_s
        if self._last is not None and level.concurrency:
            c, e2e = self._last
            duration = max(duration, 4 * e2e * max(1.0, level.concurrency / c))
        return msgspec.structs.replace(level, duration_s=duration)

    def _remember(self, level: LevelSpec, records: list[RequestRecord]) -> None:
        ok = [(r.end_ns - r.sent_ns) / NS for r in records if r.error is None and not r.warmup]
        if level.concurrency and ok:
            self._last = (level.concurrency, float(np.median(ok)))


def _stopped(records: list[RequestRecord], level: LevelSpec, stop_rule: StopRule | None,
             check_s: float) -> tuple[list[RequestRecord], int, float | None]:
    """The records the level keeps once its stop rule is replayed, how many it cancelled, and when it stopped."""
    if level.mode == "burst" or stop_rule is None:
        return records, 0, None
    stop = stop_rule.first_stop(records, workers=level.concurrency or 1, check_s=check_s)
    if stop is None:
        return records, 0, None
    cut_s, precise = stop
    kept = [r for r in records if r.sent_ns <= cut_s * NS]
    if level.mode != "steady" or not precise:
        return kept, 0, cut_s
    finished = [r for r in kept if r.end_ns <= cut_s * NS]
    return finished, len(kept) - len(finished), cut_s


def _spent_s(records: list[RequestRecord]) -> float:
    """Virtual seconds from the level start to its last answer."""
    return max((r.end_ns for r in records), default=0) / NS
