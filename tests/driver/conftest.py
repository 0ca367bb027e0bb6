"""A scripted OpenAI-compatible streaming server on 127.0.0.1 for the driver tests.

The server follows a ``Plan`` (timing, chunking, usage, errors, framing) that each test sets,
and logs what it did: the monotonic time just before each chunk was written, so client-side
times are checked against what the server actually did rather than against nominal sleeps.
Client and server share one process, hence one monotonic clock.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass
class Plan:
    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_chunk: int = 1
    usage: bool = True               # honour stream_options.include_usage
    continuous_usage: bool = False   # cumulative usage in every chunk
    role_chunk: bool = True          # chat: a first chunk with the role and no content
    role_gap_s: float = 0.0          # pause between the role chunk and the first token
    reasoning_tokens: int = 0        # chat: the first N tokens arrive as reasoning_content
    error_after: int | None = None   # send an error event after this many tokens
    stream_on_after_error: bool = False  # and keep streaming tokens after it
    status: int = 200
    keepalive: bool = False          # comments and blank lines between events
    crlf: bool = False
    send_done: bool = True
    finish_reason: bool = True       # the last content chunk carries finish_reason "length"
    usage_claim: int | None = None   # completion_tokens the final usage report claims (default: all)
    stream_tokens: int | None = None  # stream at most this many tokens, then end as usual
    held_back_every: int = 0         # every Nth token arrives with empty text (text joins the next)
    cut_after: int | None = None     # drop the connection after this many tokens
    reset_after: int | None = None   # reset the connection (RST) after this many tokens
    end_after: int | None = None     # end the body cleanly after this many tokens (no [DONE])
    garbage_after: int | None = None  # send an undecodable event after this many tokens
    no_events: bool = False          # answer 200 with an empty body
    api_key: str | None = None       # required bearer token
    error_echo_auth: bool = False    # error body repeats the Authorization header
    echo_header: str | None = None   # an error answer (status != 200) repeats this header's value
    # discovery routes
    models: list[str] = field(default_factory=lambda: ["tiny"])
    openai_models_route: bool = True
    version: str | None = "0.9.9"
    health_failures: int = 0          # /health answers 503 this many times first
    tokenize_style: str | None = "vllm"  # "vllm" | "llamacpp" | None


@dataclass
class Served:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_ns: int
    chunk_sent_ns: list[int] = field(default_factory=list)   # content chunks only
    role_sent_ns: int | None = None
    chunk_tokens: list[int] = field(default_factory=list)


class ScriptedServer:
    def __init__(self) -> None:
        self.plan = Plan()
        self.served: list[Served] = []
        self.health_calls = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._stream)
        app.router.add_post("/v1/chat/completions", self._stream)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # --- routes ---------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        if not self.plan.openai_models_route:
            return web.Response(status=404, text="<html>not here</html>", content_type="text/html")
        data = [{"id": m, "object": "model", "owned_by": "vllm", "max_model_len": 2048}
                for m in self.plan.models]
        return web.json_response({"object": "list", "data": data})

    async def _version(self, request: web.Request) -> web.Response:
        if self.plan.version is None:
            return web.Response(status=404)
        return web.json_response({"version": self.plan.version})

    async def _health(self, request: web.Request) -> web.Response:
        self.health_calls += 1
        if self.health_calls <= self.plan.health_failures:
            return web.Response(status=503)
        return web.Response(status=200)

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        style = self.plan.tokenize_style
        if style is None:
            return web.Response(status=404)
        if style == "vllm":
            tokens = list(range(len(body["prompt"].split()) + 1))
            return web.json_response({"count": len(tokens), "tokens": tokens, "max_model_len": 2048})
        # llama.cpp reads only "content" and answers an empty list without it
        words = body.get("content", "").split()
        return web.json_response({"tokens": list(range(len(words) + 1)) if words else []})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        received = time.monotonic_ns()
        plan = self.plan
        body = await request.json()
        served = Served(request.path, body, dict(request.headers), received)
        self.served.append(served)
        if plan.api_key is not None and request.headers.get("Authorization") != f"Bearer {plan.api_key}":
            message = f"bad key in {request.headers.get('Authorization')}" if plan.error_echo_auth else "bad key"
            return web.json_response({"error": {"message": message, "code": 401}}, status=401)
        if plan.status != 200:
            message = "slow down" if plan.status == 429 else "engine failed"
            if plan.echo_header is not None:
                message += f" for {request.headers.get(plan.echo_header)}"
            return web.json_response({"error": {"message": message, "type": "x"}}, status=plan.status)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if plan.no_events:
            await resp.write_eof()
            return resp
        chat = request.path.endswith("/chat/completions")
        eol = b"\r\n" if plan.crlf else b"\n"

        async def event(obj: dict[str, Any] | str, *, stamp: int = 0) -> None:
            text = obj if isinstance(obj, str) else json.dumps(obj)
            frame = b"data: " + text.encode() + eol + eol
            if plan.keepalive:
                frame = b": keep-alive" + eol + eol + eol + frame
            if stamp:
                served.chunk_sent_ns.append(time.monotonic_ns())
                served.chunk_tokens.append(stamp)
            await resp.write(frame)

        await asyncio.sleep(plan.ttft_s)
        if chat and plan.role_chunk:
            served.role_sent_ns = time.monotonic_ns()
            await event(_chunk(chat, None, role=True))
            await asyncio.sleep(plan.role_gap_s)
        total = int(body["max_tokens"])
        if plan.stream_tokens is not None:
            total = min(total, plan.stream_tokens)
        done = 0
        pending_tokens = 0
        while done < total:
            if plan.cut_after is not None and done >= plan.cut_after:
                assert request.transport is not None
                request.transport.close()
                return resp
            if plan.reset_after is not None and done >= plan.reset_after:
                assert request.transport is not None
                sock = request.transport.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                request.transport.abort()
                return resp
            if plan.end_after is not None and done >= plan.end_after:
                await resp.write_eof()
                return resp
            if plan.garbage_after is not None and done >= plan.garbage_after:
                await event('{"choices": [{"text": "x"')
                await asyncio.sleep(0.05)
                await resp.write_eof()
                return resp
            if plan.error_after is not None and done >= plan.error_after:
                await event({"error": {"message": "out of KV cache", "type": "InternalError"}})
                if not plan.stream_on_after_error:
                    await resp.write_eof()
                    return resp
                plan.error_after = None
            k = min(plan.tokens_per_chunk, total - done)
            done += k
            pending_tokens += k
            held = plan.held_back_every and done % plan.held_back_every == 0 and done < total
            reasoning = done <= plan.reasoning_tokens
            text = "" if held else " ".join(f"t{i}" for i in range(pending_tokens)) + " "
            usage = {"prompt_tokens": 7, "completion_tokens": done} if plan.continuous_usage else None
            finish = "length" if plan.finish_reason and done == total else None
            if held:
                await event(_chunk(chat, text, usage=usage))
            else:
                await event(_chunk(chat, text, usage=usage, reasoning=reasoning, finish=finish),
                            stamp=pending_tokens)
                pending_tokens = 0
            if done < total:
                await asyncio.sleep(plan.itl_s)
        if plan.usage and body.get("stream_options", {}).get("include_usage"):
            claim = total if plan.usage_claim is None else plan.usage_claim
            usage = {"prompt_tokens": 7, "completion_tokens": claim, "total_tokens": 7 + claim}
            await event({"id": "x", "choices": [], "usage": usage})
        if plan.send_done:
            await event("[DONE]")
        await resp.write_eof()
        return resp


def _chunk(chat: bool, text: str | None, *, role: bool = False, usage: dict[str, int] | None = None,
           reasoning: bool = False, finish: str | None = None) -> dict[str, Any]:
    if chat:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
        if text is not None:
            delta["reasoning_content" if reasoning else "content"] = text
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    return {"id": "x", "object": "chunk", "choices": [choice], "usage": usage}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    srv = ScriptedServer()
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
def refused_url() -> str:
    """A 127.0.0.1 URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
