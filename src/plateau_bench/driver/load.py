"""Load loops: how requests are released to the target during one level.

* **burst**: ``num_requests`` requests (default ``C``) over ``C`` closed-loop workers; with ``num_requests == C``
  every request leaves at once: the classic benchmark, kept for comparability.
* **steady** (closed loop): ``C`` workers, each sending its next request as soon as its previous one
  ended, until ``num_requests`` have been sent or ``duration_s`` has passed; then nothing new is sent and
  in-flight requests finish (drain); the analysis cuts ramp-up and drain out of the measurement window.
* **rate** (open loop): requests leave at the times of a gamma/Poisson schedule (``workload.arrivals``)
  whatever the server does, optionally bounded by ``max_concurrency`` (a semaphore). A request held back
  by the bound is sent late; the record keeps its ``scheduled_ns`` so the send lag (``sent_ns -
  scheduled_ns``) measures the hold-up. After the duration, arrivals still waiting for the semaphore are
  not sent (counted as ``unsent``). With multi-turn sessions each arrival is a conversation whose turns
  follow one another (the bound then counts conversations); a trace gives the schedule (``offsets_ns``).

``scheduled_ns`` elsewhere: a closed-loop worker's first request at the start of the measured phase, later
ones when their worker became free, so the lag exposes a load generator too slow to release them on time.

Warm-up: ``warmup`` requests go first, at concurrency ``min(C, warmup)``, flagged ``warmup=True``;
the analysis excludes them. Prompts come from a feed by request index (``workload.feed``: a new one
for every request of synthetic workloads), and indices continue from the warm-up into the measured
phase. A feed that runs out (a dataset without ``--allow-reuse``) ends the sending as a duration would.

Times: ``t0_ns`` is the level start on ``clock_ns``; every time handed to the sender and stored
on records is relative to it (the sender must be built with the same ``t0_ns``).

Ending a level: once nothing more will be sent (the duration has passed, every request of a burst
has been sent, or ``finish`` was set because the estimate is precise enough), the level *drains*:
in-flight requests may finish for a grace period of ``max(GRACE_MIN_S, 2 x`` the longest request
finished so far``)`` from the start of the drain. Before any request has finished, a burst waits (its
first wave may take a while; the client timeout bounds it), and a level with a duration or ended by
``finish`` waits ``max(GRACE_MIN_S,`` the time it ran``)``: a level that gets no answer ends on time.
Whatever is still in flight then is **hung**: it
gets a failed record of class ``hung`` (with the tokens it streamed so far when the sender can tell,
as the HTTP client can) and is cancelled. So every request sent ends as ok, failed or hung, and none vanishes.

Ending at once: setting ``cancel`` (a steady level whose estimate is precise: its window ends before
the oldest request in flight was sent; or the user's first Ctrl-C) stops sending and cancels the requests
in flight; they are counted in ``progress.cancelled_at_end`` and get no record (none of their tokens is in
the window).

The bound on silence: a level with ``max_wall_s`` (``--max-level-time``) stops sending then, and every
request then silent for ``min(grace_min_s, max_wall_s)`` (no token since it was sent or since its last
token, where the sender can tell; from then on, checked at every poll) is **hung** at once, whatever the
grace period left: a server that stopped answering holds a level no longer than its bound. Answers still
streaming finish: their tokens are the measurement (an answer may take longer than a level). A request
with no token yet while the server still answers others is queued behind them, not hung
(``load_state.silent_at_bound``): the drain's grace period decides it.
``progress.wall_bound`` says the level reached its bound.

Aborting: setting ``stop`` (the target is gone) ends the level at once: nothing new is sent,
in-flight requests are cancelled and counted in ``progress.cancelled`` (they are not measurements).
Cancelling the ``run_level`` task itself (Ctrl-C) does the same cleanup and re-raises; every finished
record has already gone through ``on_record``.

The sender is a ``Sender`` (the streaming HTTP client, the twin in process, or a test fake): the
loops never touch the network.

Sharing a level between load processes (``driver.pool``): each process runs its part of the level
with a ``LoadShare``. Its request indices are ``index_base + k * index_stride`` (k counting its own
requests), so the processes' indices never collide; its closed-loop workers are numbered from
``worker_base``, so every closed-loop worker of the level keeps its own number; an open-loop share
sends at the given ``arrivals`` (its part of one schedule) instead of drawing a schedule itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from plateau_bench.driver.load_state import (
    LoadProgress,
    LoadShare,
    OnRecord,
    PartialRecords,
    Sender,
    silent_at_bound,
)
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.spec import LevelSpec
from plateau_bench.units import NS
from plateau_bench.workload.arrivals import iter_arrival_offsets_ns
from plateau_bench.workload.feed import PromptFeed, as_feed
from plateau_bench.workload.prompts import Prompt

GRACE_MIN_S = 5.0       # the shortest drain: a hung request is declared no sooner
GRACE_FACTOR = 2.0      # times the longest request finished so far
_DRAIN_POLL_S = 0.25
_TIMER_SLACK_NS = 1_500_000   # how early an event-loop timer may fire (uvloop: whole milliseconds)
_OPEN_SESSION = -2            # open-loop conversations go as "workers" -2, -3, ... (closed-loop ones are 0, 1, ...)

@dataclass
class _Pending:
    task: asyncio.Task[Any] | None
    worker: int
    scheduled_ns: int
    sent_ns: int
    prompt_tokens: int
    warmup: bool


async def run_level(
    sender: Sender,
    prompts: Sequence[Prompt] | PromptFeed,
    level: LevelSpec,
    *,
    t0_ns: int,
    clock_ns: Callable[[], int] = time.monotonic_ns,
    on_record: OnRecord | None = None,
    stop: asyncio.Event | None = None,
    finish: asyncio.Event | None = None,
    cancel: asyncio.Event | None = None,
    progress: LoadProgress | None = None,
    seed: int = 0,
    grace_min_s: float = GRACE_MIN_S,
    share: LoadShare | None = None,
    offsets_ns: Sequence[int] | None = None,
    session_open: Callable[[int], bool] | None = None,
) -> list[RequestRecord]:
    """Run one level and return its records (warm-up included, flagged) in completion order.

    Args:
        sender: sends one request (see ``Sender``).
        prompts: the level's feed (``workload.feed``), or a list to cycle (its repeats counted).
        level: mode, concurrency or rate, stop conditions, warm-up.
        t0_ns: the level start on ``clock_ns``; record times are relative to it.
        on_record: called with each finished record, as soon as it finishes.
        stop: set it to abort the level (in-flight requests are cancelled, not measured).
        finish: set it to end the level early: nothing new is sent, in-flight requests drain.
        cancel: set it to end the level at once, its figures complete: nothing new is sent, in-flight
            requests are cancelled and counted in ``progress.cancelled_at_end`` (not measurements).
        progress: live counters, updated in place.
        seed: seed of the open-loop arrival schedule.
        grace_min_s: the shortest drain before in-flight requests are declared hung.
        share: this process's part of a level shared between load processes.
        offsets_ns: a rate level's send times (a trace), instead of the gamma schedule; prompt ``i``
            goes at offset ``i``.
        session_open: multi-turn sessions (``driver.sessions``): whether the conversation a worker holds
            goes on; in a rate level each arrival is then a conversation, sent turn after turn.
    """
    if not isinstance(prompts, PromptFeed) and not prompts:
        raise ValueError("run_level needs at least one prompt")
    level.validate()
    run = _LevelRun(sender, as_feed(prompts), level, t0_ns, clock_ns, on_record, stop, finish,
                    progress or LoadProgress(), seed)
    run.share = share or LoadShare()
    run.grace_min_ns = int(grace_min_s * NS)
    run.offsets_ns = offsets_ns
    run.session_open = session_open
    run.cancel = cancel
    return await run.run()


class _LevelRun:
    def __init__(self, sender: Sender, prompts: PromptFeed, level: LevelSpec, t0_ns: int,
                 clock_ns: Callable[[], int], on_record: OnRecord | None, stop: asyncio.Event | None,
                 finish: asyncio.Event | None, progress: LoadProgress, seed: int) -> None:
        self.sender = sender
        self.prompts = prompts
        self.level = level
        self.t0_ns = t0_ns
        self.clock_ns = clock_ns
        self.on_record = on_record
        self.stop = stop
        self.finish = finish
        self.progress = progress
        self.seed = seed
        self.records: list[RequestRecord] = []
        self._next_index = 0
        self._stopping = False
        self._failure: BaseException | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, _Pending] = {}
        self._hung: set[int] = set()
        self._drain_start_ns: int | None = None
        self._longest_ns = 0
        self._last_answer_ns = 0   # the latest end of a request answered in full (the server still answers)
        self._deadline_ns: int | None = None
        self._to_send: int | None = None   # requests the current phase will send at most
        self.grace_min_ns = int(GRACE_MIN_S * NS)
        self.share = LoadShare()
        self.offsets_ns: Sequence[int] | None = None
        self.session_open: Callable[[int], bool] | None = None
        self.cancel: asyncio.Event | None = None
        self._cancelling = False
        self._ran_out = False   # the feed had no prompt left: nothing more is sent

    def now(self) -> int:
        return self.clock_ns() - self.t0_ns

    async def run(self) -> list[RequestRecord]:
        watcher = asyncio.create_task(self._watch_stop()) if self.stop is not None else None
        canceller = asyncio.create_task(self._watch_cancel()) if self.cancel is not None else None
        bound = asyncio.create_task(self._watch_wall_bound()) if self.level.max_wall_s is not None else None
        try:
            if self.level.warmup > 0:
                width = min(self.level.concurrency or self.level.max_concurrency or self.level.warmup,
                            self.level.warmup)
                await self._phase(self._closed_loop(width, self.level.warmup, None, warmup=True))
            self.progress.phase = "measure"
            if not self._stopping:
                if self.level.mode == "rate":
                    await self._phase(self._open_loop())
                else:
                    assert self.level.concurrency is not None
                    deadline = self._deadline(self.now())
                    await self._phase(self._closed_loop(self.level.concurrency, self.level.total_requests(),
                                                        deadline, warmup=False))
        finally:
            for task in (watcher, canceller, bound):
                if task is not None:
                    task.cancel()
            await self._cancel_all()
            self.progress.phase = "done"
        if self._failure is not None:
            raise self._failure
        return self.records

    # -- phases ---------------------------------------------------------------------------------

    def _deadline(self, start_ns: int) -> int | None:
        return None if self.level.duration_s is None else start_ns + int(self.level.duration_s * NS)

    async def _phase(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a phase as a task (so a stop can cancel it) and wait for everything it spawned.

        Once nothing more will be sent the phase drains; requests still in flight after the grace
        period are recorded as hung and cancelled (see the module docstring).
        """
        self._spawn(coro)
        while self._tasks:
            await asyncio.wait(list(self._tasks), timeout=_DRAIN_POLL_S)
            if self._tasks and not self._stopping and self._sending_over():
                self._drain()

    def _finishing(self) -> bool:
        return self._ran_out or self.progress.wall_bound or (self.finish is not None and self.finish.is_set())

    def _sending_over(self) -> bool:
        if self._finishing():
            return True
        if self._deadline_ns is not None and self.now() >= self._deadline_ns:
            return True
        return self._to_send is not None and self.progress.sent >= self._to_send

    def _drain(self) -> None:
        now = self.now()
        if self._drain_start_ns is None:
            self._drain_start_ns = now
            self.progress.draining = True
        if self._longest_ns == 0 and self._deadline_ns is None and not self._finishing():
            return  # a burst's first wave, nothing finished yet: no yardstick (the client timeout bounds it)
        # Nothing finished yet: as long again as the level ran (module docstring).
        grace_ns = max(self.grace_min_ns, GRACE_FACTOR * self._longest_ns if self._longest_ns else self._drain_start_ns)
        if now - self._drain_start_ns < grace_ns:
            return
        for index, pending in list(self._pending.items()):
            self._declare_hung(index, pending, now)

    async def _watch_wall_bound(self) -> None:
        """From ``max_wall_s`` on: nothing new is sent, and silent requests are hung (module docstring)."""
        assert self.level.max_wall_s is not None
        await asyncio.sleep(max(0.0, self.level.max_wall_s - self.now() / NS))
        self.progress.wall_bound = True   # nothing more is sent (``_finishing``): the level drains from here
        silence_ns = min(self.grace_min_ns, int(self.level.max_wall_s * NS))
        while True:
            now = self.now()
            signs = {i: self._last_sign_of_life(i, p) for i, p in self._pending.items() if i not in self._hung}
            alive = max([self._last_answer_ns, *(t for t, answered in signs.values() if answered)])
            for index in silent_at_bound(now, signs, alive, silence_ns):
                self.progress.hung_at_bound += 1
                self._declare_hung(index, self._pending[index], now)
            await asyncio.sleep(_DRAIN_POLL_S)

    def _last_sign_of_life(self, index: int, pending: _Pending) -> tuple[int, bool]:
        """A request's last token and True, or its send and False when none came or the sender cannot tell."""
        if isinstance(self.sender, PartialRecords):
            partial = self.sender.partial_record(index, error=ErrorClass.HUNG, detail="")
            if partial is not None and partial.chunk_ns:
                return partial.chunk_ns[-1], True
        return pending.sent_ns, False

    def _declare_hung(self, index: int, pending: _Pending, now: int) -> None:
        self._hung.add(index)
        self.progress.hung += 1
        age_s = (now - pending.sent_ns) / NS
        detail = f"no answer {age_s:.1f} s after it was sent (still in flight after the grace period)"
        # What it streamed so far, when the sender knows (tokens of a failed request are kept apart).
        partial = (self.sender.partial_record(index, error=ErrorClass.HUNG, detail=detail)
                   if isinstance(self.sender, PartialRecords) else None)
        self._deliver(partial or RequestRecord(
            index=index, worker=pending.worker, scheduled_ns=pending.scheduled_ns, sent_ns=pending.sent_ns,
            end_ns=now, prompt_tokens=pending.prompt_tokens, error=ErrorClass.HUNG, error_detail=detail,
            warmup=pending.warmup))
        if pending.task is not None:
            pending.task.cancel()

    async def _closed_loop(self, workers: int, count: int | None, deadline_ns: int | None, *,
                           warmup: bool) -> None:
        start = self.now()
        first_index = self._next_index
        self._deadline_ns = deadline_ns
        self._to_send = None if count is None else self.progress.sent + count
        self._drain_start_ns = None
        for w in range(self.share.worker_base, self.share.worker_base + workers):
            self._spawn(self._worker(w, start, first_index, count, deadline_ns, warmup))

    async def _worker(self, worker: int, start_ns: int, first_index: int, count: int | None,
                      deadline_ns: int | None, warmup: bool) -> None:
        scheduled = start_ns
        while not self._stopping and not self._finishing():
            if count is not None and self._next_index - first_index >= count:
                return
            if deadline_ns is not None and self.now() >= deadline_ns:
                return
            index = self._claim()
            await self._send(index, worker, scheduled, warmup)
            scheduled = self.now()

    async def _open_loop(self) -> None:
        level = self.level
        assert level.rate is not None
        start = self.now()
        deadline = self._deadline(start)
        count = level.num_requests
        if self.offsets_ns is not None:
            count = len(self.offsets_ns) if count is None else min(count, len(self.offsets_ns))
        self._deadline_ns = deadline
        self._to_send = None if count is None else self.progress.sent + count
        self._drain_start_ns = None
        bound = asyncio.Semaphore(level.max_concurrency) if level.max_concurrency else None
        arrivals = (iter(self.share.arrivals) if self.share.arrivals is not None
                    else iter(self.offsets_ns) if self.offsets_ns is not None
                    else iter_arrival_offsets_ns(level.rate, burstiness=level.burstiness, seed=self.seed))
        sessions = self.session_open is not None
        for n, offset in enumerate(arrivals):
            scheduled = start + offset
            # arrivals are requests, or whole conversations (then the count is of their requests)
            counted = self.progress.sent if sessions else n
            if self._stopping or self._finishing() or (count is not None and counted >= count):
                return
            if deadline is not None and scheduled >= deadline:
                return
            delay = scheduled - self.now()
            if delay > 0:
                await (self._until(scheduled) if self.offsets_ns is not None else asyncio.sleep(delay / NS))
            if sessions:
                self._spawn(self._session_arrival(_OPEN_SESSION - n, scheduled, bound, deadline))
            else:
                self._spawn(self._arrival(scheduled, bound, deadline))

    async def _session_arrival(self, key: int, scheduled_ns: int, bound: asyncio.Semaphore | None,
                               deadline_ns: int | None) -> None:
        """One conversation arriving in the open loop: its turns one after the other (``max_concurrency``
        bounds conversations in flight), until it ends or nothing more may be sent."""
        assert self.session_open is not None
        async with bound if bound is not None else contextlib.nullcontext():
            while not (self._stopping or self._finishing() or self._sending_over()):
                await self._send(self._claim(), key, scheduled_ns, False)
                if not self.session_open(key):
                    return
                scheduled_ns = self.now()

    async def _until(self, when_ns: int) -> None:
        """Wait until ``when_ns`` and not before: uvloop's timers count whole milliseconds and may fire up
        to one early, so a trace's last millisecond is waited by yielding to the loop (other requests'
        reads go on meanwhile). Only for traces: at high rates this polling would cost the generator CPU."""
        delay = when_ns - self.now()
        if delay > _TIMER_SLACK_NS:
            await asyncio.sleep((delay - _TIMER_SLACK_NS) / NS)
        while self.now() < when_ns:
            await asyncio.sleep(0)

    async def _arrival(self, scheduled_ns: int, bound: asyncio.Semaphore | None, deadline_ns: int | None) -> None:
        if bound is None:
            await self._send(self._claim(), -1, scheduled_ns, False)
            return
        async with bound:
            if self._stopping or self._finishing() or (deadline_ns is not None and self.now() >= deadline_ns):
                self.progress.unsent += 1
                return
            await self._send(self._claim(), -1, scheduled_ns, False)

    # -- one request ----------------------------------------------------------------------------

    def _claim(self) -> int:
        index = self.share.index_base + self._next_index * self.share.index_stride
        self._next_index += 1
        return index

    async def _send(self, index: int, worker: int, scheduled_ns: int, warmup: bool) -> None:
        try:
            prompt = await self.prompts.take(index)
        except Exception as exc:  # a prompt that cannot be built ends the level, saying why
            self._fail(exc)
            return
        if prompt is None:
            self._ran_out = True
            return
        if self._stopping:
            return   # aborted while its prompt was being built: never sent
        p = self.progress
        p.sent += 1
        p.in_flight += 1
        p.peak_in_flight = max(p.peak_in_flight, p.in_flight)
        self._pending[index] = _Pending(asyncio.current_task(), worker, scheduled_ns, self.now(),
                                        prompt.prompt_tokens, warmup)
        try:
            record = await self.sender.send(index=index, prompt=prompt.text, prompt_tokens=prompt.prompt_tokens,
                                            max_tokens=prompt.output_tokens, scheduled_ns=scheduled_ns,
                                            worker=worker, warmup=warmup)
        except asyncio.CancelledError:
            if index in self._hung:
                return  # already recorded as hung; the worker ends with it
            self._count_cancelled()
            raise
        except Exception as exc:  # a broken sender ends the level; it must not vanish in a task
            self._fail(exc)
            return
        finally:
            p.in_flight -= 1
            self._pending.pop(index, None)
        if index in self._hung:
            return  # answered after it was declared hung: the hung record stands
        if self._stopping and record.error == ErrorClass.CANCELLED:
            self._count_cancelled()
            return
        if record.error is None:
            self._longest_ns = max(self._longest_ns, record.end_ns - record.sent_ns)
        self._deliver(record)

    def _deliver(self, record: RequestRecord) -> None:
        self.records.append(record)
        p = self.progress
        if record.error is None:
            p.completed += 1
            self._last_answer_ns = max(self._last_answer_ns, record.end_ns)
        else:
            p.failed += 1
        p.output_tokens += record.output_tokens
        p.prompt_tokens += record.prompt_tokens
        if self.on_record is not None:
            try:
                self.on_record(record)
            except Exception as exc:  # e.g. the result file cannot be written: stop, say why
                self._fail(exc)

    # -- stopping -------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._abort()

    def _abort(self) -> None:
        self._stopping = True
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    def _count_cancelled(self) -> None:
        if self._cancelling:
            self.progress.cancelled_at_end += 1
        else:
            self.progress.cancelled += 1

    async def _watch_cancel(self) -> None:
        assert self.cancel is not None
        await self.cancel.wait()
        self._cancelling = True
        self._abort()

    async def _watch_stop(self) -> None:
        assert self.stop is not None
        await self.stop.wait()
        self._abort()

    async def _cancel_all(self) -> None:
        """Cancel whatever is left (a cancelled ``run_level``) and wait until it is gone."""
        if not self._tasks:
            return
        self._abort()
        while self._tasks:
            try:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            except asyncio.CancelledError:
                continue  # cancelled again while cleaning up: finish cleaning, the caller re-raises
