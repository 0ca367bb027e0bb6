"""One load process of a pool (``--workers``): ``python -m plateau_bench.driver.worker``.

It runs the same load loop, streaming client and health sampler as a single-process run, on its
own event loop (uvloop) and connection pool, for the part of each level the coordinator gives it
(``driver.split``), and streams back what it does (``driver.wire``): a notice for each request as
it is sent and each record as it finishes, batched per turn of its event loop, so a busy process
sends few large messages and an idle one answers at once.

Times: the coordinator sends the level's origin on the machine's monotonic clock (one clock for
every process on a machine), and every time this process stamps is relative to it.

Signals: Ctrl-C reaches the whole terminal's process group, but stopping is the coordinator's
decision (it aborts the level and collects what finished), so this process ignores SIGINT. It ends
on ``Shutdown`` or when its input ends (the coordinator is gone).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from typing import BinaryIO

from plateau_bench.aio import loop_name, old_objects_frozen
from plateau_bench.aio import run as run_async
from plateau_bench.driver.client import StreamingClient
from plateau_bench.driver.health import HealthSampler
from plateau_bench.driver.load import run_level
from plateau_bench.driver.load_state import LoadProgress
from plateau_bench.driver.wire import (
    Abort,
    Batch,
    Finish,
    LevelDone,
    Ready,
    RunLevel,
    Setup,
    Shutdown,
    Started,
    frame,
    read_frame,
    to_worker,
)
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.workload.feed import LevelKey, prompts_first
from plateau_bench.workload.source import PromptSource

_OPEN_LOOP_WIDTH = 4096   # connections an unbounded open-loop share may open (the pool opens them as needed)


class Outbox:
    """Notices and records gathered during one turn of the event loop, then sent as one ``Batch`` frame."""

    def __init__(self, deliver: Callable[[bytes], None]) -> None:
        self.deliver = deliver
        self.batch = Batch()
        self._scheduled = False

    def started(self, notice: Started) -> None:
        self.batch.started.append(notice)
        self._schedule()

    def record(self, record: RequestRecord) -> None:
        self.batch.records.append(record)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self.batch.started or self.batch.records:
            self.deliver(frame(self.batch))
            self.batch = Batch()


class _NoticingSender:
    """The client, announcing each request to the coordinator before it goes out."""

    def __init__(self, client: StreamingClient, outbox: Outbox) -> None:
        self.client = client
        self.outbox = outbox
        self.in_flight = 0

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        now = self.client.clock_ns() - self.client.t0_ns
        self.outbox.started(Started(index, worker, scheduled_ns, now, prompt_tokens, warmup))
        self.in_flight += 1
        try:
            return await self.client.send(index=index, prompt=prompt, prompt_tokens=prompt_tokens,
                                          max_tokens=max_tokens, scheduled_ns=scheduled_ns, worker=worker,
                                          warmup=warmup)
        finally:
            self.in_flight -= 1

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None:
        return self.client.partial_record(index, error=error, detail=detail)


async def run_part(setup: Setup, order: RunLevel, outbox: Outbox, finish: asyncio.Event,
                   abort: asyncio.Event, source: PromptSource | None = None) -> LevelDone:
    """This process's part of one level, streamed into ``outbox``; its health and outcome returned.
    ``source``: the run's prompts, built once from the setup's recipe (else built here)."""
    level = order.part.level
    source = source or PromptSource(setup.prompts)
    feed = source.feed(order.prompts or LevelKey(label=""), ahead=order.ahead)
    width = level.concurrency or level.max_concurrency or _OPEN_LOOP_WIDTH
    count_tokens = None
    if setup.tokenizer:
        from plateau_bench.workload.tokens import LocalTokenizer

        count_tokens = LocalTokenizer.load(setup.tokenizer).count_text
    progress = LoadProgress()
    error = None
    with old_objects_frozen():
        async with StreamingClient(setup.target, concurrency=width, t0_ns=order.t0_ns,
                                   count_tokens=count_tokens) as client:
            sender = _NoticingSender(client, outbox)
            health = HealthSampler(t0_ns=order.t0_ns, in_flight=lambda: sender.in_flight, worker=setup.worker)
            health.start()
            try:
                share = order.part.share   # its requests are every stride-th of the level's indices
                await feed.prime(share.index_base + prompts_first(level) * share.index_stride)
                await run_level(sender, feed, level, t0_ns=order.t0_ns, on_record=outbox.record,
                                stop=abort, finish=finish, seed=order.seed, progress=progress,
                                share=order.part.share)
            except Exception as exc:  # the part broke (not a failed request): the coordinator says so
                error = f"{type(exc).__name__}: {exc}"
            finally:
                feed.close()
                samples = await health.stop()
    outbox.flush()
    return LevelDone(health=samples, cancelled=progress.cancelled, hung_at_bound=progress.hung_at_bound,
                     error=error, prompts=feed.use())


def outcome_of(task: asyncio.Task[LevelDone]) -> LevelDone:
    """The part's ``LevelDone``, also when it broke or was cancelled (the coordinator must hear of it)."""
    if task.cancelled():
        done = LevelDone(error="cancelled")
    elif task.exception() is not None:
        exc = task.exception()
        done = LevelDone(error=f"{type(exc).__name__}: {exc}")
    else:
        done = task.result()
    return done


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer the coordinator until ``Shutdown`` or the end of its input."""
    first = await read_frame(reader)
    if first is None:
        return
    setup = to_worker.decode(first)
    if not isinstance(setup, Setup):
        raise SystemExit(f"plateau worker: expected setup, got {type(setup).__name__}")
    source = PromptSource(setup.prompts)
    writer.write(frame(Ready(pid=os.getpid(), loop=loop_name())))
    outbox = Outbox(writer.write)
    level: asyncio.Task[LevelDone] | None = None
    finish, abort = asyncio.Event(), asyncio.Event()
    while True:
        payload = await read_frame(reader)
        message = to_worker.decode(payload) if payload is not None else Shutdown()
        if isinstance(message, RunLevel):
            finish, abort = asyncio.Event(), asyncio.Event()
            level = asyncio.create_task(run_part(setup, message, outbox, finish, abort, source))
            level.add_done_callback(lambda task: writer.write(frame(outcome_of(task))))
        elif isinstance(message, Finish):
            finish.set()
        elif isinstance(message, Abort):
            abort.set()
        elif isinstance(message, Shutdown):
            if level is not None and not level.done():
                abort.set()
                await asyncio.wait([level])
            await writer.drain()
            return


async def _main() -> None:
    loop = asyncio.get_running_loop()
    # The protocol owns the original stdout; anything else printed goes to stderr.
    proto_out: BinaryIO = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, proto_out)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        await serve(reader, writer)
    finally:
        writer.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run_async(_main())


if __name__ == "__main__":
    main()
