"""The live closed loop over HTTP that warm steady levels share: the server is never emptied between them.

``HttpLevelRunner`` keeps one ``WarmLoad`` from the first warm level until the sweep ends it
(``end_warm``). Its records all share one clock origin (``t0``) and its request indices never repeat.

* **Joining workers** (the concurrency goes up) send their first requests spread over the request cycle
  expected at the new concurrency (``workload.warm_joins.predict_cycle``), into the widest gaps between
  the running workers' next sends (``join_times``). A running worker's next send is estimated from its
  request's pace: the tokens it streamed so far against its ``max_tokens`` (before its first two tokens:
  one cycle after it was sent).
* **Retiring workers** (it goes down) finish their current request and stop; they are spread evenly over
  the requests in flight ordered by tokens left (``retirees``), so the batch keeps its mix of short and
  long contexts. The concurrency is *settled* once every joining worker has sent and every retiring one
  has finished.
* **Records** go to the level running when they end (``on_record`` at once); a request that ends between
  two levels belongs to the next one. ``partials`` gives every request in flight as what it streamed
  so far (``end_ns`` now), for the window's token count.
* **Hung**: a request silent (no token since it was sent, or since its last token) for longer than
  ``max(grace_min_s, GRACE_FACTOR x`` the longest of: the longest successful request so far, the cycle
  the concurrency could take at most``)`` is recorded ``hung`` in the level where that happens (with what
  it streamed) and cancelled; its worker sends its next request. The cycle at most: the last level's
  median cycle scaled by the concurrency (the request rate does not fall when workers join), so requests
  queued behind a cap after a step up are not taken for hung. Before any request finished, the level's
  own time limit stands in.
* **The end** (``drain``): nothing more is sent and the requests in flight finish within the grace period
  of a cold level's drain (``driver.load``), else are hung; or (``cancel``) they are cancelled unmeasured.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from plateau_bench.driver.client import StreamingClient
from plateau_bench.driver.load import GRACE_FACTOR, GRACE_MIN_S
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.spec import TargetSpec
from plateau_bench.units import NS
from plateau_bench.workload.feed import PromptFeed
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.warm_joins import join_times, predict_cycle, retirees

MAX_CONNECTIONS = 1 << 16   # the pool opens connections only as requests need them: one per worker at most
_DRAIN_POLL_S = 0.25
_FRESH = 1 << 62            # tokens left of a worker about to send a new request: the most of all

OnRecord = Callable[[RequestRecord], None]


@dataclass
class _Flight:
    worker: int
    sent_ns: int
    scheduled_ns: int
    prompt_tokens: int
    max_tokens: int
    task: asyncio.Task[RequestRecord]


class WarmLoad:
    """See the module docstring. Times are ns since ``t0`` unless named ``_s``."""

    def __init__(self, target: TargetSpec, *, count_tokens: Callable[[str], int] | None = None,
                 grace_min_s: float = GRACE_MIN_S, clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self.clock_ns = clock_ns
        self.t0 = clock_ns()
        self.client = StreamingClient(target, concurrency=MAX_CONNECTIONS, clock_ns=clock_ns, t0_ns=self.t0,
                                      count_tokens=count_tokens)
        self.grace_min_ns = int(grace_min_s * NS)
        self.active: set[int] = set()          # workers that keep sending
        self.retiring: set[int] = set()        # workers that stop once their request ends
        self.joins: dict[int, float] = {}      # worker -> when it sends its first request (s); not sent yet
        self.taking: set[int] = set()          # workers waiting for their next prompt
        self.flights: dict[int, _Flight] = {}  # request index -> in flight
        self.cycles: list[tuple[int, float]] = []   # (concurrency, median request time in s) per level
        self.cycle_s = 0.0                     # the request cycle expected at the current concurrency
        self.settled_ns: int | None = 0
        self.sending = True
        self.ran_out = False                   # the prompt feed had none left: nothing more is sent
        self.longest_ns = 0                    # the longest successful request so far
        self.failure: BaseException | None = None
        self.level_records: list[RequestRecord] = []   # ended since the running level's start (or the last close)
        self.on_record: OnRecord | None = None
        self._cycle_bound_ns = 0
        self.time_bound: tuple[int, float] | None = None   # the last level's bound (ns) and the silence hung there (s)
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._next_worker = 0
        self._next_index = 0
        self._hung: set[int] = set()
        self._feed: PromptFeed | None = None   # the running level's prompts (None between levels)
        self._feed_next = 0
        self._feed_ready = asyncio.Event()
        self._feed_users: dict[int, tuple[PromptFeed, int]] = {}   # id -> (a feed let go, takes under way)

    def now(self) -> int:
        return self.clock_ns() - self.t0

    async def open(self) -> None:
        await self.client.__aenter__()

    # -- the level's side ----------------------------------------------------------------------
    def begin_level(self, feed: PromptFeed, on_record: OnRecord | None) -> None:
        """A level starts: its prompts from ``feed``, its records to ``on_record`` (those that ended since the
        last level closed first)."""
        old, self._feed, self._feed_next = self._feed, feed, 0
        if old is not None:
            self._retire_feed(old)
        self._feed_ready.set()
        self.on_record = on_record
        if on_record is not None:
            for r in self.level_records:
                self._hand_over(r)

    def close_level(self) -> list[RequestRecord]:
        """The running level closes: the records that ended in it. Later ones wait for the next level."""
        records, self.level_records, self.on_record = self.level_records, [], None
        old, self._feed = self._feed, None   # every prompt a level handed out was sent in it
        if old is not None:
            self._retire_feed(old)
        return records

    def plan(self, concurrency: int) -> None:
        """The request cycle expected at ``concurrency`` and the longest it could be (module docstring)."""
        self.cycle_s = predict_cycle(self.cycles, concurrency)
        if self.cycles:
            c, cycle_s = self.cycles[-1]
            self._cycle_bound_ns = int(cycle_s * max(1.0, concurrency / c) * NS)

    def learn(self, concurrency: int, records: list[RequestRecord]) -> None:
        """What later cycles are predicted from: the median request time (sent to end) of a level's
        successful requests."""
        spans = sorted(r.end_ns - r.sent_ns for r in records if r.error is None)
        if spans:
            self.cycles.append((concurrency, spans[len(spans) // 2] / NS))

    def set_workers(self, count: int) -> None:
        """Move to ``count`` workers from now (joins spread, retirees finishing first: module docstring)."""
        now_s = self.now() / NS
        self.settled_ns = None
        have = len(self.active)
        if count > have:
            new = list(range(self._next_worker, self._next_worker + count - have))
            self._next_worker += len(new)
            for worker, at in zip(new, join_times(now_s, self._restarts(now_s), len(new), self.cycle_s),
                                  strict=True):
                self.active.add(worker)
                self.joins[worker] = at
                self._workers[worker] = asyncio.create_task(self._worker(worker, at))
        elif count < have:
            busy = {f.worker: index for index, f in self.flights.items() if index not in self._hung}
            order = sorted(self.active, key=lambda w: self._tokens_left(w, busy.get(w)))
            for worker in retirees(order, have - count):
                self.active.discard(worker)
                if worker in self.joins:   # never sent: it just does not join
                    del self.joins[worker]
                    self._workers.pop(worker).cancel()
                elif worker in self.taking or worker in busy:
                    self.retiring.add(worker)
        self._maybe_settled()

    def partials(self) -> list[RequestRecord]:
        """Every request in flight as what it streamed so far (successful so far, ``end_ns`` now)."""
        out = []
        for index in list(self.flights):
            if index in self._hung:
                continue
            r = self.client.partial_record(index, error=ErrorClass.HUNG, detail="")
            if r is not None:
                out.append(msgspec.structs.replace(r, error=None, error_detail=None))
        return out

    def hang_silent(self, no_yardstick_s: float) -> None:
        """Record as hung every request silent for longer than the grace period (module docstring)."""
        yardstick = max(self.longest_ns, self._cycle_bound_ns) or int(no_yardstick_s * NS)
        limit = max(self.grace_min_ns, int(GRACE_FACTOR * yardstick))
        now = self.now()
        for index, flight in list(self.flights.items()):
            if index not in self._hung and now - self._last_sign_of_life(index, flight) > limit:
                self._declare_hung(index, flight, now, f"no token for {limit / NS:.1f} s")

    def hang_at_bound(self, silence_s: float) -> int:
        """At a level's time bound (``--max-level-time``), as a cold level does there: every request silent
        for ``silence_s`` is hung at once, and its worker stops (the next level joins new ones as needed): a
        server that stopped answering holds the live load no longer than the bound. How many were hung."""
        now, hung = self.now(), 0
        for index, flight in list(self.flights.items()):
            if index not in self._hung and now - self._last_sign_of_life(index, flight) >= silence_s * NS:
                self.active.discard(flight.worker)
                self._declare_hung(index, flight, now, f"no token for {silence_s:g} s at the level's time bound")
                hung += 1
        return hung

    # -- the workers ---------------------------------------------------------------------------
    def _restarts(self, now_s: float) -> list[float]:
        """When each running worker will send its next request (module docstring)."""
        out = [at for at in self.joins.values()]
        out += [now_s for w in self.taking if w in self.active]
        for index, flight in self.flights.items():
            if flight.worker not in self.active:
                continue
            r = self.client.partial_record(index, error=ErrorClass.HUNG, detail="")
            tokens = r.output_tokens if r is not None else 0
            if r is not None and tokens >= 2 and r.first_token_ns is not None:
                pace_s = (now_s - r.first_token_ns / NS) / (tokens - 1)
                out.append(now_s + max(flight.max_tokens - tokens, 0) * pace_s)
            else:
                out.append(now_s + max(self.cycle_s - (now_s - flight.sent_ns / NS), 0.0))
        return out

    def _tokens_left(self, worker: int, index: int | None) -> int:
        if worker in self.joins:
            return -1
        if index is None:
            return _FRESH
        r = self.client.partial_record(index, error=ErrorClass.HUNG, detail="")
        return self.flights[index].max_tokens - (r.output_tokens if r is not None else 0)

    def _maybe_settled(self) -> None:
        if self.settled_ns is None and not self.joins and not self.retiring:
            self.settled_ns = self.now()

    async def _worker(self, worker: int, start_s: float) -> None:
        try:
            await asyncio.sleep(max(0.0, start_s - self.now() / NS))
            scheduled = round(start_s * NS)
            while self.sending and worker in self.active:
                self.taking.add(worker)
                try:
                    prompt = await self._take_prompt()
                finally:
                    self.taking.discard(worker)
                if not self.sending:
                    return
                if prompt is None:
                    self.ran_out = True
                    return
                await self._send(worker, prompt, scheduled)
                scheduled = self.now()
        except Exception as exc:  # a broken feed or sender must not vanish in a task: the level raises it
            if self.failure is None:
                self.failure = exc
        finally:
            self.active.discard(worker)
            self.retiring.discard(worker)
            self.joins.pop(worker, None)
            self._workers.pop(worker, None)
            self._maybe_settled()

    async def _take_prompt(self) -> Prompt | None:
        """The next prompt of the running level; between levels, the next level's first (a worker whose request
        ended then waits for it: the gap is the sweep's own analysis of the level closed, milliseconds)."""
        while self._feed is None:
            if not self.sending:
                return None
            self._feed_ready.clear()
            await self._feed_ready.wait()
        feed = self._feed
        index, self._feed_next = self._feed_next, self._feed_next + 1
        try:
            return await feed.take(index)
        finally:
            self._taken_from(feed)

    def _retire_feed(self, feed: PromptFeed) -> None:
        """Close a replaced feed once no worker waits on it (closing cancels the prompts it is building)."""
        waiting = len(self.taking)   # every take under way started on this feed or an older one
        if waiting == 0:
            feed.close()
        else:
            self._feed_users[id(feed)] = (feed, waiting)

    def _taken_from(self, feed: PromptFeed) -> None:
        entry = self._feed_users.get(id(feed))
        if entry is None:
            return
        if entry[1] <= 1:
            del self._feed_users[id(feed)]
            feed.close()
        else:
            self._feed_users[id(feed)] = (feed, entry[1] - 1)

    async def _send(self, worker: int, prompt: Prompt, scheduled_ns: int) -> None:
        index, self._next_index = self._next_index, self._next_index + 1
        task = asyncio.create_task(self.client.send(
            index=index, prompt=prompt.text, prompt_tokens=prompt.prompt_tokens, max_tokens=prompt.output_tokens,
            scheduled_ns=scheduled_ns, worker=worker))
        self.flights[index] = _Flight(worker, self.now(), scheduled_ns, prompt.prompt_tokens, prompt.output_tokens,
                                      task)
        if self.joins.pop(worker, None) is not None:
            self._maybe_settled()
        try:
            await asyncio.wait({task})
        finally:
            if not task.done():   # the worker itself was cancelled: so is its request
                task.cancel()
            self.flights.pop(index, None)
        if index in self._hung or task.cancelled():
            return   # hung: recorded already; cancelled: the load's end counts it
        record = task.result()   # the client never raises for a failed request: an exception here is a bug
        if record.error is None:
            self.longest_ns = max(self.longest_ns, record.end_ns - record.sent_ns)
        self._deliver(record)

    def _deliver(self, record: RequestRecord) -> None:
        self.level_records.append(record)
        if self.on_record is not None:
            self._hand_over(record)

    def _hand_over(self, record: RequestRecord) -> None:
        assert self.on_record is not None
        try:
            self.on_record(record)
        except Exception as exc:  # e.g. the result file cannot be written: the level raises it
            if self.failure is None:
                self.failure = exc

    def _last_sign_of_life(self, index: int, flight: _Flight) -> int:
        r = self.client.partial_record(index, error=ErrorClass.HUNG, detail="")
        return r.chunk_ns[-1] if r is not None and r.chunk_ns else flight.sent_ns

    def _declare_hung(self, index: int, flight: _Flight, now: int, why: str) -> None:
        self._hung.add(index)
        age_s = (now - flight.sent_ns) / NS
        detail = f"{why} ({age_s:.1f} s after it was sent): still in flight after the grace period"
        partial = self.client.partial_record(index, error=ErrorClass.HUNG, detail=detail)
        self._deliver(partial or RequestRecord(
            index=index, worker=flight.worker, scheduled_ns=flight.scheduled_ns, sent_ns=flight.sent_ns, end_ns=now,
            prompt_tokens=flight.prompt_tokens, error=ErrorClass.HUNG, error_detail=detail))
        flight.task.cancel()

    # -- the end -------------------------------------------------------------------------------
    def stop_sending(self) -> None:
        """Nothing more is sent: workers not yet joined never will, the others stop after their request."""
        self.sending = False
        self._feed_ready.set()   # wake the workers waiting for a level's prompts: there will be none
        for worker in list(self.joins):
            task = self._workers.get(worker)
            if task is not None:
                task.cancel()

    async def drain(self) -> list[RequestRecord]:
        """Stop sending and let the requests in flight finish, within a cold level's drain grace period; the
        records that ended since the last level closed."""
        self.stop_sending()
        start = self.now()
        while self.flights:
            await asyncio.wait([f.task for f in self.flights.values()], timeout=_DRAIN_POLL_S)
            if self.time_bound is not None and self.now() >= self.time_bound[0]:
                self.hang_at_bound(self.time_bound[1])   # past the last level's bound, as in a cold level's drain
            grace = max(self.grace_min_ns, int(GRACE_FACTOR * self.longest_ns) if self.longest_ns else start)
            if self.now() - start >= grace:
                for index, flight in list(self.flights.items()):
                    if index not in self._hung:
                        self._declare_hung(index, flight, self.now(), "no complete answer")
        await self._stop_workers()
        return self.close_level()

    async def cancel(self) -> tuple[list[RequestRecord], int]:
        """Stop sending and cancel the requests in flight: the records that ended since the last level
        closed, and how many were cancelled."""
        self.stop_sending()
        cancelled = len([i for i in self.flights if i not in self._hung])
        await self._stop_workers()
        return self.close_level(), cancelled

    async def _stop_workers(self) -> None:
        tasks: list[asyncio.Task[Any]] = [*self._workers.values(), *(f.task for f in self.flights.values())]
        for task in tasks:
            task.cancel()
        interrupted = False
        while tasks:
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
                tasks = []
            except asyncio.CancelledError:
                interrupted = True   # cancelled while cleaning up: finish cleaning first
        if interrupted:
            raise asyncio.CancelledError

    async def close(self) -> None:
        """Cancel whatever still runs and close the connections and the prompt feeds (idempotent)."""
        self.stop_sending()
        await self._stop_workers()
        for feed, _ in self._feed_users.values():
            feed.close()
        self._feed_users.clear()
        if self._feed is not None:
            self._feed.close()
        await self.client.close()
