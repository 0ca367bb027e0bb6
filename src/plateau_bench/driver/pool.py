"""Load processes on this machine (``--workers N|auto``): started once, given each level's parts.

A single asyncio process streams on the order of 100k tokens/s and a few thousand connections
before its own event loop limits the load. The pool starts ``N`` processes (``driver.worker``) once
per sweep, each with its own event loop, client and connection pool, and for each level sends every
process its exact part (``driver.split``). Each process streams back a notice per request sent and
each record as it finishes (``driver.wire``); the coordinator hands every record to the same
``on_record`` a single-process run uses, so the level is built from all records in one pass exactly
as before (``analysis.level.build_level``), never from per-process figures.

A process that dies mid-level (killed, out of memory) is reported in the level's notes, and the
requests it had announced and not finished are counted as ``hung`` failures with a detail naming the
process, so ``ok + failed == sent`` still holds; the level is marked failed (``--resume`` measures it
again) and the process is started afresh for the next level. Requests it claimed in the last turn of
its event loop before dying, not yet announced, cannot be known.

Stopping: ``finish`` is forwarded as ``Finish`` (the processes drain), ``abort`` as ``Abort``. When the
coordinator itself is cancelled (Ctrl-C, or SIGTERM relayed as SIGINT by ``aio``), it aborts every
process and waits up to ``STOP_GRACE_S`` for what they finished, so no finished record is lost; the
processes ignore SIGINT and leave when told to or when the coordinator's end of their pipe closes.
"""

from __future__ import annotations

import abc
import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

import msgspec

from plateau_bench.driver.split import auto_workers, split_level
from plateau_bench.driver.wire import (
    Abort,
    Batch,
    Finish,
    FromWorker,
    LevelDone,
    Ready,
    RunLevel,
    Setup,
    Shutdown,
    Started,
    ToWorker,
    frame,
    from_worker,
    read_frame,
)
from plateau_bench.errors import ErrorClass
from plateau_bench.records import HealthSample, RequestRecord
from plateau_bench.result import WorkerClock
from plateau_bench.result_parts import PromptUse
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.workload.feed import CHUNK, LevelKey
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.source import PromptSource

STOP_GRACE_S = 3.0      # how long an interrupted level waits for the processes' last records
START_TIMEOUT_S = 60.0  # a process that has not said it is ready by then is not coming

OnRecord = Callable[[RequestRecord], None]


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "its pipe closed"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


@dataclass
class _Part:
    """One process's part of the level being run: what it announced and has not finished."""

    on_record: OnRecord
    process: int = 0                 # the worker's number, stamped on its records
    pending: dict[int, Started] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: LevelDone | None = None
    died: str | None = None
    failure: BaseException | None = None

    def take(self, batch: Batch) -> None:
        for notice in batch.started:
            self.pending[notice.index] = notice
        for record in batch.records:
            self.pending.pop(record.index, None)
            self._deliver(msgspec.structs.replace(record, process=self.process))

    def _deliver(self, record: RequestRecord) -> None:
        try:
            self.on_record(record)
        except Exception as exc:  # e.g. the result file cannot be written: the level stops, says why
            self.failure = self.failure or exc

    def lost(self, worker: LoadWorker, why: str, now_ns: int) -> None:
        """The worker died: its requests in flight become hung records (counted, not lost)."""
        self.died = (f"{worker.describe()} died mid-level ({why}): its {len(self.pending)} request(s) in flight "
                     "are counted as hung")
        detail = f"its {worker.describe()} died ({why}) while it was in flight"
        for notice in sorted(self.pending.values(), key=lambda n: n.index):
            self._deliver(RequestRecord(
                index=notice.index, worker=notice.worker, scheduled_ns=notice.scheduled_ns, sent_ns=notice.sent_ns,
                end_ns=max(now_ns, notice.sent_ns), prompt_tokens=notice.prompt_tokens, error=ErrorClass.HUNG,
                error_detail=detail, warmup=notice.warmup, process=self.process))
        self.pending.clear()
        self.done.set()


