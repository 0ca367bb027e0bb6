"""The twin as an OpenAI-compatible HTTP server (aiohttp), in real time.

One asyncio task, the *clock*, advances the engine's virtual clock against the wall clock
(``virtual = wall * speed``): it commits every step that has ended, wakes the streams whose
requests produced tokens, and sleeps until the next step ends (at least ``min_tick_s``, so at a
high speed-up several steps' tokens go out in one chunk; usage counts stay exact).

Endpoints follow vLLM: ``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` (SSE
``data: {json}\\n\\n`` chunks, ``finish_reason`` on the last content chunk, a usage chunk with empty
``choices`` when ``stream_options.include_usage`` is true, then ``data: [DONE]``), ``/tokenize``,
``/health``, ``/version`` and ``/metrics`` (see ``prom.py``). The twin has no end-of-sequence
token: every request generates exactly ``max_tokens`` tokens, with or without ``ignore_eos``.
Errors use OpenAI's body ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

import msgspec
from aiohttp import web

from plateau_bench import __version__
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, RequestRejected, SimRequest
from plateau_bench.sim.prom import SimMetrics
from plateau_bench.sim.tokens import count_tokens, messages_text, output_text, prompt_text, token_ids

_encode = msgspec.json.encode
_DEFAULT_COMPLETION_MAX_TOKENS = 16   # the OpenAI/vLLM default for /v1/completions


def error_response(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


class _Stream:
    __slots__ = ("done", "emitted", "event", "req")

    def __init__(self) -> None:
        self.req: SimRequest | None = None
        self.emitted = 0
        self.done = False
        self.event = asyncio.Event()


class SimServer:
    """The application and its clock. ``await start(host, port)``, then ``await stop()``."""

    def __init__(self, config: EngineConfig, *, speed: float = 1.0, metrics: bool = True,
                 reject_when_waiting: int | None = None, reject_status: int = 429,
                 min_tick_s: float = 0.002) -> None:
        self.config = config
        self.speed = speed
        self.reject_when_waiting = reject_when_waiting
        self.reject_status = reject_status
        self.min_tick_s = min_tick_s
        self.engine = Engine(config, on_finish=self._finished)
        self.metrics = SimMetrics(config.model_name, self.engine.state) if metrics else None
        self._streams: dict[int, _Stream] = {}
        self._wake = asyncio.Event()
        self._wall0 = time.monotonic()
        self._ids = itertools.count(1)
        self._created = int(time.time())
        self._clock: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.app = self._make_app()

    # -- lifecycle ----------------------------------------------------------------------
    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/health", self._health)
        app.router.add_get("/version", self._version)
        if self.metrics is not None:
            app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Bind and serve; returns the port. OSError (e.g. port in use) propagates."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self._wall0 = time.monotonic()
        self._clock = asyncio.create_task(self._run_clock())
        return self.port

    async def stop(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            await asyncio.gather(self._clock, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the clock ----------------------------------------------------------------------
    def _virtual_now(self) -> float:
        return (time.monotonic() - self._wall0) * self.speed

    async def _run_clock(self) -> None:
        engine = self.engine
        while True:
            vnow = self._virtual_now()
            engine.run_until(vnow)
            for stream in self._streams.values():
                req = stream.req
                if req is not None and (stream.done or engine.sent_tokens(req) > stream.emitted):
                    stream.event.set()
            nxt = engine.next_event_time()
            if nxt is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = max((nxt - self._virtual_now()) / self.speed, self.min_tick_s)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    def _finished(self, req: SimRequest) -> None:
        stream = self._streams.get(req.rid)
        if stream is not None:
            stream.done = True
        if self.metrics is not None and req.first_token >= 0:
            ttft = (req.first_token - req.arrival) / self.speed
            gaps = req.output - 1
            itl = (req.end - req.first_token) / self.speed / gaps if gaps > 0 else None
            self.metrics.observe_request(ttft, itl, gaps)

    # -- request handling ---------------------------------------------------------------
    async def _read_json(self, request: web.Request) -> dict[str, Any] | web.Response:
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "The request body is not valid JSON.")
        if not isinstance(body, dict):
            return error_response(400, "The request body must be a JSON object.")
        model = body.get("model")
        if model is not None and model != self.config.model_name:
            return error_response(404, f"The model `{model}` does not exist.", "NotFoundError")
        return body

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_json(request)
        if isinstance(body, web.Response):
            return body
        prompt = prompt_text(body)
        if prompt is None:
            return error_response(400, "`prompt` must be a string, a list with one string, or token ids.")
        n_prompt = len(prompt) if isinstance(prompt, list) else count_tokens(prompt)
        return await self._generate(request, body, n_prompt, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_json(request)
        if isinstance(body, web.Response):
            return body
        text = messages_text(body.get("messages"))
        if text is None:
            return error_response(400, "`messages` must be a non-empty list of messages with text content.")
        return await self._generate(request, body, count_tokens(text), chat=True)

    def _max_tokens(self, body: dict[str, Any], n_prompt: int, chat: bool) -> int | str:
        value = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
        if value is None:
            return self.config.max_model_len - n_prompt if chat else _DEFAULT_COMPLETION_MAX_TOKENS
        if isinstance(value, bool) or not isinstance(value, int):
            return "max_tokens must be an integer."
        return value

    async def _generate(self, request: web.Request, body: dict[str, Any], n_prompt: int, *,
                        chat: bool) -> web.StreamResponse:
        max_tokens = self._max_tokens(body, n_prompt, chat)
        if isinstance(max_tokens, str):
            return error_response(400, max_tokens)
        limit = self.reject_when_waiting
        if limit is not None and self.engine.state().waiting > limit:
            kind = "RateLimitError" if self.reject_status == 429 else "ServiceUnavailableError"
            return error_response(self.reject_status, f"Too many waiting requests (more than {limit}).", kind)
        stream = _Stream()
        try:
            req = self.engine.submit(n_prompt, max_tokens, arrival=self._virtual_now())
        except RequestRejected as exc:
            return error_response(400, str(exc))
        stream.req = req
        self._streams[req.rid] = stream
        self._wake.set()
        try:
            if body.get("stream"):
                options = body.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                try:
                    return await self._stream(request, stream, chat=chat, include_usage=usage)
                except ConnectionResetError:
                    # The client went away (a level stopped early, Ctrl-C): the request is aborted
                    # below, as a real server does; nothing to log.
                    return web.Response(status=499)
            return await self._whole(stream, chat=chat)
        finally:
            self._streams.pop(req.rid, None)
            if not stream.done:
                self.engine.abort(req)

    async def _whole(self, stream: _Stream, *, chat: bool) -> web.Response:
        req = stream.req
        assert req is not None
        while not stream.done:
            await stream.event.wait()
            stream.event.clear()
        text = output_text(req.rid, 0, req.output)
        usage = {"prompt_tokens": req.prompt, "completion_tokens": req.output,
                 "total_tokens": req.prompt + req.output}
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": "length"}
            obj, prefix = "chat.completion", "chatcmpl"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            obj, prefix = "text_completion", "cmpl"
        return web.json_response({"id": f"{prefix}-{req.rid}", "object": obj, "created": self._created,
                                  "model": self.config.model_name, "choices": [choice], "usage": usage})

    async def _stream(self, request: web.Request, stream: _Stream, *, chat: bool,
                      include_usage: bool) -> web.StreamResponse:
        req = stream.req
        assert req is not None
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        model = _encode(self.config.model_name).decode()
        if chat:
            head = (f'data: {{"id":"chatcmpl-{req.rid}","object":"chat.completion.chunk",'
                    f'"created":{self._created},"model":{model},"choices":[{{"index":0,').encode()
            await response.write(head + b'"delta":{"role":"assistant"},"logprobs":null,"finish_reason":null}]}\n\n')
            text_open, text_close = b'"delta":{"content":', b'},"logprobs":null,"finish_reason":'
            tail = b"}]}\n\n"
        else:
            head = (f'data: {{"id":"cmpl-{req.rid}","object":"text_completion","created":{self._created},'
                    f'"model":{model},"choices":[{{"index":0,').encode()
            text_open, text_close = b'"text":', b',"logprobs":null,"finish_reason":'
            tail = b',"stop_reason":null}],"usage":null}\n\n'
        engine = self.engine
        while True:
            await stream.event.wait()
            stream.event.clear()
            sent = engine.sent_tokens(req)
            if sent > stream.emitted or stream.done:
                last = stream.done
                text = output_text(req.rid, stream.emitted, sent)
                stream.emitted = sent
                await response.write(head + text_open + _encode(text) + text_close
                                     + (b'"length"' if last else b"null") + tail)
            if stream.done:
                break
        if include_usage:
            usage = {"prompt_tokens": req.prompt, "completion_tokens": req.output,
                     "total_tokens": req.prompt + req.output}
            obj = "chat.completion.chunk" if chat else "text_completion"
            prefix = "chatcmpl" if chat else "cmpl"
            chunk = {"id": f"{prefix}-{req.rid}", "object": obj, "created": self._created,
                     "model": self.config.model_name, "choices": [], "usage": usage}
            await response.write(b"data: " + _encode(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # -- small endpoints ----------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        name = self.config.model_name
        return web.json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": self._created, "owned_by": "plateau-bench",
            "root": name, "parent": None, "max_model_len": self.config.max_model_len}]})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await self._read_json(request)
        if isinstance(body, web.Response):
            return body
        if "messages" in body:
            text = messages_text(body.get("messages"))
        else:
            prompt = body.get("prompt")
            text = prompt if isinstance(prompt, str) else None
        if text is None:
            return error_response(400, "`prompt` (a string) or `messages` is required.")
        tokens = token_ids(text)
        return web.json_response({"tokens": tokens, "count": len(tokens),
                                  "max_model_len": self.config.max_model_len})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "engine": "plateau-bench-sim",
                                  "preset": self.config.name})

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self.metrics is not None
        return web.Response(body=self.metrics.exposition(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

