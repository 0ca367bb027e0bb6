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
Errors use OpenAI's body ``{"error": {"message", "type", "code"}}``. With ``faults`` some
requests fail on purpose (see ``faults``); the answers themselves are written by ``responses``.

Stopping aborts the open streams first (their connections are dropped), so a server with
thousands of open streams stops in well under a second instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from plateau_bench._version import __version__
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, RequestRejected, SimRequest
from plateau_bench.sim.faults import STREAM_FAULTS, Fault, FaultPicker, FaultSpec
from plateau_bench.sim.prefix_cache import block_hashes
from plateau_bench.sim.probe import Probe
from plateau_bench.sim.prom import SimMetrics
from plateau_bench.sim.replicas import ReplicaSet, parse_balancer
from plateau_bench.sim.responses import Framing, Stream, stream_tokens, whole_answer
from plateau_bench.sim.tokens import TwinTokenizer, messages_text, output_text, prompt_text

_DEFAULT_COMPLETION_MAX_TOKENS = 16   # the OpenAI/vLLM default for /v1/completions
# aiohttp listens with a backlog of 128: a burst of C=4096 new connections overflows it, and each
# dropped SYN costs its client a 1 s, 3 s, ... retransmission. The kernel caps it at somaxconn.
LISTEN_BACKLOG = 4096
MAX_BACKLOG = 1 << 20
_FILE_HEADROOM = 64
# How long stop() lets handlers finish once their streams are aborted (they end at once; this only
# bounds a handler stuck elsewhere, which aiohttp then cancels).
_SHUTDOWN_GRACE_S = 0.5
_SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def error_response(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "code": status}}, status=status)