class LoadWorker(abc.ABC):
    """One load worker as the coordinator sees it: a local process here, a Ray actor in ``driver.ray_pool``.

    Subclasses deliver messages (``send``) and feed what comes back to ``dispatch``; ``ended`` says the
    worker is gone. ``offset_ns`` is the worker's monotonic clock less the coordinator's (0 on this
    machine, whose processes share one clock), ``rtt_ns`` the round trip it was estimated with.
    """

    def __init__(self, number: int, pid: int, node: str | None = None) -> None:
        self.number = number
        self.pid = pid
        self.node = node
        self.ready: asyncio.Future[Ready] = asyncio.get_running_loop().create_future()
        self.part: _Part | None = None
        self.t0_ns = 0
        self.alive = True
        self.offset_ns = 0
        self.rtt_ns: int | None = None

    @abc.abstractmethod
    def send(self, message: ToWorker) -> None:
        """Deliver one message to the worker (a pipe here, an actor call on Ray)."""

    async def sync_clock(self) -> None:
        """Estimate ``offset_ns`` before a level (nothing to do on one machine)."""
        return

    @abc.abstractmethod
    async def stop(self) -> None:
        """End the worker and release what it holds."""

    def describe(self) -> str:
        return f"load worker {self.number} (pid {self.pid}" + (f" on {self.node})" if self.node else ")")

    def dispatch(self, message: FromWorker) -> None:
        if isinstance(message, Ready):
            if not self.ready.done():
                self.ready.set_result(message)
        elif self.part is None:
            return
        elif isinstance(message, Batch):
            self.part.take(message)
        else:
            self.part.outcome = message
            self.part.done.set()

    def ended(self, why: str) -> None:
        self.alive = False
        if not self.ready.done():
            self.ready.set_exception(RuntimeError(f"{self.describe()} {why} before it was ready"))
        if self.part is not None and not self.part.done.is_set():
            self.part.lost(self, why, time.monotonic_ns() - self.t0_ns)


class _Process(LoadWorker):
    """A load process on this machine, spoken to over its stdin and stdout."""

    def __init__(self, number: int, proc: asyncio.subprocess.Process) -> None:
        super().__init__(number, proc.pid)
        self.proc = proc
        self.reader: asyncio.Task[None] | None = None

    def send(self, message: ToWorker) -> None:
        stdin = self.proc.stdin
        if self.alive and stdin is not None and not stdin.is_closing():
            stdin.write(frame(message))

    async def read(self) -> None:
        assert self.proc.stdout is not None
        while (payload := await read_frame(self.proc.stdout)) is not None:
            self.dispatch(from_worker.decode(payload))
        self.alive = False
        self.ended(_exit_reason(await self.proc.wait()))

    async def stop(self) -> None:
        self.send(Shutdown())
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            async with asyncio.timeout(STOP_GRACE_S + 2.0):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)


class Launcher(Protocol):
    """Where load workers come from: processes on this machine, or actors on a Ray cluster."""

    local: bool   # every worker runs on this machine (its connections are this host's)

    async def open(self) -> int:
        """Get ready; returns how many workers the pool gets."""
        ...

    async def spawn(self, number: int, setup: Setup) -> LoadWorker: ...

    async def close(self) -> None: ...


class LocalLauncher:
    """``size`` processes on this machine (``--workers``)."""

    local = True

    def __init__(self, size: int) -> None:
        self.size = size

    async def open(self) -> int:
        return self.size

    async def spawn(self, number: int, setup: Setup) -> LoadWorker:
        # The processes import this very package, wherever it was imported from.
        root = str(Path(__file__).resolve().parents[2])   # the directory holding the package
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "plateau_bench.driver.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, env=env, start_new_session=True, limit=1 << 26)
        process = _Process(number, proc)
        process.reader = asyncio.create_task(process.read())
        process.send(setup)
        return process

    async def close(self) -> None:
        pass


@dataclass
class PoolOutcome:
    """What the processes reported about a level besides its records."""

    health: list[HealthSample]
    cancelled: int
    processes: int
    lost: int
    notes: list[str]
    clocks: list[WorkerClock] = field(default_factory=list)
    cancelled_at_end: int = 0   # in flight when the precision rule ended the level (one process only)
    hung_at_bound: int = 0      # silent at --max-level-time, declared hung then
    prompts: PromptUse | None = None   # the processes' prompt counts, folded together


