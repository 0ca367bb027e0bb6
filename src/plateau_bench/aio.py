"""The one choice of event loop: uvloop where it is installed, the standard loop otherwise.

uvloop makes every chunk read cheaper on the load generator's hot path and lets the simulated
server keep up with thousands of streams; it is a dependency except on Windows.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


_main_task: asyncio.Task[Any] | None = None   # the task ``run`` runs (SIGTERM's safety net looks at it)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the chosen loop."""

    async def noted() -> T:
        global _main_task
        _main_task = asyncio.current_task()
        return await main

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.get_loop().set_exception_handler(_quiet_about_the_interrupt)
        return runner.run(noted())


def _quiet_about_the_interrupt(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's report of an error nobody awaited, except the interrupt SIGTERM raised inside a transport's
    callback: the loop calls that a fatal transport error and would print it with a traceback, while the run
    is already ending with its one line (``_interrupt_if_still_running`` makes sure it does)."""
    if _terminated and isinstance(context.get("exception"), KeyboardInterrupt):
        return
    loop.default_exception_handler(context)


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
    """SIGTERM ends a run at once, like a second Ctrl-C: finished levels saved, children stopped, the resume
    hint printed; ``terminated()`` tells it from a Ctrl-C.

    It raises ``KeyboardInterrupt`` itself, wherever the main thread is. Relayed as SIGINT, it was lost
    twice: where SIGINT is ignored (a background job of a script: the shell ignores it there so that the
    terminal's Ctrl-C does not reach the job), and inside a computation that never yields to the event loop
    (``plan``, ``sim``), where asyncio only cancels the main task at its next await.
    """

    def stop(signum: int, frame: object) -> None:
        global _terminated
        _terminated = True
        loop = asyncio._get_running_loop()
        if loop is not None:
            # A safety net: raised inside a transport's callback, the interrupt below is reported by the event
            # loop as a fatal transport error and the run carries on; from a plain callback it always ends it.
            loop.call_soon_threadsafe(_interrupt_if_still_running)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _interrupt_if_still_running() -> None:
    """Raise the interrupt unless it already reached the main task (done, or being cancelled by the runner)."""
    task = _main_task
    if task is not None and not task.done() and not task.cancelling():
        raise KeyboardInterrupt


def terminated() -> bool:
    """Whether the interrupt being handled came from SIGTERM."""
    return _terminated


def interrupted_by() -> str:
    """What interrupted the run, for its last line."""
    return "stopped by SIGTERM" if _terminated else "interrupted (Ctrl-C)"


def interrupted_exit_code() -> int:
    """The conventional exit status of the interrupt being handled: 128 + the signal number."""
    return 128 + (signal.SIGTERM if _terminated else signal.SIGINT)


# What ends the running level early (its ``finish``), registered by the level runner while a level runs.
_level_finishers: list[Callable[[], None]] = []
_stop_asked = False


@contextmanager
def level_finisher(finish: Callable[[], None]) -> Iterator[None]:
    """While the body runs, ``finish`` is what a first Ctrl-C calls under ``first_interrupt_finishes``."""
    _level_finishers.append(finish)
    try:
        yield
    finally:
        _level_finishers.remove(finish)


def stop_asked() -> bool:
    """Whether a first Ctrl-C asked to stop once the running level has ended (no level starts after it)."""
    return _stop_asked


@dataclass
class Interrupts:
    """What the handler of ``first_interrupt_finishes`` saw."""

    finished_early: bool = False   # a first Ctrl-C ended the running level early
    stopped: bool = False          # a second Ctrl-C stopped everything at once


@contextmanager
def first_interrupt_finishes(announce: Callable[[str], None]) -> Iterator[Interrupts]:
    """A first Ctrl-C ends the running level at once (nothing new sent, the requests in flight cancelled,
    not measured), so it keeps the figures of what finished, and no level starts after it (``stop_asked``); a second
    one cancels the calling task, which then raises ``KeyboardInterrupt`` as a plain Ctrl-C would (SIGTERM
    raises it at once: ``treat_sigterm_as_interrupt``). Call from inside the main task."""
    global _stop_asked
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    seen = Interrupts()

    def on_sigint() -> None:
        global _stop_asked
        if not seen.finished_early and _level_finishers:
            seen.finished_early = _stop_asked = True
            for finish in list(_level_finishers):
                finish()
            announce("plateau: ending the level now (the requests in flight are cancelled, what finished is kept); "
                     "Ctrl-C again to stop at once")
            return
        seen.stopped = True
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    except (NotImplementedError, RuntimeError, ValueError):   # Windows; not the main thread
        yield seen
        return
    try:
        yield seen
    except asyncio.CancelledError:
        if seen.stopped:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        _stop_asked = False