def backlog_note(requested: int, somaxconn: Path = _SOMAXCONN) -> str | None:
    """A warning when the kernel caps the listen backlog below ``requested`` (Linux), else None."""
    try:
        cap = int(somaxconn.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None   # not Linux, or unreadable: nothing to say
    if cap >= requested:
        return None
    return (f"net.core.somaxconn is {cap}: the listen backlog is capped at {cap}, not {requested}, so a burst of "
            f"more than {cap} new connections waits on SYN retries (raise it: sysctl -w "
            f"net.core.somaxconn={requested})")


def raise_open_files(connections: int) -> str | None:
    """Let the server hold as many connections as the system allows: the soft open-file limit raised to
    the hard one (as ``ulimit -n`` would; an unprivileged process may). A note when even that holds fewer
    than ``connections`` (each is an open file), else None. Load tests of thousands of streams otherwise
    end in the server's ``EMFILE`` at 1,024 connections, which clients see as refused connections."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, connections + _FILE_HEADROOM)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= connections + _FILE_HEADROOM:
        return None
    return (f"the open-file limit is {soft:,}: the server holds at most ~{soft - _FILE_HEADROOM:,} connections "
            f"(raise it: ulimit -n {connections + _FILE_HEADROOM} or LimitNOFILE=)")


class SimServer:
    """The application and its clock. ``await start(host, port)``, then ``await stop()``."""

    def __init__(self, config: EngineConfig, *, speed: float = 1.0, metrics: bool = True,
                 reject_when_waiting: int | None = None, reject_status: int = 429,
                 min_tick_s: float = 0.002, faults: FaultSpec | None = None, faults_seed: int = 0,
                 backlog: int = LISTEN_BACKLOG, tokenizer: TwinTokenizer | None = None) -> None:
        self.config = config
        self.tokenizer = tokenizer or TwinTokenizer()
        self.speed = speed
        self.reject_when_waiting = reject_when_waiting
        self.reject_status = reject_status
        self.min_tick_s = min_tick_s
        self.backlog = backlog
        self.backlog_note: str | None = None
        self._faults = FaultPicker(faults, faults_seed) if faults is not None and faults.any else None
        self._closing = asyncio.Event()
        # The probe (ground truth for /metrics, prom.py) reads one engine's internals: none for replicas.
        self.probe = Probe(sample_s=None) if metrics and config.replicas == 1 else None
        self.engine: Engine | ReplicaSet = (
            Engine(config, on_finish=self._finished, probe=self.probe) if config.replicas == 1
            else ReplicaSet(config, config.replicas, parse_balancer(config.balancer), on_finish=self._finished))
        self.metrics = (SimMetrics(config.model_name, self.engine.state, probe=self.probe, speed=speed)
                        if metrics else None)
        self._streams: dict[int, Stream] = {}
        self._wake = asyncio.Event()
        self._wall0 = time.monotonic()
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
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     shutdown_timeout=_SHUTDOWN_GRACE_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True, backlog=self.backlog)
        self.backlog_note = backlog_note(self.backlog)
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
        """Abort the open streams, close the listener and connections, then stop the clock.

        The clock stops last: until then a handler that is still writing keeps its tokens coming.
        """
        self._closing.set()
        for stream in self._streams.values():
            stream.aborted = True
            stream.event.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._clock is not None:
            self._clock.cancel()
            await asyncio.gather(self._clock, return_exceptions=True)

    # -- the clock ----------------------------------------------------------------------
    def _virtual_now(self) -> float:
        return (time.monotonic() - self._wall0) * self.speed

    async def _run_clock(self) -> None:
        engine = self.engine
        while True:
            vnow = self._virtual_now()
            engine.run_until(vnow)
            for stream in self._streams.values():
                if stream.done or engine.sent_tokens(stream.req) > stream.emitted:
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
            # queue: from reaching the engine's queue (after the front end) to first scheduled, as vLLM
            # stamps it in the engine core; the front end's time shows as TTFT outside the engine
            scheduled = req.scheduled if req.scheduled >= 0 else req.entered
            self.metrics.observe_phases(queue_s=(scheduled - req.entered) / self.speed,
                                        prefill_s=(req.first_token - scheduled) / self.speed,
                                        decode_s=(req.end - req.first_token) / self.speed)

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
        ids = prompt if isinstance(prompt, list) else None
        n_prompt = len(prompt) if isinstance(prompt, list) else self.tokenizer.count(prompt)
        return await self._generate(request, body, n_prompt, chat=False,
                                    prompt_ids=(lambda: ids if ids is not None else self.tokenizer.ids(str(prompt))))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._read_json(request)
        if isinstance(body, web.Response):
            return body
        text = messages_text(body.get("messages"))
        if text is None:
            return error_response(400, "`messages` must be a non-empty list of messages with text content.")
        return await self._generate(request, body, self.tokenizer.count(text), chat=True,
                                    prompt_ids=lambda: self.tokenizer.ids(text))

    def _max_tokens(self, body: dict[str, Any], n_prompt: int, chat: bool) -> int | str:
        value = body.get("max_completion_tokens", body.get("max_tokens")) if chat else body.get("max_tokens")
        if value is None:
            return self.config.max_model_len - n_prompt if chat else _DEFAULT_COMPLETION_MAX_TOKENS
        if isinstance(value, bool) or not isinstance(value, int):
            return "max_tokens must be an integer."
        return value

    async def _generate(self, request: web.Request, body: dict[str, Any], n_prompt: int, *,
                        chat: bool, prompt_ids: Callable[[], list[int]] | None = None) -> web.StreamResponse:
        max_tokens = self._max_tokens(body, n_prompt, chat)
        if isinstance(max_tokens, str):
            return error_response(400, max_tokens)
        fault = self._faults.draw(max_tokens) if self._faults is not None else None
        if fault is not None and fault.name not in STREAM_FAULTS:
            early = await self._early_fault(fault)
            if early is not None:
                return early
            fault = None
        if self._closing.is_set():
            return error_response(503, "The server is shutting down.", "ServiceUnavailableError")
        limit = self.reject_when_waiting
        if limit is not None and self.engine.state().waiting > limit:
            kind = "RateLimitError" if self.reject_status == 429 else "ServiceUnavailableError"
            return error_response(self.reject_status, f"Too many waiting requests (more than {limit}).", kind)
        try:
            req = self.engine.submit(n_prompt, max_tokens, arrival=self._virtual_now())
        except RequestRejected as exc:
            return error_response(400, str(exc))
        if prompt_ids is not None and self.config.prefix_caching:
            # The answer's words are known from the request number: its blocks are cached too, so
            # the next turn of a conversation (prompt + this answer + more) finds them.
            ids = prompt_ids() + self.tokenizer.ids(output_text(req.rid, 0, max_tokens))
            self.engine.set_block_hashes(req, block_hashes(ids, self.config.block_size))
        stream = Stream(req)
        self._streams[req.rid] = stream
        self._wake.set()
        framing = Framing(req, self.config.model_name, self._created, chat=chat)
        try:
            if body.get("stream"):
                options = body.get("stream_options")
                usage = isinstance(options, dict) and bool(options.get("include_usage"))
                return await stream_tokens(request, stream, self.engine, framing, include_usage=usage,
                                           fault=fault, closing=self._closing)
            return await whole_answer(request, stream, self.engine, framing, fault=fault, closing=self._closing)
        except ConnectionResetError:
            # The client went away (a level stopped early, Ctrl-C), the server is stopping, or a fault
            # dropped the connection: the request is aborted below, as a real server does.
            return web.Response(status=499)
        finally:
            self._streams.pop(req.rid, None)
            if not stream.done:
                self.engine.abort(req)   # frees its slot and KV blocks

    async def _early_fault(self, fault: Fault) -> web.Response | None:
        """The faults that strike before the engine sees the request; None: go on (slow headers)."""
        spec = self._faults.spec if self._faults is not None else FaultSpec()
        if fault.name == "http_500":
            return error_response(500, "Internal server error (injected fault).", "InternalServerError")
        if fault.name == "http_429":
            response = error_response(429, "Rate limit exceeded (injected fault).", "RateLimitError")
            response.headers["Retry-After"] = str(spec.retry_after_s)
            return response
        with contextlib.suppress(TimeoutError):   # slow_headers; the server's stop cuts it short
            await asyncio.wait_for(self._closing.wait(), spec.slow_headers_s)
        return None

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
        tokens = self.tokenizer.ids(text)
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

