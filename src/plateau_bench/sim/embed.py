"""Run the twin's HTTP server for other commands: ``start_sim_server(...) -> SimServerHandle``.

By default the server runs in a **child process**: its event loop then has a core of its own
instead of sharing the load generator's interpreter lock, so the client's timings and its
event-loop lag measure the client, not the twin. ``in_process=True`` runs it on a background
thread with its own event loop (no start-up cost; tests use it to look at the engine).

The child is ``python -m plateau_bench.sim.child`` with the configuration and options as JSON;
it prints ``READY <port>`` once it listens (or ``ERROR <message>``) and stops cleanly on SIGTERM
or SIGINT; it runs in a session of its own, so a terminal's Ctrl-C reaches this process alone, which
stops it. It is never left behind: its stdin is a pipe from this process, which the kernel
closes when this process ends however it ends, and the child stops at end of file (and when its
parent process id changes, in case another process inherited the pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

import msgspec

from plateau_bench.aio import new_event_loop, old_objects_frozen
from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.faults import FaultSpec
from plateau_bench.sim.server import LISTEN_BACKLOG, MAX_BACKLOG, SimServer, raise_open_files
from plateau_bench.sim.tokens import TwinTokenizer

READY_TIMEOUT_S = 30.0


class ServeOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the server serves the engine (everything but the engine and the address)."""

    speed: float = 1.0
    metrics: bool = True
    reject_when_waiting: int | None = None
    reject_status: int = 429
    faults: FaultSpec | None = None
    faults_seed: int = 0
    backlog: int = LISTEN_BACKLOG
    tokenizer: str | None = None   # a Hugging Face tokenizer to count prompts with (default: words)

    def validate(self) -> None:
        if self.speed <= 0:
            raise ConfigError(f"--speed must be > 0 (got {self.speed})")
        if not 1 <= self.backlog <= MAX_BACKLOG:
            raise ConfigError(f"--backlog must be between 1 and {MAX_BACKLOG:,} (got {self.backlog})")
        if self.faults is not None:
            self.faults.validate()
        if self.tokenizer is not None:
            TwinTokenizer(self.tokenizer)   # loads it: a file that is not a tokenizer fails here, in one line

    def server(self, config: EngineConfig) -> SimServer:
        return SimServer(config, speed=self.speed, metrics=self.metrics,
                         reject_when_waiting=self.reject_when_waiting, reject_status=self.reject_status,
                         faults=self.faults, faults_seed=self.faults_seed, backlog=self.backlog,
                         tokenizer=TwinTokenizer(self.tokenizer))


def _bind_error(exc: OSError, host: str, port: int) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"port {port} on {host} is already in use (choose another with --port)")
    return ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


class SimServerHandle:
    """A running twin server: ``.url``, ``.port``, ``.pid`` (None in-process), ``.stop()``;
    also a context manager."""

    def __init__(self, host: str, port: int, stopper: _Stopper, pid: int | None = None) -> None:
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}"
        self.pid = pid
        self._stopper = stopper

    def stop(self) -> None:
        self._stopper.stop()

    def __enter__(self) -> SimServerHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class _Stopper(Protocol):
    def stop(self) -> None: ...


class _ThreadStopper(_Stopper):
    def __init__(self, loop: asyncio.AbstractEventLoop, server: SimServer, thread: threading.Thread) -> None:
        self.loop, self.server, self.thread = loop, server, thread
        self.stopped = False

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


class _ProcessStopper(_Stopper):
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def start_sim_server(config: EngineConfig, *, host: str = "127.0.0.1", port: int = 0, speed: float = 1.0,
                     metrics: bool = True, reject_when_waiting: int | None = None,
                     reject_status: int = 429, in_process: bool = False, faults: FaultSpec | None = None,
                     faults_seed: int = 0, tokenizer: str | None = None) -> SimServerHandle:
    """Start the twin's HTTP server in the background; ``port=0`` picks a free port.

    ``faults`` makes some requests fail on purpose (see ``plateau_bench.sim.faults``).
    """
    config.validate()
    options = ServeOptions(speed=speed, metrics=metrics, reject_when_waiting=reject_when_waiting,
                           reject_status=reject_status, faults=faults, faults_seed=faults_seed, tokenizer=tokenizer)
    options.validate()
    if in_process:
        return _start_thread(config, options, host, port)
    args = [sys.executable, "-m", "plateau_bench.sim.child", "--config", msgspec.json.encode(config).decode(),
            "--options", msgspec.json.encode(options).decode(), "--host", host, "--port", str(port),
            "--watch-parent", str(os.getpid())]
    # stdin stays open and unused: its end of file tells the child that this process is gone. Its own
    # session keeps a terminal's Ctrl-C (sent to the whole foreground group) from stopping the twin
    # under a level that the first Ctrl-C only asks to finish: this process stops it.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.PIPE, start_new_session=True)
    line = _read_line(proc, READY_TIMEOUT_S)
    if line.startswith("READY "):
        return SimServerHandle(host, int(line.split()[1]), _ProcessStopper(proc), pid=proc.pid)
    _ProcessStopper(proc).stop()
    if line.startswith("ERROR "):
        raise ConfigError(line[len("ERROR "):])
    raise ConfigError("the simulated server did not start (no READY line from its process)")


def _read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    result: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        result.append(proc.stdout.readline().decode(errors="replace").strip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return result[0] if result else ""


def _start_thread(config: EngineConfig, options: ServeOptions, host: str, port: int) -> SimServerHandle:
    loop = new_event_loop()
    holder: dict[str, object] = {}

    async def boot() -> int:
        server = options.server(config)
        holder["server"] = server
        return await server.start(host, port)

    thread = threading.Thread(target=loop.run_forever, name="plateau-sim-server", daemon=True)
    thread.start()
    ready = asyncio.run_coroutine_threadsafe(boot(), loop)
    try:
        bound = ready.result(timeout=READY_TIMEOUT_S)
    except OSError as exc:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        raise _bind_error(exc, host, port) from None
    server = holder["server"]
    assert isinstance(server, SimServer)
    return SimServerHandle(host, bound, _ThreadStopper(loop, server, thread))


async def serve_forever(config: EngineConfig, options: ServeOptions, *, host: str, port: int,
                        on_ready: Callable[[int], None] | None = None,
                        stop: asyncio.Event | None = None) -> None:
    """Serve in the foreground until SIGINT/SIGTERM or ``stop`` is set (``plateau serve-sim`` and the
    child process). Open streams are aborted at once, so it ends within a second either way."""
    options.validate()
    server = options.server(config)
    try:
        bound = await server.start(host, port)
    except OSError as exc:
        raise _bind_error(exc, host, port) from None
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):   # Windows: Ctrl-C raises KeyboardInterrupt
            loop.add_signal_handler(sig, stop.set)
    for note in (server.backlog_note, raise_open_files(options.backlog)):
        if note is not None:
            print(f"plateau serve-sim: {note}", file=sys.stderr, flush=True)
    if on_ready is not None:
        on_ready(bound)
    try:
        with old_objects_frozen():   # the server's own streams would stall on a full collection too
            await stop.wait()
    finally:
        await server.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, ValueError):
                loop.remove_signal_handler(sig)
