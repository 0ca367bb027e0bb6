"""One closed loop over the engine that lives across levels: the twin's side of warm levels.

``sweep.loop`` keeps the server loaded between steady levels (``analysis.warm``). Here that is one
``_Driver`` whose engine is never emptied: ``set_workers`` changes the number of closed-loop workers,
``advance`` moves virtual time on, and the level reads what finished and what is still streaming.

* Workers that join are spread over the next request cycle, into the widest gaps between the running
  workers' next starts (``analysis.warm.join_times``).
* Workers that leave finish their current request first. The ones retired are spread evenly over the
  requests in flight ordered by how far they have come (``retirees``): the ones left are then as spread
  over their request cycle as before, so the batch holds the same mix of short and long contexts (retiring
  those nearest their end would be quicker, and would leave a batch of young requests whose steps are
  faster than the steady state's for a whole cycle).
* ``partials`` gives every request still in flight as a record of what it streamed so far (its tokens
  spread from its first token to now, as the twin's fast mode spreads a finished one's), for the
  window's token count; ``finished`` gives each finished request once.

Times are virtual seconds since the session started; records carry them in ns.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from plateau_bench.errors import ErrorClass
from plateau_bench.records import TOKEN_SOURCE_SIM, RequestRecord
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import DECODE, DONE, Engine, RequestRejected, SimRequest
from plateau_bench.sim.level import _Driver
from plateau_bench.sim.probe import Probe
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.units import NS
from plateau_bench.workload.warm_joins import join_times, predict_cycle, retirees

CHUNKS = 32            # chunks a twin request's tokens are grouped in at least (its record's size stays bounded)
CHUNKS_IN_FLIGHT = 4096  # ... and more while few run: the chunks of all requests in flight, at most, so that
                         # a window's token count is not lumped (two workers' 1,024 tokens in 32 lumps read
                         # +-9 % from one 17 s sub-window to the next)


def _chunks(times: list[float], limit: int = CHUNKS) -> tuple[list[int], list[int]]:
    """Token times grouped into at most ``limit`` chunks, each at its last token's time."""
    n = len(times)
    step = -(-n // limit)
    ends = [*range(step - 1, n - 1, step), n - 1]
    ns = [_ns(times[i]) for i in ends]
    counts = [ends[0] + 1, *(b - a for a, b in itertools.pairwise(ends))]
    return ns, counts


def _ns(seconds: float) -> int:
    return round(seconds * NS)


class WarmDriver(_Driver):
    """See the module docstring."""

    def __init__(self, config: EngineConfig, workload: WorkloadSpec, *, chunks: bool = False,
                 probe: Probe | None = None, lengths: Sequence[tuple[int, int]] | None = None) -> None:
        super().__init__(config, LevelSpec(mode="steady", concurrency=1), workload, chunks=chunks, trace=False,
                         lengths=lengths, probe=probe)
        self.live: dict[int, SimRequest] = {}          # index -> request in flight
        self.workers: set[int] = set()                 # active workers (not retiring)
        self.retiring: set[int] = set()
        self.joins: list[tuple[float, int]] = []       # (time, worker) still to send their first request
        self.cycle_s = 0.0                             # the request cycle expected at this level (s)
        self.cycles: list[tuple[int, float]] = []      # (concurrency, median request time) per level
        self.settled_at: float | None = 0.0            # when the concurrency asked last was reached
        self.sending = True
        self._next_worker = 0
        self._taken = 0
        self._rejected: list[RequestRecord] = []
        # Exact token times (``_token_times``): every engine keeps its decode steps' end times.
        self._engines = [self.engine] if isinstance(self.engine, Engine) else list(self.engine.replicas)
        for engine in self._engines:
            engine.step_times = True

    # -- the load ------------------------------------------------------------------------------
    def set_workers(self, count: int) -> None:
        """Move to ``count`` workers from now: joins spread over the next request cycle (``analysis.warm.
        join_times``), retirements as the retired workers' requests end."""
        now = self.engine.now
        self.settled_at = None
        if count > len(self.workers):
            new = [self._next_worker + i for i in range(count - len(self.workers))]
            self._next_worker += len(new)
            times = join_times(now, self._restarts(now), len(new), self.cycle_s)
            self.workers.update(new)
            self.joins = sorted(zip(times, new, strict=True))
        elif count < len(self.workers):
            busy = {req.worker: req for req in self.live.values()}
            for worker in retirees(sorted(self.workers, key=lambda w: self._tokens_left(busy.get(w))),
                                   len(self.workers) - count):
                self.workers.discard(worker)
                if worker in busy:
                    self.retiring.add(worker)
        self._maybe_settled(now)

    def _restarts(self, now: float) -> list[float]:
        """When each running worker will send its next request, from its request's pace so far."""
        out = []
        for req in self.live.values():
            if req.worker not in self.workers:
                continue
            sent = self.engine.sent_tokens(req)
            if sent >= 2 and req.first_token >= 0:
                out.append(now + (req.output - sent) * (now - req.first_token) / (sent - 1))
            else:
                out.append(now + max(self.cycle_s - (now - req.arrival), 0.0))
        return out

    def learn(self, concurrency: int, records: Sequence[RequestRecord]) -> None:
        """What the next level's cycle is predicted from: this level's median request time, sent to end."""
        spans = sorted(r.end_ns - r.sent_ns for r in records if r.error is None)
        if spans:
            self.cycles.append((concurrency, spans[len(spans) // 2] / NS))

    def plan_cycle(self, concurrency: int) -> None:
        """The request cycle expected at ``concurrency`` (``analysis.warm.predict_cycle``)."""
        self.cycle_s = predict_cycle(self.cycles, concurrency)

    def _tokens_left(self, req: SimRequest | None) -> int:
        return -1 if req is None else req.output - self.engine.sent_tokens(req)

    def _maybe_settled(self, now: float) -> None:
        if self.settled_at is None and not self.joins and not self.retiring:
            self.settled_at = now

    def advance(self, until: float) -> None:
        """Run the engine to ``until``, sending the joining workers' first requests on time."""
        while self.joins and self.joins[0][0] <= until:
            at, worker = self.joins.pop(0)
            self.engine.run_until(at)
            if worker in self.workers:
                self.send(worker, at)
            self._maybe_settled(at)
        self.engine.run_until(until)

    def send(self, worker: int, scheduled: float, index: int | None = None) -> bool:
        if not self.sending:
            return False
        index = self.reserve() if index is None else index
        prompt, output = self.lengths.next()
        keys = None
        if self.prefixes is not None:
            prompt += self.prefixes.prefix_len
            keys = self.prefixes.keys(prompt, output)
        now = max(self.engine.now, scheduled)
        try:
            req = self.engine.submit(prompt, output, arrival=now, worker=worker, payload=(index, scheduled),
                                     block_hashes=keys)
        except RequestRejected as exc:
            t = _ns(now)
            self._rejected.append(RequestRecord(
                index=index, worker=worker, scheduled_ns=_ns(scheduled), sent_ns=t, end_ns=t, prompt_tokens=prompt,
                token_source=TOKEN_SOURCE_SIM, error=ErrorClass.HTTP_4XX.value, error_detail=str(exc),
                http_status=400))
            return False
        self.live[index] = req
        self.in_flight += 1
        return True

    def _finished(self, req: SimRequest) -> None:
        self.done.append(req)
        self.in_flight -= 1
        self.live.pop(req.payload[0], None)  # type: ignore[index]
        worker, now = req.worker, self.engine.now
        if worker in self.retiring:
            self.retiring.discard(worker)
            self._maybe_settled(now)
        elif worker in self.workers:
            self.send(worker, now)

    # -- what a level reads ----------------------------------------------------------------------
    def finished(self) -> list[RequestRecord]:
        """The requests finished (or refused) since the last call, each once."""
        done, self._taken = self.done[self._taken:], len(self.done)
        rejected, self._rejected = self._rejected, []
        return [*rejected, *(self._record(req, req.end, req.output) for req in done)]

    def partials(self) -> list[RequestRecord]:
        """Every request in flight as what it streamed so far (``end_ns`` is now)."""
        now = self.engine.now
        return [self._record(req, now, self.engine.sent_tokens(req)) for req in self.live.values()]

    def _record(self, req: SimRequest, end: float, tokens: int) -> RequestRecord:
        index: int
        scheduled: float
        index, scheduled = req.payload  # type: ignore[misc]
        first = _ns(req.first_token) if req.first_token >= 0 and tokens > 0 else None
        times = self._token_times(req, tokens) if first is not None else None
        limit = max(CHUNKS, CHUNKS_IN_FLIGHT // max(len(self.workers), 1))
        chunk_ns, chunk_tokens = _chunks(times, limit) if times else ([], [])
        return RequestRecord(index=index, worker=req.worker, scheduled_ns=_ns(scheduled), sent_ns=_ns(req.arrival),
                             first_token_ns=first, end_ns=_ns(end), chunk_ns=chunk_ns, chunk_tokens=chunk_tokens,
                             prompt_tokens=req.prompt, output_tokens=tokens, token_source=TOKEN_SOURCE_SIM)

    def _token_times(self, req: SimRequest, tokens: int) -> list[float] | None:
        """When each of the request's first ``tokens`` tokens came. Since it (last) joined the decode batch
        its tokens come one per decode step from that step on; those before are on the request in chunk
        mode (``times``), else only its first token is known, and after a preemption its tokens are spread
        evenly instead (None)."""
        decode_times = (self._engines[0] if len(self._engines) == 1 else self._home_engine(req))._decode_times
        if req.state == DONE:
            if req.times is not None:
                return req.times[:tokens]
            return None if req.preemptions else [req.first_token, *decode_times[req.base_g:req.base_g + tokens - 1]]
        if req.state == DECODE:
            if req.times is not None:
                before = req.times[:req.sent]
            elif not req.preemptions:
                before = [req.first_token]
            else:
                return None
            return [*before, *decode_times[req.base_g:req.base_g + tokens - len(before)]]
        known = req.times if req.times is not None else [req.first_token]
        return known[:tokens] if len(known) >= tokens else None

    def _home_engine(self, req: SimRequest) -> Engine:
        return self._engines[req.rid >> 40]

    def drain(self) -> list[RequestRecord]:
        """Send nothing more and run until every request in flight has finished."""
        self.sending = False
        self.joins = []
        self.engine.run()
        return self.finished()

    def cancel(self) -> int:
        """Drop every request in flight (``--no-drain``): how many were dropped."""
        self.sending = False
        self.joins = []
        dropped = list(self.live.values())
        for req in dropped:
            self.engine.abort(req)
        self.live.clear()
        self.in_flight = 0
        return len(dropped)
