"""Entry point of the twin's server process: ``python -m plateau_bench.sim.child --config JSON ...``.

Prints ``READY <port>`` once listening, or ``ERROR <message>`` and exits 2; stops on SIGTERM or
SIGINT, and with ``--watch-parent PID`` also when that parent is gone (see ``_watch_parent``).
Kept apart from ``embed`` so that running it as ``-m`` does not import it twice.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading

import msgspec

from plateau_bench.aio import new_event_loop
from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import ServeOptions, serve_forever

PARENT_POLL_S = 0.5


def _watch_parent(parent: int, stop: asyncio.Event) -> asyncio.Task[None]:
    """Set ``stop`` when the parent process is gone.

    Two signs, because each misses a case: end of file on stdin (a pipe whose only writer is the
    parent; the kernel closes it when the parent dies, SIGKILL included, on every OS), and a new
    parent pid (POSIX: the orphan is re-parented; this also covers a pipe kept open by a process
    the parent forked). PR_SET_PDEATHSIG is not used: it fires when the parent *thread* that
    started the child exits, and callers start the twin from worker threads.
    """
    loop = asyncio.get_running_loop()

    def read_to_eof() -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside the buffered reader holds its lock,
        # and the interpreter's exit would then abort on it.
        with contextlib.suppress(OSError, ValueError):
            fd = sys.stdin.fileno()
            while os.read(fd, 65536):
                pass
        with contextlib.suppress(RuntimeError):   # the loop may be closed already
            loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=read_to_eof, name="plateau-sim-parent-watch", daemon=True).start()

    async def poll() -> None:
        while not stop.is_set():
            if os.getppid() != parent:
                stop.set()
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PARENT_POLL_S)

    return loop.create_task(poll())


async def _serve(config: EngineConfig, options: ServeOptions, ns: argparse.Namespace) -> None:
    stop = asyncio.Event()
    watcher = _watch_parent(ns.watch_parent, stop) if ns.watch_parent is not None else None
    try:
        await serve_forever(config, options, host=ns.host, port=ns.port, stop=stop,
                            on_ready=lambda port: print(f"READY {port}", flush=True))
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


def _child_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="plateau_bench.sim.child")
    parser.add_argument("--config", required=True)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--watch-parent", type=int, default=None, metavar="PID")
    ns = parser.parse_args(argv)
    config = msgspec.json.decode(ns.config.encode(), type=EngineConfig)
    options = msgspec.json.decode(ns.options.encode(), type=ServeOptions)
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(config, options, ns))
    except ConfigError as exc:
        print(f"ERROR {exc}", flush=True)
        os._exit(2)
    finally:
        loop.close()


if __name__ == "__main__":
    _child_main()
