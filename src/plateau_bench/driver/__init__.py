"""The driver: streams requests to the target and stamps monotonic times on every chunk.

Public API:

* ``StreamingClient`` - one pooled HTTP session; ``send`` streams a request into a ``RequestRecord``.
* ``discover``, ``wait_ready``, ``tokenize_remote``, ``TargetInfo`` - the target before the load.
* ``SSEParser``, ``StreamAccumulator`` - event-stream parsing, usable without a network.
* ``install_event_loop`` / ``run`` - uvloop where it is installed (a cheaper event loop for every
  chunk read), the standard loop otherwise.
"""

from __future__ import annotations

from plateau_bench.aio import install_policy, run
from plateau_bench.driver.client import StreamingClient
from plateau_bench.driver.sse import SSEParser, StreamAccumulator
from plateau_bench.driver.target import TargetInfo, discover, tokenize_remote, wait_ready

__all__ = [
    "SSEParser",
    "StreamAccumulator",
    "StreamingClient",
    "TargetInfo",
    "discover",
    "install_event_loop",
    "run",
    "tokenize_remote",
    "wait_ready",
]


def install_event_loop() -> str:
    """Make new event loops of the chosen kind (``plateau_bench.aio``). Returns the loop's name."""
    return install_policy()
