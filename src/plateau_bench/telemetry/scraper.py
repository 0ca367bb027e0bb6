"""Scrape a server's Prometheus /metrics during a load level, without ever disturbing the load.

Every ``interval_s`` (0.5 s by default) the scraper GETs the metrics URL, keeps only the lines
the engine maps read (``exposition.prefilter``), parses them with prometheus_client's official text
parser, and stores a ``TelemetrySample`` stamped at the midpoint of the request (the moment the
server rendered the page lies between send and receive; the midpoint is the unbiased guess).
Scrapes run back to back on a fixed schedule: a slow scrape delays the next one instead of
overlapping it, and missed ticks are skipped rather than bunched.

Failure policy, because telemetry is optional and the load loop must never see an exception:

* If the first scrape fails (no answer, HTTP error, text that is not exposition format, or no known
  engine's names), the scraper marks itself unavailable and stops quietly. ``available`` and
  ``last_error`` let a caller that was *given* ``--metrics-url`` say so (``raise_if_unavailable``);
  the default URL is simply absent.
* Later failures are counted in ``errors`` and the loop carries on.

After the first good scrape the scraper reads, once, the JSON info endpoints of the detected engine
(llama.cpp ``/props`` and ``/slots``, SGLang ``/get_server_info``, TGI ``/info``) for the values
/metrics does not carry, such as llama.cpp's slot count. ``stop()`` takes one last sample so the end
of the level is covered.

The scraper uses its own small aiohttp session unless one is passed, so that a load generator
holding every connection of its pool cannot delay a scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from plateau_bench.errors import ScrapeError
from plateau_bench.records import TelemetrySample
from plateau_bench.redaction import redact, redact_url
from plateau_bench.telemetry.engines import (
    CANONICAL,
    EngineMap,
    detect_engine,
    extract,
    extract_histograms,
    info_values,
)
from plateau_bench.telemetry.exposition import engine_names_present, parse_exposition

DEFAULT_INTERVAL_S = 0.5
DEFAULT_TIMEOUT_S = 2.0
# Ask for the classic text format: servers built on prometheus_client switch to OpenMetrics
# only when the client asks for it.
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _json_stats(text: str) -> bool:
    """A JSON document where Prometheus text was expected (trtllm-serve's ``/metrics``)."""
    return text.lstrip()[:1] in ("[", "{")


def default_metrics_url(target_url: str) -> str:
    """The metrics URL of a target: its server root (any ``/v1...`` path removed) + ``/metrics``."""
    parts = urlsplit(target_url.strip())
    path = parts.path.rstrip("/")
    cut = path.find("/v1")
    if cut != -1 and (len(path) == cut + 3 or path[cut + 3] == "/"):
        path = path[:cut]
    return urlunsplit((parts.scheme, parts.netloc, path + "/metrics", "", ""))


def info_endpoints(base_url: str) -> dict[str, str]:
    """The JSON info endpoints an engine may answer at ``base_url``, by kind (see engines.info_values)."""
    base = base_url.rstrip("/")
    return {"props": f"{base}/props", "slots": f"{base}/slots",
            "server_info": f"{base}/get_server_info", "info": f"{base}/info"}


def _describe(exc: BaseException, url: str, timeout_s: float) -> str:
    """One line on a failed scrape; no credential of the URL in it (an exception may quote the URL whole)."""
    return redact(_failure(exc, redact_url(url), timeout_s))


def _failure(exc: BaseException, url: str, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer from {url} within {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {url}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return f"cannot read {url}: {exc.__class__.__name__}: {exc}"
    return f"scrape of {url} failed: {exc.__class__.__name__}: {exc}"


class TelemetryScraper:
    """Periodic /metrics scraper for one load level (or several, see ``set_t0`` and ``drain``).

    Args:
        metrics_url: the Prometheus text endpoint.
        interval_s: time between scrape starts.
        session: an aiohttp session to use; by default the scraper opens and closes its own.
        extra_endpoints: info endpoints by kind; default ``info_endpoints`` at the metrics URL's
            origin; ``{}`` disables them.
        clock_ns: the monotonic clock samples are stamped with (the driver's clock).
        t0_ns: the level start on that clock; default: when ``start()`` is called.
        timeout_s: limit for one scrape.
        headers: extra request headers (an authorization header, for instance).
        on_sample: called with every new sample (e.g. to stream it to telemetry.jsonl); its
            exceptions are counted, never raised.
    """

    @property
    def shown_url(self) -> str:
        """The metrics URL as it may appear in messages: credentials redacted."""
        return redact_url(self.metrics_url)

    def __init__(
        self,
        metrics_url: str,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        session: aiohttp.ClientSession | None = None,
        extra_endpoints: Mapping[str, str] | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        t0_ns: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        headers: Mapping[str, str] | None = None,
        on_sample: Callable[[TelemetrySample], None] | None = None,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self.metrics_url = metrics_url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.extra_endpoints = dict(info_endpoints(_origin(metrics_url)) if extra_endpoints is None
                                    else extra_endpoints)
        self.available: bool | None = None   # None until the first scrape has answered or failed
        self.last_error: str | None = None
        self.errors = 0
        self.scrapes = 0
        self.static: dict[str, float] = {}   # from the info endpoints
        self._clock_ns = clock_ns
        self._t0_ns = t0_ns
        self._headers = {"Accept": _ACCEPT, **(headers or {})}
        self._on_sample = on_sample
        self._session = session
        self._own_session = session is None
        self._engine: EngineMap | None = None
        self._samples: list[TelemetrySample] = []
        self._task: asyncio.Task[None] | None = None

    # -- public state ------------------------------------------------------------------------
    @property
    def engine(self) -> str | None:
        return self._engine.name if self._engine else None

    @property
    def samples(self) -> list[TelemetrySample]:
        return list(self._samples)

    def drain(self) -> list[TelemetrySample]:
        """The samples collected so far, removed from the scraper."""
        out, self._samples = self._samples, []
        return out

    def set_t0(self, t0_ns: int) -> None:
        """Stamp later samples relative to a new level start."""
        self._t0_ns = t0_ns

    def raise_if_unavailable(self) -> None:
        """For an explicitly requested metrics URL: raise ScrapeError when it never answered usefully."""
        if self.available is False:
            raise ScrapeError(f"--metrics-url {self.shown_url} is unusable: {self.last_error}")

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, *, wait_first: bool = False) -> None:
        """Begin scraping. With ``wait_first`` the first scrape is done before returning,
        so ``available`` is known."""
        if self._task is not None:
            return
        if self._t0_ns is None:
            self._t0_ns = self._clock_ns()
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=2))
        if wait_first and self.available is None:
            await self._first()
        if self.available is not False:
            self._task = asyncio.create_task(self._run(), name="plateau-telemetry")

    async def stop(self, *, final_scrape: bool = True) -> list[TelemetrySample]:
        """Stop scraping (one last sample first, so the level's end is covered); returns all samples."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            if self.available is None:
                # a level shorter than the first scrape: decide availability now, with one sample
                await self._first()
            elif final_scrape and self.available:
                await self._scrape(timeout_s=min(self.timeout_s, 1.0))
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None
        return self.samples

    async def __aenter__(self) -> TelemetryScraper:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- the loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.available is None and not await self._first():
            return
        next_at = loop.time() + self.interval_s
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            await self._scrape()
            next_at += self.interval_s
            now = loop.time()
            if next_at < now:   # fell behind: skip the missed ticks
                next_at = now + self.interval_s

    async def _first(self) -> bool:
        ok = await self._scrape()
        self.available = ok
        return ok

    async def _get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        assert self._session is not None
        async with self._session.get(url, headers=self._headers,
                                     timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.read()

    async def _scrape(self, timeout_s: float | None = None) -> bool:
        """One scrape; True when it produced a sample. Never raises (cancellation aside)."""
        timeout_s = timeout_s or self.timeout_s
        try:
            t_send = self._clock_ns()
            try:
                status, body = await self._get(self.metrics_url, timeout_s)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                return self._fail(_describe(exc, self.metrics_url, timeout_s))
            t_recv = self._clock_ns()
            if status != 200:
                return self._fail(f"HTTP {status} from {self.shown_url}")
            text = body.decode("utf-8", errors="replace")
            if _json_stats(text) and self._prometheus_sibling():
                return await self._scrape(timeout_s)
            try:
                index = parse_exposition(text)
            except ValueError as exc:
                return self._fail(f"{self.shown_url} is not Prometheus text format: {exc}")
            if self._engine is None:
                self._engine = detect_engine(index, hint=engine_names_present(text))
                if self._engine is None:
                    return self._fail(f"{self.shown_url} shows no vLLM, SGLang, llama.cpp, TGI or TensorRT-LLM metrics")
                await self._read_info(self._engine)
            values, raw = extract(self._engine, index)
            for key, v in self.static.items():
                (values if key in CANONICAL else raw).setdefault(key, v)
            t0 = self._t0_ns or 0
            sample = TelemetrySample(t_ns=(t_send + t_recv) // 2 - t0, engine=self._engine.name,
                                     values=values, raw=raw, histograms=extract_histograms(self._engine, index))
            self._samples.append(sample)
            self.scrapes += 1
            if self._on_sample is not None:
                try:
                    self._on_sample(sample)
                except Exception as exc:  # the callback is the caller's; its failure is only counted
                    self._fail(f"telemetry callback failed: {exc.__class__.__name__}: {exc}")
            return True
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never into the load loop: count it and carry on
            return self._fail(_describe(exc, self.metrics_url, timeout_s))

    def _prometheus_sibling(self) -> bool:
        """Move to ``/prometheus/metrics`` beside a ``/metrics`` that answered JSON (trtllm-serve's iteration
        statistics; its Prometheus text is there), once: True when it moved."""
        parts = urlsplit(self.metrics_url)
        if not parts.path.endswith("/metrics") or parts.path.endswith("/prometheus/metrics"):
            return False
        path = parts.path[: -len("/metrics")] + "/prometheus/metrics"
        self.metrics_url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
        return True

    def _fail(self, message: str) -> bool:
        self.errors += 1
        self.last_error = message
        return False

    async def _read_info(self, engine: EngineMap) -> None:
        """Static values from the engine's JSON info endpoints; absence is normal and silent."""
        for kind in engine.info_kinds:
            if "cap" in self.static and kind == "slots":
                continue   # /props already gave the slot count
            url = self.extra_endpoints.get(kind)
            if not url:
                continue
            try:
                status, body = await self._get(url, min(self.timeout_s, 1.0))
                payload: Any = json.loads(body) if status == 200 else None
            except asyncio.CancelledError:
                raise
            except Exception:  # an info endpoint is a bonus: any failure just means "not known"
                continue
            for key, v in info_values(engine.name, kind, payload).items():
                self.static.setdefault(key, v)

