"""The streaming OpenAI-compatible client: one request in, one ``RequestRecord`` out.

Each request is a streamed ``POST /v1/completions`` (or ``/v1/chat/completions``) with
``max_tokens`` = the wanted output length, ``ignore_eos: true`` so the server generates exactly
that many tokens, and ``stream_options.include_usage`` so the server reports exact token counts.

Timing (monotonic clock, ns relative to ``t0_ns``, the start of the level):

* ``sent_ns``: when the request's bytes are handed to the kernel (the first socket write of its
  body writer). Stamping it when ``send`` starts instead put the client's own event-loop rounds
  into TTFT: at C=512 a request waited ~90 ms for the loop to connect it and run its writer, against
  0.3 ms alone (``bench/client_overhead.py``, send path). That wait is the load generator's, and is
  kept in the send lag (``sent_ns - scheduled_ns``) where the load-generator check reads it. A
  request that never wrote (no connection) keeps the time ``send`` started. The pool is sized to
  the concurrency (``limit=concurrency``, no lower per-host limit) so no request waits for one.
* each content chunk: the clock read when aiohttp's HTTP parser hands over the piece of body
  that carried it, straight from the socket read and before any SSE or JSON parsing (events in
  one piece share the time; pieces of one socket read are microseconds apart). See
  ``_read_stream`` for how. ``first_token_ns`` is the first chunk carrying content or reasoning
  text (a chat role-only chunk carries none).
* ``end_ns``: the last piece of body that carried bytes.
* ``connect_ns`` (a duration): from the start of ``send`` until the connector handed over a connection,
  pooled or new, so a slow connect (a full listen backlog costs 1 s, 3 s, 7 s... of SYN
  retries) is seen apart from the server's time to first token. It is read by a connector whose
  ``connect`` notes the clock for the request in flight in the current task (a context
  variable), which costs two context-variable operations and one clock read per request;
  aiohttp's ``TraceConfig`` would do the same with a ``Trace`` object and some ten signal sends
  per request.

Requests are started as the caller asks. Letting only a few start per event-loop iteration was
measured and rejected: it stretched a 512-request burst from ~70 ms to ~300 ms and raised the
first-token timing error, because the starts then overlapped more of the streams' reads.

Failures never raise: the record carries an ``ErrorClass`` value, a short detail with every secret
removed, and the HTTP status where there was one. Tokens that arrived before a failure stay on
the record (``output_tokens`` counts what was streamed). A stream is complete when the server
marked its end, ``[DONE]`` or a ``finish_reason`` (some servers omit ``[DONE]``), or when it
delivered all ``max_tokens`` (requests are sent with ``ignore_eos``). A stream that ends any other
way, cleanly or with the connection closed or reset, is ``truncated``; a 200 answer whose body
ended cleanly without a single event is a protocol error (not an event stream). A connection lost
after the stream was complete costs nothing. Cancellation is not a failure: it propagates.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import TracebackType
from typing import Any

import aiohttp
import msgspec
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from plateau_bench._version import __version__
from plateau_bench.driver.sse import StreamAccumulator, TokenCounts
from plateau_bench.driver.target import (
    base_url,
    describe_failure,
    request_headers,
    secrets_of,
)
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.redaction import redact
from plateau_bench.spec import TargetSpec

_DETAIL_MAX = 200
_ERROR_BODY_MAX = 4096
# Idle pooled connections are dropped before common server keep-alive timeouts (uvicorn: 5 s),
# so a request never lands on a connection the server is closing.
_KEEPALIVE_S = 4.0


class _InFlight:
    """One request in flight: its connection time, its answer so far, and how it failed, if it did."""

    __slots__ = ("acc", "asked", "clock", "content_type", "cut", "detail", "error", "prompt_tokens", "ready_ns",
                 "retry_after", "scheduled_ns", "sent_ns", "start_ns", "status", "t0", "warmup", "worker", "written")

    def __init__(self, clock: Callable[[], int], t0: int, scheduled_ns: int, worker: int, warmup: bool,
                 prompt_tokens: int, asked: int) -> None:
        self.asked = asked       # max_tokens
        self.clock = clock
        self.t0 = t0
        self.acc = StreamAccumulator()
        self.scheduled_ns = scheduled_ns
        self.worker = worker
        self.warmup = warmup
        self.prompt_tokens = prompt_tokens
        self.ready_ns: int | None = None
        self.start_ns = 0        # when send began
        self.sent_ns = 0         # when the request's bytes went out (see the module docstring)
        self.written = False
        self.retry_after: float | None = None
        self.status: int | None = None
        self.error: ErrorClass | None = None
        self.detail: str | None = None
        self.content_type = ""
        self.cut: str | None = None  # how the body of a 200 answer was cut off, if it was


_CONNECTING: ContextVar[_InFlight | None] = ContextVar("plateau_connecting", default=None)


class _TimedConnector(aiohttp.TCPConnector):
    """A TCP connector that notes when each request got its connection (see ``connect_ns``)."""

    async def connect(self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout) -> Connection:
        conn = await super().connect(req, traces, timeout)
        slot = _CONNECTING.get()
        if slot is not None:
            slot.ready_ns = slot.clock()
        return conn


class _TimedRequest(ClientRequest):
    """A request that stamps ``sent_ns`` when its body writer first writes (see the module docstring).

    The writer task inherits the request's context, so the context variable names the request. The
    first write wins: a resend on another connection stays inside the request's latency.
    """

    async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
        slot = _CONNECTING.get()
        if slot is not None and not slot.written:
            slot.sent_ns = slot.clock() - slot.t0
            slot.written = True
        await super().write_bytes(*args, **kwargs)


class StreamingClient:
    """Sends streamed completion requests over one pooled aiohttp session.

    Use as ``async with StreamingClient(target, concurrency=C) as client: await client.send(...)``.
    ``t0_ns`` may be reset between levels; record times are relative to it.
    """

    def __init__(
        self,
        target: TargetSpec,
        *,
        concurrency: int,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        t0_ns: int = 0,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.target = target
        self.concurrency = max(1, concurrency)
        self.clock_ns = clock_ns
        self.t0_ns = t0_ns
        self.count_tokens = count_tokens
        self._chat = target.endpoint == "chat"
        self._url = base_url(target) + ("/v1/chat/completions" if self._chat else "/v1/completions")
        self._secrets = secrets_of(target)
        self._session: aiohttp.ClientSession | None = None
        # Set once the server is seen closing connections it announced as kept alive: from then on
        # every request gets a connection of its own (see ``send``).
        self._fresh_session: aiohttp.ClientSession | None = None
        self._in_flight: dict[int, _InFlight] = {}

    def _new_session(self, *, reuse: bool) -> aiohttp.ClientSession:
        connector = (
            _TimedConnector(limit=self.concurrency, limit_per_host=0, keepalive_timeout=_KEEPALIVE_S)
            if reuse
            else _TimedConnector(limit=self.concurrency, limit_per_host=0, force_close=True)
        )
        headers = {"User-Agent": f"plateau-bench/{__version__}"} | request_headers(self.target)
        return aiohttp.ClientSession(
            connector=connector,
            request_class=_TimedRequest,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.target.timeout_s),
        )

    async def __aenter__(self) -> StreamingClient:
        self._session = self._new_session(reuse=True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        for session in (self._session, self._fresh_session):
            if session is not None:
                await session.close()
        self._session = self._fresh_session = None

    def request_body(self, prompt: str, max_tokens: int, messages: list[dict[str, str]] | None = None) -> bytes:
        """The JSON body; ``messages`` (chat) replaces the single user message made of ``prompt``."""
        body: dict[str, Any] = {
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.target.model is not None:
            body["model"] = self.target.model
        if self._chat:
            body["messages"] = messages if messages is not None else [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return msgspec.json.encode(body)

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        """Stream one request and describe it. Never raises for a failed request."""
        body = self.request_body(prompt, max_tokens)
        return (await self._send(index, body, prompt_tokens, max_tokens, scheduled_ns, worker, warmup, None))[0]

    async def send_turn(self, *, index: int, prompt: str, messages: list[dict[str, str]] | None, prompt_tokens: int,
                        max_tokens: int, scheduled_ns: int, worker: int = -1, warmup: bool = False,
                        headers: dict[str, str] | None = None) -> tuple[RequestRecord, str]:
        """One turn of a conversation: its record and the answer's text (the next turn's history).

        ``messages``: the chat history (chat endpoint); ``prompt``: the whole text (completions);
        ``headers``: sent with this request only (the session id)."""
        body = self.request_body(prompt, max_tokens, messages)
        record, acc = await self._send(index, body, prompt_tokens, max_tokens, scheduled_ns, worker, warmup, headers)
        return record, "".join(acc.texts)

    async def _send(self, index: int, body: bytes, prompt_tokens: int, max_tokens: int, scheduled_ns: int, worker: int,
                    warmup: bool, headers: dict[str, str] | None) -> tuple[RequestRecord, StreamAccumulator]:
        session = self._session
        if session is None:
            raise RuntimeError("StreamingClient.send outside 'async with'")
        clock = self.clock_ns
        state = _InFlight(clock, self.t0_ns, scheduled_ns, worker, warmup, prompt_tokens, max_tokens)
        acc = state.acc
        in_flight = self._in_flight
        in_flight[index] = state
        token = _CONNECTING.set(state)
        state.start_ns = state.sent_ns = clock() - state.t0
        try:
            await self._exchange(session, body, state, headers)
        except _StreamStopped:
            pass  # the accumulator holds the reason (error event or malformed stream)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self._failed(state, exc)
        finally:
            _CONNECTING.reset(token)
            if in_flight.get(index) is state:
                del in_flight[index]
        end_ns = acc.last_byte_ns if acc.last_byte_ns is not None else clock() - state.t0
        if state.cut is None and state.error is None and state.status == 200:
            acc.close()  # a clean end: flush a last event without its blank line
        counts = acc.counts(self.count_tokens, max_tokens)
        if state.error is None and state.status == 200:
            state.error, state.detail = _stream_outcome(acc, state.content_type, counts.output_tokens,
                                                         max_tokens, state.cut)
        return self._record(index, state, counts, end_ns, state.error, state.detail, acc.chunk_ns), acc

    async def _exchange(self, session: aiohttp.ClientSession, body: bytes, state: _InFlight,
                        headers: dict[str, str] | None = None) -> None:
        """POST and read the answer into ``state``; aiohttp's exceptions propagate (see ``_failed``)."""
        if self._fresh_session is not None:
            session = self._fresh_session
        acc = state.acc
        for attempt in range(2):
            try:
                async with session.post(self._url, data=body, headers=headers) as resp:
                    status = state.status = resp.status
                    if status != 200:
                        state.retry_after = _seconds(resp.headers.get("Retry-After"))
                        state.error, state.detail = _http_error(status, b"")  # kept if the body is cut off
                        state.error, state.detail = _http_error(status, await resp.content.read(_ERROR_BODY_MAX))
                    else:
                        state.content_type = resp.headers.get("Content-Type", "")
                        await _read_stream(resp.content, acc, state.clock, state.t0)
                return
            except aiohttp.ClientConnectorError:
                raise  # no connection at all (refused, DNS): nothing stale to retry
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # A pooled keep-alive connection the server had already closed (llama.cpp's server
                # closes after each streamed answer while announcing keep-alive): the request never
                # reached it, so it is sent once more on a connection of its own, as browsers do, and
                # so is every later request (another pooled connection may be just as stale). The
                # resend's cost stays inside this request's latency.
                if attempt or state.status is not None or acc.last_byte_ns is not None:
                    raise
                if self._fresh_session is None:
                    self._fresh_session = self._new_session(reuse=False)
                session = self._fresh_session

    def _failed(self, state: _InFlight, exc: BaseException) -> None:
        """Classify an exception from ``_exchange``: before a status line the server never answered
        (connect); a 200 body cut off is judged with the stream (``cut``); otherwise protocol."""
        if isinstance(exc, TimeoutError):
            phase = "before the response" if state.status is None else "while streaming"
            state.error = ErrorClass.TIMEOUT
            state.detail = f"no complete answer within {self.target.timeout_s:g} s (timed out {phase})"
            return
        if isinstance(exc, aiohttp.ClientPayloadError):
            cause = "connection reset" if "reset" in str(exc).lower() else "connection closed"
        elif isinstance(exc, aiohttp.ClientConnectionError):
            cause = describe_failure(exc)
        elif isinstance(exc, aiohttp.ClientError):
            state.error, state.detail = ErrorClass.PROTOCOL, f"{type(exc).__name__}: {exc}"
            return
        else:  # a socket error aiohttp did not wrap
            cause = f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
        if state.status is None:
            state.error, state.detail = ErrorClass.CONNECT, cause
        elif state.status == 200:
            state.cut = cause
        elif state.error is None:
            state.error, state.detail = ErrorClass.PROTOCOL, cause

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None:
        """What request ``index``, still in flight, has streamed so far, as a failed record.

        For the load loop's ``hung`` requests (still in flight after a level's grace period): their
        record keeps the tokens that arrived, like every failed record. ``end_ns`` is now. The
        request itself is left alone (the caller cancels it). None when no request ``index`` is
        in flight.
        """
        state = self._in_flight.get(index)
        if state is None:
            return None
        counts = state.acc.counts(self.count_tokens)
        # a copy: the stream may still grow until the caller's cancel lands
        return self._record(index, state, counts, self.clock_ns() - state.t0, error, detail,
                            list(state.acc.chunk_ns))

    def _record(self, index: int, state: _InFlight, counts: TokenCounts, end_ns: int, error: ErrorClass | None,
                detail: str | None, chunk_ns: list[int]) -> RequestRecord:
        acc = state.acc
        ready_ns = state.ready_ns
        return RequestRecord(
            index=index,
            worker=state.worker,
            scheduled_ns=state.scheduled_ns,
            sent_ns=state.sent_ns,
            end_ns=end_ns,
            first_token_ns=acc.first_token_ns,
            first_reasoning_ns=acc.first_reasoning_ns,
            chunk_ns=chunk_ns,
            chunk_tokens=counts.chunk_tokens,
            prompt_tokens=acc.usage_prompt if acc.usage_prompt is not None else state.prompt_tokens,
            output_tokens=counts.output_tokens,
            token_source=counts.source,
            error=error.value if error is not None else None,
            error_detail=_shorten(redact(detail, self._secrets)) if detail is not None else None,
            http_status=state.status,
            retry_after_s=state.retry_after,
            warmup=state.warmup,
            usage_tokens=counts.usage_tokens,
            connect_ns=ready_ns - state.t0 - state.start_ns if ready_ns is not None else None, asked_tokens=state.asked,
        )