class PoolLevel:
    """A level running on the pool: in-flight figures for the live view and the precision rule."""

    def __init__(self, parts: list[tuple[LoadWorker, _Part]], t0_ns: int) -> None:
        self.parts = parts
        self.t0_ns = t0_ns

    def in_flight(self) -> int:
        return sum(len(part.pending) for _, part in self.parts)

    def complete_until_ns(self) -> int:
        """Every request sent before this time (level-relative) has finished."""
        now = time.monotonic_ns() - self.t0_ns
        return min((n.sent_ns for _, part in self.parts for n in part.pending.values()), default=now)

    def _send_all(self, message: ToWorker) -> None:
        for process, part in self.parts:
            if not part.done.is_set():
                process.send(message)

    async def _forward(self, event: asyncio.Event, message: ToWorker) -> None:
        await event.wait()
        self._send_all(message)

    async def wait(self, *, abort: asyncio.Event, finish: asyncio.Event) -> PoolOutcome:
        """Until every part is over (finished, broken or its process dead); Ctrl-C aborts them all."""
        forwards = [asyncio.create_task(self._forward(finish, Finish())),
                    asyncio.create_task(self._forward(abort, Abort()))]
        waits = [part.done.wait() for _, part in self.parts]
        try:
            await asyncio.gather(*waits)
        except asyncio.CancelledError:
            self._send_all(Abort())
            try:
                async with asyncio.timeout(STOP_GRACE_S):
                    await asyncio.gather(*(part.done.wait() for _, part in self.parts))
            except TimeoutError:
                pass
            raise
        finally:
            for task in forwards:
                task.cancel()
        return self._outcome()

    def _outcome(self) -> PoolOutcome:
        health: list[HealthSample] = []
        notes, cancelled, lost, hung_at_bound = [], 0, 0, 0
        prompts: PromptUse | None = None
        clocks = [WorkerClock(worker=w.number, node=w.node, offset_ns=w.offset_ns, rtt_ns=w.rtt_ns)
                  for w, _ in self.parts if w.rtt_ns is not None]
        for process, part in self.parts:
            process.part = None
            if part.failure is not None:
                raise part.failure
            if part.died is not None:
                notes.append(part.died)
                lost += 1
            if part.outcome is not None:
                health.extend(part.outcome.health)
                cancelled += part.outcome.cancelled
                hung_at_bound += part.outcome.hung_at_bound
                if part.outcome.prompts is not None:
                    prompts = prompts or PromptUse()
                    prompts.add(part.outcome.prompts)
                if part.outcome.error is not None:
                    raise RuntimeError(f"load worker {process.number} failed: {part.outcome.error}")
        return PoolOutcome(health=health, cancelled=cancelled, processes=len(self.parts), lost=lost, notes=notes,
                           clocks=clocks, prompts=prompts, hung_at_bound=hung_at_bound)


class WorkerPool:
    """Load workers for a whole sweep. Use as ``async with WorkerPool(...) as pool``.

    ``size`` processes on this machine, or, with ``launcher``, whatever it provides (``driver.ray_pool``).
    """

    def __init__(self, size: int = 1, *, auto: bool, target: TargetSpec, prompts: Sequence[Prompt] | PromptSource,
                 tokenizer: str | None = None, seed: int = 0, launcher: Launcher | None = None) -> None:
        self.size = size
        self.auto = auto
        self.launcher: Launcher = launcher or LocalLauncher(size)
        source = prompts if isinstance(prompts, PromptSource) else PromptSource.given(list(prompts))
        self.setup = (target, source.recipe, tokenizer)
        self.seed = seed
        self.processes: list[LoadWorker] = []

    def processes_for(self, level: LevelSpec) -> int:
        """How many workers share ``level`` (``auto``: from its streams; the parts never exceed its load)."""
        return auto_workers(level, self.size) if self.auto else self.size

    async def __aenter__(self) -> WorkerPool:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    def _setup(self, number: int) -> Setup:
        target, prompts, tokenizer = self.setup
        return Setup(worker=number, target=target, prompts=prompts, tokenizer=tokenizer)

    async def start(self) -> None:
        self.size = await self.launcher.open()
        self.processes = [await self.launcher.spawn(i, self._setup(i)) for i in range(self.size)]
        async with asyncio.timeout(START_TIMEOUT_S):
            await asyncio.gather(*(p.ready for p in self.processes))

    async def _replace_dead(self) -> None:
        for i, worker in enumerate(self.processes):
            if not worker.alive:
                await worker.stop()
                self.processes[i] = await self.launcher.spawn(i, self._setup(i))
                async with asyncio.timeout(START_TIMEOUT_S):
                    await self.processes[i].ready

    async def begin(self, level: LevelSpec, *, t0_ns: int, on_record: OnRecord, prompts: LevelKey | None = None,
                    ahead: int = CHUNK) -> PoolLevel:
        """Send each worker its part of ``level`` (taking the ``prompts`` of that key); then
        ``await PoolLevel.wait(...)``."""
        await self._replace_dead()
        parts = split_level(level, self.processes_for(level), self.seed)
        used = self.processes[: len(parts)]
        await asyncio.gather(*(w.sync_clock() for w in used))
        running = []
        for worker, part in zip(used, parts, strict=True):
            state = _Part(on_record, process=worker.number)
            worker.part, worker.t0_ns = state, t0_ns
            # The level's origin on the worker's own clock: its times are differences of its own readings.
            worker.send(RunLevel(part=part, t0_ns=t0_ns + worker.offset_ns, seed=self.seed, prompts=prompts,
                                 ahead=ahead))
            running.append((worker, state))
        return PoolLevel(running, t0_ns)

    async def close(self) -> None:
        """Ask every worker to leave; kill those that have not after a few seconds."""
        await asyncio.gather(*(w.stop() for w in self.processes), return_exceptions=True)
        self.processes = []
        await self.launcher.close()
