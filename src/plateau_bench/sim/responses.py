"""How the twin answers one generation request: SSE streaming, whole bodies, injected faults.

A ``Stream`` links a request's HTTP handler to its engine request: the server's clock sets
``event`` when the engine produced tokens for it or finished it, and sets ``aborted`` when the
server stops (the handler then drops the connection at once instead of waiting for tokens that
will never come). Stream faults (see ``faults``) strike once the request has produced ``at``
tokens: what is ready up to there is sent, then the fault acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

import msgspec
from aiohttp import web

from plateau_bench.sim.engine import Engine, SimRequest
from plateau_bench.sim.faults import Fault
from plateau_bench.sim.replicas import ReplicaSet
from plateau_bench.sim.tokens import output_text

_encode = msgspec.json.encode
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# What the ``malformed`` fault sends: an event whose data stops in the middle of a JSON object.
MALFORMED_EVENT = b'data: {"id":"cmpl-malformed","object":"text_completion","choices":[{"index":0,"text":\n\n'
_DISCONNECT_POLL_S = 0.25


class Stream:
    __slots__ = ("aborted", "done", "emitted", "event", "req")

    def __init__(self, req: SimRequest) -> None:
        self.req = req
        self.emitted = 0
        self.done = False
        self.aborted = False
        self.event = asyncio.Event()


class Framing:
    """The bytes of one request's SSE events, built once so that each chunk only joins them."""

    def __init__(self, req: SimRequest, model_name: str, created: int, *, chat: bool) -> None:
        self.req, self.model_name, self.created, self.chat = req, model_name, created, chat
        model = _encode(model_name).decode()
        self.role: bytes | None = None
        if chat:
            self.head = (f'data: {{"id":"chatcmpl-{req.rid}","object":"chat.completion.chunk",'
                         f'"created":{created},"model":{model},"choices":[{{"index":0,').encode()
            self.role = self.head + b'"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]}\n\n'
            self.text_open, self.text_close = b'"delta":{"content":', b'},"logprobs":null,"finish_reason":'
            self.tail = b"}]}\n\n"
        else:
            self.head = (f'data: {{"id":"cmpl-{req.rid}","object":"text_completion","created":{created},'
                         f'"model":{model},"choices":[{{"index":0,').encode()
            self.text_open, self.text_close = b'"text":', b',"logprobs":null,"finish_reason":'
            self.tail = b',"stop_reason":null}],"usage":null}\n\n'

    def content(self, start: int, end: int, *, last: bool) -> bytes:
        text = output_text(self.req.rid, start, end)
        return (self.head + self.text_open + _encode(text) + self.text_close
                + (b'"length"' if last else b"null") + self.tail)

    def usage(self) -> bytes:
        req = self.req
        chunk: dict[str, Any] = {
            "id": f"{'chatcmpl' if self.chat else 'cmpl'}-{req.rid}",
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created, "model": self.model_name, "choices": [],
            "usage": {"prompt_tokens": req.prompt, "completion_tokens": req.output,
                      "total_tokens": req.prompt + req.output}}
        return b"data: " + _encode(chunk) + b"\n\n"

    def whole(self, tokens: int, *, finished: bool) -> dict[str, Any]:
        """A non-streamed answer carrying the first ``tokens`` tokens."""
        req = self.req
        text = output_text(req.rid, 0, tokens)
        finish = "length" if finished else None
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": finish}
            obj, prefix = "chat.completion", "chatcmpl"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            obj, prefix = "text_completion", "cmpl"
        return {"id": f"{prefix}-{req.rid}", "object": obj, "created": self.created, "model": self.model_name,
                "choices": [choice], "usage": {"prompt_tokens": req.prompt, "completion_tokens": tokens,
                                               "total_tokens": req.prompt + tokens}}


def drop_connection(request: web.Request, *, reset: bool = False) -> None:
    """Close the client's connection now; with ``reset`` the peer gets a TCP RST, not a FIN."""
    transport = request.transport
    if transport is None:
        return
    if reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: closing discards the send buffer and sends RST (what a crashed server does).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _until_disconnected(request: web.Request, closing: asyncio.Event) -> None:
    # aiohttp does not cancel a handler whose client went away; it clears request.transport, so
    # a hung handler polls for that (and wakes at once when the server stops).
    while not closing.is_set():
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closing.wait(), _DISCONNECT_POLL_S)
    drop_connection(request)


async def strike(request: web.Request, fault: Fault, engine: Engine | ReplicaSet, req: SimRequest,
                 closing: asyncio.Event) -> None:
    """Act out ``hang`` or ``reset``; both end in ConnectionResetError (the client is gone)."""
    if fault.name == "hang":
        engine.abort(req)   # the request stops holding a slot; its client keeps waiting
        await _until_disconnected(request, closing)
    else:
        drop_connection(request, reset=True)
    raise ConnectionResetError(f"injected fault: {fault.name}")


async def _wait(request: web.Request, stream: Stream) -> None:
    await stream.event.wait()
    stream.event.clear()
    if stream.aborted:
        drop_connection(request)
        raise ConnectionResetError("the server is stopping")


async def stream_tokens(request: web.Request, stream: Stream, engine: Engine | ReplicaSet, framing: Framing, *,
                        include_usage: bool, fault: Fault | None,
                        closing: asyncio.Event) -> web.StreamResponse:
    """Stream the request's tokens as SSE events as the engine produces them."""
    req = stream.req
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    if framing.role is not None:
        await response.write(framing.role)
    at = fault.at if fault is not None and fault.name != "malformed" else -1
    bad_at = fault.at if fault is not None and fault.name == "malformed" else -1
    while True:
        sent = engine.sent_tokens(req)
        if 0 <= bad_at <= sent:
            sent = bad_at   # the tokens before the malformed event, then the event, then the rest
        if 0 <= at <= sent:
            if at > stream.emitted:
                await response.write(framing.content(stream.emitted, at, last=False))
                stream.emitted = at
            assert fault is not None
            if fault.name == "truncate":
                await response.write_eof()   # a clean end, short of max_tokens, without [DONE]
                return response
            await strike(request, fault, engine, req, closing)
        done = stream.done and sent == req.output
        if sent > stream.emitted or done:
            await response.write(framing.content(stream.emitted, sent, last=done))
            stream.emitted = sent
        if sent == bad_at:
            await response.write(MALFORMED_EVENT)
            bad_at = -1
            continue
        if done:
            break
        await _wait(request, stream)
    if include_usage:
        await response.write(framing.usage())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def whole_answer(request: web.Request, stream: Stream, engine: Engine | ReplicaSet, framing: Framing, *,
                       fault: Fault | None, closing: asyncio.Event) -> web.Response:
    """Wait for the request to finish (or for its fault to strike) and answer with one JSON body."""
    req = stream.req
    at = fault.at if fault is not None and fault.name != "malformed" else -1
    while not stream.done and not 0 <= at <= engine.sent_tokens(req):
        await _wait(request, stream)
    truncated = fault is not None and fault.name == "truncate"
    if at >= 0 and fault is not None and not truncated:
        await strike(request, fault, engine, req, closing)
    body = _encode(framing.whole(at, finished=False) if truncated else framing.whole(req.output, finished=True))
    if fault is not None and fault.name == "malformed":
        body = body[: len(body) // 2]
    return web.Response(body=body, content_type="application/json")