# --- reading the body ------------------------------------------------------------------------------
#
# The body is read from inside aiohttp's protocol callback rather than by a coroutine: the
# response's StreamReader gets a subclass (same layout, so ``__class__`` may be swapped) whose
# ``feed_data`` hands each piece of body to the accumulator with the clock read right then, as the
# HTTP parser delivers it from the socket read. Nothing is buffered and no task wakes per chunk,
# so (1) a chunk's time does not include the wait for its task's turn in the event loop, which
# under hundreds of streams is the dominant error, and (2) the per-chunk CPU cost is a function
# call instead of a future, a task step and a buffer round trip. The coroutine only waits for
# the end of the body (or the exception aiohttp sets on timeout, disconnect, or a bad payload).
# When the reader is not aiohttp's own StreamReader, a plain ``readany`` loop does the same work.

_USE_READ_HOOK = True


class _StreamStopped(Exception):
    """Set on the reader to end a stream early (error event, undecodable event)."""


class _Sink:
    __slots__ = ("acc", "clock", "stopped", "t0")

    def __init__(self, acc: StreamAccumulator, clock: Callable[[], int], t0: int) -> None:
        self.acc = acc
        self.clock = clock
        self.t0 = t0
        self.stopped = False


_READ_SINKS: dict[int, _Sink] = {}


