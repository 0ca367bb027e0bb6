"""Load workers as Ray actors across a cluster's nodes (``--ray auto|ADDRESS``, ``--workers-per-node N``).

The same pool as ``--workers`` (``driver.pool``), with actors instead of local processes: ``N`` actors
pinned to every alive node of the cluster (node affinity), each running the same part of a level as a
local process (``driver.worker.run_part``: the load loop, the streaming client, the health sampler) on
the actor's event loop, and streaming the same messages back (``driver.wire``, one message per item of a
Ray streaming generator). ``auto`` connects to the cluster this machine belongs to (``ray start`` ran
here), an address to that cluster's head. Ray is optional: ``pip install 'plateau-bench[ray]'``, on the
coordinating machine and on every node, with the same plateau-bench version.

Clocks: nodes do not share a monotonic clock. Before each level the coordinator asks every actor for
its clock five times and keeps the exchange of least delay (Cristian's algorithm): the offset is the
actor's reading less the midpoint of the coordinator's send and receipt, good to half that round trip.
The actor is given the level's origin on its own clock, so every time it stamps is a difference of its
own readings and no latency ever mixes two clocks; the offset only places its records on the level's
timeline (the steady window, the telemetry). Each level keeps the offsets it used (``worker_clocks``).

An actor that dies mid-level (its node lost, the actor killed) is reported and its requests in flight are
counted as hung, as with a local process; a fresh actor takes its place for the next level.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from plateau_bench.aio import loop_name
from plateau_bench.driver.pool import LoadWorker
from plateau_bench.driver.wire import (
    Abort,
    Finish,
    Ready,
    RunLevel,
    Setup,
    ToWorker,
    encode,
    from_worker,
    to_worker,
)
from plateau_bench.driver.worker import Outbox, outcome_of, run_part
from plateau_bench.errors import ConfigError

CLOCK_EXCHANGES = 5
REACH_TIMEOUT_S = 5.0   # Ray itself retries an unreachable head for minutes before it gives up
RAY_MISSING = "--ray needs Ray, an optional dependency: pip install 'plateau-bench[ray]'"


def check_reachable(address: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Refuse in one line a ``host:port`` (or ``ray://host:port``) where nothing answers; ``auto`` passes."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray {address!r}: give auto or the head's address as host:port (or ray://host:port)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConfigError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
                          "ray start --head, or give its head's address") from None


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


class LoadActor:
    """The actor's body: one load worker on a node (made a Ray actor class by ``RayLauncher``)."""

    def __init__(self, setup: bytes) -> None:
        decoded = to_worker.decode(setup)
        assert isinstance(decoded, Setup)
        self.setup = decoded
        self.finish, self.abort = asyncio.Event(), asyncio.Event()

    async def hello(self) -> bytes:
        return encode(Ready(pid=os.getpid(), loop=loop_name()))

    async def clock(self) -> int:
        return time.monotonic_ns()

    async def control(self, payload: bytes) -> None:
        message = to_worker.decode(payload)
        if isinstance(message, Finish):
            self.finish.set()
        elif isinstance(message, Abort):
            self.abort.set()

    async def run(self, payload: bytes) -> AsyncIterator[bytes]:
        """One level's part: its messages as they come, the ``LevelDone`` last."""
        order = to_worker.decode(payload)
        assert isinstance(order, RunLevel)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.finish, self.abort = asyncio.Event(), asyncio.Event()
        # Batches go out as Ray items, unframed: the generator keeps message boundaries.
        outbox = Outbox(lambda framed: queue.put_nowait(framed[4:]))
        task = asyncio.create_task(run_part(self.setup, order, outbox, self.finish, self.abort))
        try:
            while not (task.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
        finally:
            if not task.done():
                self.abort.set()
                await asyncio.wait({task})
        yield encode(outcome_of(task))


class _RayWorker(LoadWorker):
    def __init__(self, number: int, actor: Any, node: str, ray: Any) -> None:
        super().__init__(number, pid=0, node=node)
        self.actor = actor
        self.ray = ray
        self.stream: asyncio.Task[None] | None = None

    async def greet(self) -> None:
        try:
            ready = from_worker.decode(await self.actor.hello.remote())
        except self.ray.exceptions.RayError as exc:
            self.ended(f"could not start: {type(exc).__name__}")
            return
        assert isinstance(ready, Ready)
        self.pid = ready.pid
        self.dispatch(ready)

    def send(self, message: ToWorker) -> None:
        if not self.alive:
            return
        if isinstance(message, RunLevel):
            self.stream = asyncio.create_task(self._run(encode(message)))
        elif isinstance(message, Finish | Abort):
            self.actor.control.remote(encode(message))

    async def _run(self, payload: bytes) -> None:
        try:
            async for ref in self.actor.run.remote(payload):
                self.dispatch(from_worker.decode(await ref))
        except self.ray.exceptions.RayError as exc:
            self.ended(f"{type(exc).__name__}: the actor or its node is gone")

    async def sync_clock(self) -> None:
        best: tuple[int, int] | None = None
        for _ in range(CLOCK_EXCHANGES):
            sent = time.monotonic_ns()
            theirs = await self.actor.clock.remote()
            back = time.monotonic_ns()
            if best is None or back - sent < best[0]:
                best = (back - sent, theirs - (sent + back) // 2)
        assert best is not None
        self.rtt_ns, self.offset_ns = best

    async def stop(self) -> None:
        if self.stream is not None and not self.stream.done():
            self.stream.cancel()
            await asyncio.gather(self.stream, return_exceptions=True)
        self.ray.kill(self.actor)


class RayLauncher:
    """``per_node`` actors on every alive node of the cluster at ``address`` (``auto``: this machine's)."""

    local = False

    def __init__(self, address: str, per_node: int = 1) -> None:
        self.address = address
        self.per_node = per_node
        self.ray = _ray()
        self.nodes: list[tuple[str, str]] = []
        self._actor_class: Any = None

    async def open(self) -> int:
        ray = self.ray
        await asyncio.to_thread(check_reachable, self.address)
        root = str(Path(__file__).resolve().parents[2])   # the directory holding the package
        path = os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))
        # Ray's core installs its own SIGTERM handler, which aborts the process: the one a run relies on to
        # stop cleanly (aio.treat_sigterm_as_interrupt) and Ctrl-C's are put back.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="error",
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"--ray {self.address}: cannot connect to a Ray cluster ({exc})") from None
        finally:
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        self.nodes = [(n["NodeID"], f"{n.get('NodeManagerAddress', '?')} node {n['NodeID'][:8]}") for n in alive]
        self._actor_class = ray.remote(num_cpus=0, max_restarts=0)(LoadActor)
        return len(self.nodes) * self.per_node

    async def spawn(self, number: int, setup: Setup) -> LoadWorker:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node_id, name = self.nodes[number // self.per_node]
        actor = self._actor_class.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)).remote(encode(setup))
        worker = _RayWorker(number, actor, name, self.ray)
        await worker.greet()
        return worker

    async def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()
