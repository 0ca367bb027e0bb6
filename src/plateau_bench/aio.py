"""The one choice of event loop: uvloop where it is installed, the standard loop otherwise.

uvloop makes every chunk read cheaper on the load generator's hot path and lets the simulated
server keep up with thousands of streams; it is a dependency except on Windows.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


def loop_name() -> str:
    """``"uvloop"`` when new loops are uvloop loops, else ``"asyncio"``."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return "asyncio"
    return "uvloop"


def install_policy() -> str:
    """Make every new event loop of the chosen kind (for code that calls ``asyncio.run`` itself)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A fresh event loop of the chosen kind (for a thread or a child process)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


@contextmanager
def old_objects_frozen() -> Iterator[None]:
    """Keep the objects that exist now out of the garbage collector's full passes while the body runs.

    A full collection scans every tracked object, and the imports alone (the CLI, aiohttp, numpy) make
    hundreds of thousands: one pass stalled the event loop for ~70 ms, sending a trace's requests that
    late. Frozen, they are skipped (``gc.freeze``, a constant-time move); the body's own objects are
    still collected, and on exit the frozen ones go back to the oldest generation.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


_terminated = False


def treat_sigterm_as_interrupt() -> None:
    """SIGTERM ends a run like Ctrl-C: finished levels saved, children stopped, the resume hint printed.

    The signal is relayed as SIGINT, which ``asyncio.Runner`` turns into a cancellation of the main
    task (so every ``finally`` runs), then into ``KeyboardInterrupt``; ``terminated()`` tells the two apart.
    """

    def relay(signum: int, frame: object) -> None:
        global _terminated
        _terminated = True
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, relay)


def terminated() -> bool:
    """Whether the interrupt being handled came from SIGTERM."""
    return _terminated


def interrupted_by() -> str:
    """What interrupted the run, for its last line."""
    return "stopped by SIGTERM" if _terminated else "interrupted (Ctrl-C)"


def interrupted_exit_code() -> int:
    """The conventional exit status of the interrupt being handled: 128 + the signal number."""
    return 128 + (signal.SIGTERM if _terminated else signal.SIGINT)