class _TimedStreamReader(aiohttp.StreamReader):
    __slots__ = ()

    def feed_data(self, data: bytes, size: int = 0) -> bool:
        sink = _READ_SINKS.get(id(self))
        if sink is None:
            return bool(aiohttp.StreamReader.feed_data(self, data, size))
        if sink.stopped or not data:
            return False
        t_ns = sink.clock() - sink.t0
        try:
            stop = sink.acc.feed(data, t_ns)
        except Exception as exc:  # never let a parsing bug escape into aiohttp's protocol
            sink.acc.protocol_error = f"cannot read the stream: {type(exc).__name__}: {exc}"
            stop = True
        if stop:
            sink.stopped = True
            self.set_exception(_StreamStopped())
        return False


async def _read_stream(
    content: aiohttp.StreamReader, acc: StreamAccumulator, clock: Callable[[], int], t0: int
) -> None:
    if not _USE_READ_HOOK or type(content) is not aiohttp.StreamReader:
        while data := await content.readany():
            if acc.feed(data, clock() - t0):
                return
        return
    key = id(content)
    _READ_SINKS[key] = _Sink(acc, clock, t0)
    content.__class__ = _TimedStreamReader
    try:
        early = content.read_nowait()  # body bytes that arrived with the headers
        if early:
            content.feed_data(early)
        while data := await content.readany():  # returns b"" at the end; raises on failure
            content.feed_data(data)
    finally:
        del _READ_SINKS[key]


