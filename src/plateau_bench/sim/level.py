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

from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from plateau_bench.errors import ErrorClass
from plateau_bench.records import TOKEN_SOURCE_SIM, RequestRecord
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, EngineState, RequestRejected, SimRequest, StepRecord
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.workload.arrivals import iter_arrival_offsets_ns
from plateau_bench.workload.prompts import sample_lengths

NS = 1_000_000_000
DEFAULT_STEADY_DURATION_S = 60.0
_BATCH = 4096


class SimResult(NamedTuple):
    records: list[RequestRecord]
    trace: list[StepRecord] | None
    state: EngineState


class _Lengths:
    """(prompt, output) pairs: explicit ones cycled, else drawn from the workload, deterministically."""

    def __init__(self, workload: WorkloadSpec, explicit: Sequence[tuple[int, int]] | None) -> None:
        self.seed = workload.seed
        self._workload = workload
        self._rng = np.random.default_rng(workload.seed)
        self._cycle = explicit is not None
        self._pairs: list[tuple[int, int]] = list(explicit) if explicit else []
        self._i = 0

    def next(self) -> tuple[int, int]:
        i = self._i
        self._i = i + 1
        if i < len(self._pairs):
            return self._pairs[i]
        if self._cycle:
            return self._pairs[i % len(self._pairs)]
        w = self._workload
        prompts = sample_lengths(self._rng, w.input_len, w.range_ratio, _BATCH)
        outputs = sample_lengths(self._rng, w.output_len, w.range_ratio, _BATCH)
        self._pairs.extend(zip(prompts, outputs, strict=True))
        return self._pairs[i]


class _Driver:
    def __init__(self, config: EngineConfig, level: LevelSpec, workload: WorkloadSpec, *, chunks: bool,
                 trace: bool, lengths: Sequence[tuple[int, int]] | None) -> None:
        self.engine = Engine(config, chunks=chunks, trace=trace, on_finish=self._finished)
        self.level = level
        self.lengths = _Lengths(workload, lengths)
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
        now = max(self.engine.now, scheduled)
        try:
            self.engine.submit(prompt, output, arrival=now, worker=worker, payload=(index, scheduled))
        except RequestRejected as exc:
            t = round(now * NS)
            self.records[index] = RequestRecord(
                index=index, worker=worker, scheduled_ns=round(scheduled * NS), sent_ns=t, end_ns=t,
                prompt_tokens=prompt, token_source=TOKEN_SOURCE_SIM, error=ErrorClass.HTTP_4XX.value,
                error_detail=str(exc), http_status=400)
            return False
        self.in_flight += 1
        return True

    def _finished(self, req: SimRequest) -> None:
        self.done.append(req)
        self.in_flight -= 1
        if self.closed_loop:
            # Inline fast path of _send_from_worker: this runs once per simulated request.
            if (self.limit is None or self.issued < self.limit) and self.engine.now < self.stop_at:
                self._send_from_worker(req.worker, self.engine.now)
        elif self.client_queue:
            scheduled_q, index_q = self.client_queue.popleft()
            self.send(-1, scheduled_q, index_q)

    def build_records(self) -> list[RequestRecord]:
        records = self.records
        sim = TOKEN_SOURCE_SIM
        for req in self.done:
            payload: tuple[int, float] = req.payload  # type: ignore[assignment]
            index, scheduled = payload
            chunk_ns: list[int] = []
            chunk_tokens: list[int] = []
            if req.times is not None:
                chunk_ns = [round(t * NS) for t in req.times]
                chunk_tokens = [1] * len(chunk_ns)
            records[index] = RequestRecord(
                index=index, worker=req.worker, scheduled_ns=round(scheduled * NS),
                sent_ns=round(req.arrival * NS), first_token_ns=round(req.first_token * NS),
                end_ns=round(req.end * NS), chunk_ns=chunk_ns, chunk_tokens=chunk_tokens,
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
        offsets = iter_arrival_offsets_ns(level.rate, burstiness=level.burstiness, seed=self.lengths.seed)
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
) -> SimResult:
    """Run one level through a fresh engine; records are in send order.

    Args:
        lengths: explicit (prompt, output) token lengths, used in order and cycled; by default they
            are drawn from ``workload`` (``input_len``/``output_len``/``range_ratio``/``seed``).
    """
    level.validate()
    workload.validate()
    driver = _Driver(config, level, workload, chunks=chunks, trace=trace, lengths=lengths)
    driver.run()
    return SimResult(driver.build_records(), driver.engine.trace, driver.engine.state())
