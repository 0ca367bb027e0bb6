"""Drive the engine through one load level in virtual time and return request records.

Load shapes (the same as the HTTP driver's, see ``spec.LevelSpec``):

* **burst**: ``num_requests`` (default C) requests over C closed-loop workers, all starting at t=0;
  a worker sends its next request the instant its previous one ends.
* **steady**: C closed-loop workers keep sending until ``duration_s`` (default 60 s of virtual
  time) or ``num_requests``; requests in flight then drain.
* **rate**: open loop, gamma/Poisson arrivals (``workload.arrivals``); with ``max_concurrency`` a
  request whose slot is taken waits on the client side, so its send time follows its scheduled time.

The client side is ideal: no network, no parsing, no client overhead, which is what a what-if
question needs. Records carry ``token_source="sim"``. Without ``chunks`` they carry only first-token
and end times; the metrics then spread tokens evenly between them, which is exact while the batch
composition does not change and an approximation of a few steps otherwise (token times inside a
request shift by whole step lengths when other requests join or leave the batch).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from plateau_bench.errors import ErrorClass
from plateau_bench.records import TOKEN_SOURCE_SIM, RequestRecord
from plateau_bench.sim.budget import check_level_size
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, EngineState, RequestRejected, SimRequest, StepRecord
from plateau_bench.sim.prefix_keys import SharedPrefixKeys
from plateau_bench.sim.probe import Probe
from plateau_bench.sim.replicas import ReplicaSet, parse_balancer
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.units import NS
from plateau_bench.workload.arrivals import iter_arrival_offsets_ns
from plateau_bench.workload.lengths import LengthSampler

DEFAULT_STEADY_DURATION_S = 60.0
_BATCH = 4096


class SimResult(NamedTuple):
    records: list[RequestRecord]
    trace: list[StepRecord] | None
    state: EngineState
    probe: Probe | None = None     # the engine's own record of what limited it (see ``probe``)


class _Lengths:
    """(prompt, output) pairs: explicit ones cycled, else drawn from the workload, deterministically.

    ``pairs[i]`` for ``i < len(pairs)`` is the next pair; the driver's hot path reads it directly.
    """

    def __init__(self, workload: WorkloadSpec, explicit: Sequence[tuple[int, int]] | None) -> None:
        self.seed = workload.seed
        self._workload = workload
        self._sampler = LengthSampler(workload, np.random.default_rng(workload.seed))
        self._cycle = explicit is not None
        self.pairs: list[tuple[int, int]] = list(explicit) if explicit else []
        self.i = 0

    def next(self) -> tuple[int, int]:
        i = self.i
        self.i = i + 1
        if i < len(self.pairs):
            return self.pairs[i]
        if self._cycle:
            return self.pairs[i % len(self.pairs)]
        prompts, outputs = self._sampler.draw(_BATCH)
        self.pairs.extend(zip(prompts, outputs, strict=True))
        return self.pairs[i]


class _Driver:
    def __init__(self, config: EngineConfig, level: LevelSpec, workload: WorkloadSpec, *, chunks: bool,
                 trace: bool, lengths: Sequence[tuple[int, int]] | None, probe: Probe | None = None,
                 offsets_ns: Sequence[int] | None = None, block_keys: Sequence[list[int] | None] | None = None
                 ) -> None:
        self.engine: Engine | ReplicaSet = (
            Engine(config, chunks=chunks, trace=trace, on_finish=self._finished, probe=probe) if config.replicas == 1
            else ReplicaSet(config, config.replicas, parse_balancer(config.balancer), chunks=chunks,
                            on_finish=self._finished))
        self.level = level
        self.lengths = _Lengths(workload, lengths)
        # --prefix-groups: every prompt starts with one of the shared prefixes (their blocks keyed alike)
        self.prefixes = (SharedPrefixKeys(workload.prefix_groups, workload.prefix_len, config.block_size,
                                          workload.seed) if workload.prefix_groups else None)
        self.offsets_ns = offsets_ns     # a trace's arrival times, instead of the gamma schedule ...
        self.block_keys = block_keys     # ... and its requests' block keys, by request index
        self.records: list[RequestRecord | None] = []
        self.issued = 0
        self.limit: int | None = level.total_requests()
        self.stop_at = float("inf")
        self.closed_loop = level.mode != "rate"
        self.in_flight = 0
        self.client_queue: deque[tuple[float, int]] = deque()   # (scheduled time, index)
        self.done: list[SimRequest] = []

    def may_send(self, now: float) -> bool:
        if self.limit is not None and self.issued >= self.limit:
            return False
        return now < self.stop_at

    def reserve(self) -> int:
        index = self.issued
        self.issued += 1
        self.records.append(None)
        return index

    def send(self, worker: int, scheduled: float, index: int | None = None) -> bool:
        """Submit one request; False when the engine rejected it (recorded as a failed request)."""
        if index is None:
            index = self.reserve()
        prompt, output = self.lengths.next()
        keys = self.block_keys[index] if self.block_keys is not None else None
        if self.prefixes is not None:
            prompt += self.prefixes.prefix_len
            keys = self.prefixes.keys(prompt, output)
        enow = self.engine.now
        now = scheduled if scheduled > enow else enow   # max(enow, scheduled), ties keep enow
        try:
            self.engine.submit(prompt, output, arrival=now, worker=worker, payload=(index, scheduled),
                               block_hashes=keys)
        except RequestRejected as exc:
            self._record_rejection(index, worker, scheduled, now, prompt, exc)
            return False
        self.in_flight += 1
        return True

    def _record_rejection(self, index: int, worker: int, scheduled: float, now: float, prompt: int,
                          exc: RequestRejected) -> None:
        t = round(now * NS)
        self.records[index] = RequestRecord(
            index=index, worker=worker, scheduled_ns=round(scheduled * NS), sent_ns=t, end_ns=t,
            prompt_tokens=prompt, token_source=TOKEN_SOURCE_SIM, error=ErrorClass.HTTP_4XX.value,
            error_detail=str(exc), http_status=400)

    def _finished(self, req: SimRequest) -> None:
        self.done.append(req)
        self.in_flight -= 1
        if self.closed_loop:
            engine = self.engine
            now = engine.now
            if (self.limit is None or self.issued < self.limit) and now < self.stop_at:
                # send() inlined: this runs once per simulated request. The worker's next request
                # is sent the instant this one ends, so its scheduled and send times are ``now``.
                index = self.issued
                self.issued = index + 1
                self.records.append(None)
                lengths = self.lengths
                i = lengths.i
                if i < len(lengths.pairs):
                    lengths.i = i + 1
                    prompt, output = lengths.pairs[i]
                else:
                    prompt, output = lengths.next()
                keys = None
                if self.prefixes is not None:
                    prompt += self.prefixes.prefix_len
                    keys = self.prefixes.keys(prompt, output)
                try:
                    engine.submit(prompt, output, arrival=now, worker=req.worker, payload=(index, now),
                                  block_hashes=keys)
                except RequestRejected as exc:
                    self._record_rejection(index, req.worker, now, now, prompt, exc)
                    if self.level.mode != "steady":
                        self._send_from_worker(req.worker, now)
                    return
                self.in_flight += 1
        elif self.client_queue:
            scheduled_q, index_q = self.client_queue.popleft()
            self.send(-1, scheduled_q, index_q)

    def build_records(self) -> list[RequestRecord]:
        records = self.records
        sim = TOKEN_SOURCE_SIM
        done = self.done
        # Seconds to integer nanoseconds for all requests at once: np.rint rounds half to even like
        # round(), and float64 products are the same in numpy as in Python, so the integers are too.
        sched_ns, sent_ns, first_ns, end_ns = (
            np.rint(np.array(seconds, dtype=np.float64) * NS).astype(np.int64).tolist()
            for seconds in ([r.payload[1] for r in done], [r.arrival for r in done],  # type: ignore[index]
                            [r.first_token for r in done], [r.end for r in done]))
        for req, scheduled, sent, first, end in zip(done, sched_ns, sent_ns, first_ns, end_ns, strict=True):
            index: int = req.payload[0]  # type: ignore[index]
            if req.times is None:
                records[index] = RequestRecord(
                    index=index, worker=req.worker, scheduled_ns=scheduled, sent_ns=sent,
                    first_token_ns=first, end_ns=end, prompt_tokens=req.prompt, output_tokens=req.output,
                    token_source=sim)
            else:
                chunk_ns = [round(t * NS) for t in req.times]
                records[index] = RequestRecord(
                    index=index, worker=req.worker, scheduled_ns=scheduled, sent_ns=sent,
                    first_token_ns=first, end_ns=end, chunk_ns=chunk_ns, chunk_tokens=[1] * len(chunk_ns),
                    prompt_tokens=req.prompt, output_tokens=req.output, token_source=sim)
        return [r for r in records if r is not None]

    def _send_from_worker(self, worker: int, now: float) -> None:
        # A rejected request ends at once; the worker moves on, but only while time can advance.
        while self.may_send(now):
            if self.send(worker, now) or self.level.mode == "steady":
                return

    def run(self) -> None:
        level = self.level
        if level.mode in ("burst", "steady"):
            if level.mode == "steady":
                self.stop_at = level.duration_s or (
                    DEFAULT_STEADY_DURATION_S if level.num_requests is None else float("inf"))
            workers = level.concurrency or 1
            if self.limit is not None:
                workers = min(workers, self.limit)
            for w in range(workers):
                self._send_from_worker(w, 0.0)
            self.engine.run()
            return
        self._run_open_loop()

    def _run_open_loop(self) -> None:
        level = self.level
        assert level.rate is not None
        if level.duration_s is not None:
            self.stop_at = level.duration_s
        offsets = (iter(self.offsets_ns) if self.offsets_ns is not None
                   else iter_arrival_offsets_ns(level.rate, burstiness=level.burstiness, seed=self.lengths.seed))
        max_c = level.max_concurrency
        for offset in offsets:
            t = offset / NS
            if not self.may_send(t):
                break
            self.engine.run_until(t)
            if max_c is not None and self.in_flight >= max_c:
                # Counted now so ``num_requests`` bounds scheduled requests; sent when a slot frees.
                self.client_queue.append((t, self.reserve()))
            else:
                self.send(-1, t)
        self.engine.run()



def simulate_level(
    config: EngineConfig,
    level: LevelSpec,
    workload: WorkloadSpec,
    *,
    chunks: bool = False,
    trace: bool = False,
    lengths: Sequence[tuple[int, int]] | None = None,
    probe: Probe | None = None,
    offsets_ns: Sequence[int] | None = None,
    block_keys: Sequence[list[int] | None] | None = None,
) -> SimResult:
    """Run one level through a fresh engine; records are in send order.

    Args:
        lengths: explicit (prompt, output) token lengths, used in order and cycled; by default they
            are drawn from ``workload`` (``input_len``/``output_len``/``range_ratio``/``seed``).
        probe: records what limited the engine step by step (``sim.probe``); the records are the
            same with or without it.
        offsets_ns: a rate level's arrival times (a trace), request ``i`` at offset ``i``.
        block_keys: request ``i``'s block keys for prefix caching (``sim.trace_keys``), or None.
    """
    level.validate()
    workload.validate()
    check_level_size(config, level, workload, chunks=chunks, arrivals=None if offsets_ns is None else len(offsets_ns))
    # The run allocates a few objects per simulated request and frees almost none until it ends,
    # so the cyclic collector would rescan a growing heap again and again for nothing (it cost
    # ~40 % of the run); nothing here creates reference cycles except driver <-> engine, broken below.
    if config.replicas > 1:
        probe, trace = None, False    # the probe and the step trace read one engine's internals
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        driver = _Driver(config, level, workload, chunks=chunks, trace=trace, lengths=lengths, probe=probe,
                         offsets_ns=offsets_ns, block_keys=block_keys)
        if probe is not None and isinstance(driver.engine, Engine):
            probe.snapshot(driver.engine)
        driver.run()
        engine = driver.engine
        engine.on_finish = None
        if probe is not None and isinstance(engine, Engine):
            probe.snapshot(engine)
        return SimResult(driver.build_records(), engine.trace, engine.state(), probe)
    finally:
        if gc_was_enabled:
            gc.enable()