def _stream_outcome(
    acc: StreamAccumulator, content_type: str, output_tokens: int, max_tokens: int, cut: str | None
) -> tuple[ErrorClass | None, str | None]:
    """The class of a 200 answer whose body ended (``cut``: how, when the connection broke)."""
    if acc.error is not None:
        return ErrorClass.SERVER_ERROR_EVENT, acc.error
    if acc.protocol_error is not None:
        return ErrorClass.PROTOCOL, acc.protocol_error
    if acc.complete or output_tokens >= max_tokens:
        return None, None
    if cut is None and acc.events == 0:
        shown_type = content_type or "no content type"
        return ErrorClass.PROTOCOL, f"stream ended without [DONE], usage or tokens (no event; {shown_type})"
    how = cut or "the body ended"
    return ErrorClass.TRUNCATED, (
        f"stream ended after {output_tokens} of {max_tokens} tokens without [DONE] or "
        f"finish_reason ({how})"
    )


def _seconds(value: str | None) -> float | None:
    """A Retry-After given in seconds (an HTTP date, rarer, is left out)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 1e6 else None


def _http_error(status: int, body: bytes) -> tuple[ErrorClass, str]:
    if status == 429:
        kind = ErrorClass.HTTP_429
    elif 400 <= status < 500:
        kind = ErrorClass.HTTP_4XX
    elif status >= 500:
        kind = ErrorClass.HTTP_5XX
    else:  # 1xx/2xx other than 200, 3xx: not a stream we can use
        kind = ErrorClass.PROTOCOL
    message = _error_body_message(body)
    return kind, f"HTTP {status}: {message}" if message else f"HTTP {status}"


def _error_body_message(body: bytes) -> str:
    """The message of an error body: OpenAI ``error.message``, FastAPI ``detail``, or the text."""
    try:
        parsed = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body.decode("utf-8", "replace")
    if isinstance(parsed, dict):
        for key in ("error", "message", "detail"):
            value = parsed.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value
            if value:
                return value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return body.decode("utf-8", "replace")


_SPACES = re.compile(r"\s+")


def _shorten(text: str) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."
