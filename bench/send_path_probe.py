"""Client-side stamps along a request's way out, for ``client_overhead.py``'s send-path figures.

``install()`` wraps four aiohttp steps (no change to ``StreamingClient``) and ``probed()`` runs a
request with a dict of its own in a context variable, which the wrappers fill with
``time.monotonic_ns()`` stamps (the clock the client and the bench server both read):

* ``tcp_start`` / ``tcp_sock``: around ``aiohappyeyeballs.start_connection`` (socket created and
  connected, the task resumed); absent on a pooled connection;
* ``conn_made``: the loop's ``connection_made`` callback on aiohttp's protocol (transport ready);
* ``headers``: ``StreamWriter.write_headers``, where ``ClientRequest.send`` buffers the head and
  hands the body to a writer task (on Python < 3.12 a plain task, started by the event loop on a
  later turn);
* ``written``: just before the first ``transport.write`` of the request's bytes (head and body
  coalesced), which hands them to the kernel (uvloop writes at once when the socket has room).

The connection time ``RequestRecord.connect_ns`` is the client's own. ``uninstall()`` puts
everything back, so the CPU figures of the bench are measured without the wrappers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import aiohappyeyeballs
from aiohttp import client_proto, http_writer

T = TypeVar("T")

_PROBE: ContextVar[dict[str, int] | None] = ContextVar("send_path_probe", default=None)
_MADE: dict[int, int] = {}  # id(protocol) -> connection_made time
_saved: dict[str, Any] = {}


async def probed(send: Callable[[], Awaitable[T]]) -> tuple[T, dict[str, int]]:
    """Run ``send()`` (one request, in its own task) and return its result with its stamps."""
    stamps: dict[str, int] = {"start": time.monotonic_ns()}   # when the send begins (the stages' origin)
    _PROBE.set(stamps)
    result = await send()
    return result, stamps


def install() -> None:
    if _saved:
        return
    clock = time.monotonic_ns
    start_connection = aiohappyeyeballs.start_connection
    connection_made = client_proto.ResponseHandler.connection_made
    write_headers = http_writer.StreamWriter.write_headers
    write = http_writer.StreamWriter._write
    writelines = http_writer.StreamWriter._writelines
    _saved.update(start_connection=start_connection, connection_made=connection_made,
                  write_headers=write_headers, _write=write, _writelines=writelines)

    async def timed_start_connection(*args: Any, **kwargs: Any) -> Any:
        stamps = _PROBE.get()
        if stamps is not None:
            stamps["tcp_start"] = clock()
        sock = await start_connection(*args, **kwargs)
        if stamps is not None:
            stamps["tcp_sock"] = clock()
        return sock

    def timed_connection_made(self: Any, transport: Any) -> None:
        _MADE[id(self)] = clock()
        connection_made(self, transport)

    async def timed_write_headers(self: Any, *args: Any, **kwargs: Any) -> None:
        stamps = _PROBE.get()
        if stamps is not None:
            stamps["headers"] = clock()
            made = _MADE.get(id(self._protocol))
            if made is not None and "tcp_start" in stamps:
                stamps["conn_made"] = made
        await write_headers(self, *args, **kwargs)

    def note_written(self: Any) -> None:
        stamps = _PROBE.get()
        if stamps is not None and "written" not in stamps:
            stamps["written"] = clock()

    def timed_write(self: Any, chunk: Any) -> None:
        note_written(self)
        write(self, chunk)

    def timed_writelines(self: Any, chunks: Any) -> None:
        note_written(self)
        writelines(self, chunks)

    aiohappyeyeballs.start_connection = timed_start_connection
    client_proto.ResponseHandler.connection_made = timed_connection_made  # type: ignore[method-assign]
    http_writer.StreamWriter.write_headers = timed_write_headers  # type: ignore[method-assign]
    http_writer.StreamWriter._write = timed_write  # type: ignore[method-assign]
    http_writer.StreamWriter._writelines = timed_writelines  # type: ignore[method-assign]


def uninstall() -> None:
    if not _saved:
        return
    aiohappyeyeballs.start_connection = _saved["start_connection"]
    client_proto.ResponseHandler.connection_made = _saved["connection_made"]  # type: ignore[method-assign]
    http_writer.StreamWriter.write_headers = _saved["write_headers"]  # type: ignore[method-assign]
    http_writer.StreamWriter._write = _saved["_write"]  # type: ignore[method-assign]
    http_writer.StreamWriter._writelines = _saved["_writelines"]  # type: ignore[method-assign]
    _saved.clear()
    _MADE.clear()
