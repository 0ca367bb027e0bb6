"""The one choice of event loop: uvloop where it is installed, the standard loop otherwise.

uvloop makes every chunk read cheaper on the load generator's hot path and lets the simulated
server keep up with thousands of streams; it is a dependency except on Windows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
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
