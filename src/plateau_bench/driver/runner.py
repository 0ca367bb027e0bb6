"""One load level over real HTTP: client, load loop, telemetry and client health together.

``HttpLevelRunner`` is the sweep's ``LevelRunner`` for a real endpoint. Per level it opens a client
whose connection pool matches the level's concurrency, starts the ``/metrics`` scraper and the
load generator's health sampler, runs the load loop, and, for steady levels, stops the loop as
soon as the throughput estimate is precise enough (``analysis.convergence``). Every finished
request is handed to ``on_record`` at once (the result writer streams it to disk).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.metrics import compute_level, full_window, steady_window
from plateau_bench.driver.client import StreamingClient
from plateau_bench.driver.health import HealthSampler
from plateau_bench.driver.load import LoadProgress, run_level
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.report.live import LevelProgress
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.sweep import LevelOutcome
from plateau_bench.telemetry.gpu import GpuPoller, open_nvml
from plateau_bench.telemetry.scraper import TelemetryScraper
from plateau_bench.telemetry.summary import summarize as summarize_telemetry
from plateau_bench.workload.prompts import Prompt

_MONITOR_S = 0.5
DEAD_TARGET_FAILURES = 32   # consecutive connection failures that end a level: the target is gone


class _TrackingSender:
    """Wraps the client to know which requests are in flight (for the convergence window)."""

    def __init__(self, client: StreamingClient, progress: LevelProgress | None) -> None:
        self.client = client
        self.progress = progress
        self.in_flight: dict[int, int] = {}

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        self.in_flight[index] = time.monotonic_ns() - self.client.t0_ns
        if self.progress is not None:
            self.progress.in_flight = len(self.in_flight)
        try:
            return await self.client.send(index=index, prompt=prompt, prompt_tokens=prompt_tokens,
                                          max_tokens=max_tokens, scheduled_ns=scheduled_ns, worker=worker,
                                          warmup=warmup)
        finally:
            self.in_flight.pop(index, None)
            if self.progress is not None:
                self.progress.in_flight = len(self.in_flight)

    def complete_until_ns(self) -> int:
        now = time.monotonic_ns() - self.client.t0_ns
        return min(self.in_flight.values(), default=now)


async def _remember_in_flight(stop: asyncio.Event, in_flight: Callable[[], dict[int, int]], into: list[int]) -> None:
    """When the level is told to stop, note the send times of the requests still in flight."""
    await stop.wait()
    into.extend(in_flight().values())


class HttpLevelRunner:
    def __init__(
        self,
        target: TargetSpec,
        prompts: list[Prompt],
        *,
        metrics_url: str | None,
        metrics_required: bool = False,
        count_tokens: Callable[[str], int] | None = None,
        progress: Callable[[], LevelProgress | None] = lambda: None,
        slow_client_ms: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.target = target
        self.prompts = prompts
        self.metrics_url = metrics_url
        self.metrics_required = metrics_required
        self.count_tokens = count_tokens
        self.progress = progress
        self.slow_client_ms = slow_client_ms
        self.seed = seed
        self.engine: str | None = None
        # Local GPUs (when the load runs on the GPU host): power, utilisation, clocks, through NVML.
        self._nvml, self.gpu_note = open_nvml()

    async def run_level(
        self,
        level: LevelSpec,
        *,
        label: str,
        on_record: Callable[[RequestRecord], None] | None,
        precision: PrecisionRule | None,
    ) -> LevelOutcome:
        progress = self.progress()
        if progress is not None and precision is not None:
            progress.precision = precision.precision
        # An unbounded open loop may need many connections; the pool opens them only as needed.
        width = level.concurrency or level.max_concurrency or 4096
        t0 = time.monotonic_ns()
        records: list[RequestRecord] = []
        stop = asyncio.Event()
        load_progress = LoadProgress()
        stuck_at_stop: list[int] = []
        stop_watch = asyncio.create_task(_remember_in_flight(stop, lambda: sender.in_flight, stuck_at_stop))
        cut_off_ages_s: list[float] = []
        refused = 0

        def collect(r: RequestRecord) -> None:
            nonlocal refused
            # A server that died answers every request at once with a refused connection; without
            # this the level would spin through thousands of instant failures until its time is up.
            refused = refused + 1 if r.error == ErrorClass.CONNECT else 0
            if refused >= DEAD_TARGET_FAILURES:
                stop.set()
            if self.slow_client_ms > 0:  # test hook: a load generator that cannot keep up
                until = time.perf_counter() + self.slow_client_ms / 1000
                while time.perf_counter() < until:
                    pass
            records.append(r)
            if progress is not None:
                progress.record(r)
            if on_record:
                on_record(r)

        scraper = (TelemetryScraper(self.metrics_url, t0_ns=t0) if self.metrics_url else None)
        async with StreamingClient(self.target, concurrency=width, t0_ns=t0,
                                   count_tokens=self.count_tokens) as client:
            sender = _TrackingSender(client, progress)
            health = HealthSampler(t0_ns=t0,
                                   in_flight=lambda: len(sender.in_flight))
            if scraper is not None:
                await scraper.start(wait_first=True)
                if self.metrics_required:
                    scraper.raise_if_unavailable()
                self.engine = scraper.engine or self.engine
            gpu = GpuPoller(self._nvml, t0_ns=t0) if self._nvml is not None else None
            if gpu is not None:
                await gpu.start()
            health.start()
            monitor = asyncio.create_task(self._monitor(level, precision, records, sender, scraper, progress,
                                                        stop, t0))
            try:
                await run_level(sender, self.prompts, level, t0_ns=t0, on_record=collect, stop=stop, seed=self.seed,
                                progress=load_progress)
                # What was still in flight when the level ended (not measurements, but not hidden either).
                cut_off_ages_s = [(time.monotonic_ns() - t0 - sent) / 1e9 for sent in stuck_at_stop]
            finally:
                monitor.cancel()
                health_samples = await health.stop()
                gpu_samples = await gpu.stop() if gpu is not None else []
                samples = await scraper.stop() if scraper is not None else []
        mode = level.mode
        window = steady_window(records) if mode == "steady" else full_window(records)
        result = compute_level(records, label=label, mode=mode, concurrency=level.concurrency, rate=level.rate,
                               window=window)
        telemetry_lines: list[dict[str, Any]] = []
        if samples:
            summary = summarize_telemetry(samples, window.start_ns, window.end_ns)
            result.telemetry = dict(summary.values)
            if summary.engine:
                result.extra["engine"] = summary.engine
            telemetry_lines = [s.to_line() for s in samples]
        stop_watch.cancel()
        if load_progress.cancelled:
            result.extra["cut_off_at_stop"] = load_progress.cancelled
            longest_ok = (result.e2e_ms.max or 0.0) / 1000
            hung = [age for age in cut_off_ages_s if age > max(2 * longest_ok, 1.0)]
            if hung:
                result.extra["hung_requests"] = len(hung)
                result.window_note += (f"; {len(hung)} request(s) still unanswered after {max(hung):.1f} s were cut "
                                       f"off at the end (longest completed: {longest_ok:.1f} s)")
        if refused >= DEAD_TARGET_FAILURES:
            result.level_failed = True
            result.window_note += f"; stopped: {DEAD_TARGET_FAILURES} connections in a row refused, the target is gone"
        if gpu_samples:
            gpu_values = summarize_telemetry(gpu_samples, window.start_ns, window.end_ns).values
            result.telemetry.update({k: v for k, v in gpu_values.items() if k != "samples"})
            telemetry_lines.extend(g.to_line() for g in gpu_samples)
        else:
            result.extra["gpu_telemetry"] = self.gpu_note
        result.client = health.summary(window.start_ns + t0, window.end_ns + t0)
        telemetry_lines.extend(health_samples)
        return LevelOutcome(result, records, telemetry_lines)

    async def _monitor(self, level: LevelSpec, precision: PrecisionRule | None, records: list[RequestRecord],
                       sender: _TrackingSender, scraper: TelemetryScraper | None,
                       progress: LevelProgress | None, stop: asyncio.Event, t0: int) -> None:
        while not stop.is_set():
            await asyncio.sleep(_MONITOR_S)
            elapsed = (time.monotonic_ns() - t0) / 1e9
            if progress is not None and scraper is not None and scraper.samples:
                last = scraper.samples[-1]
                progress.server_running = last.get("running")
                progress.server_waiting = last.get("waiting")
            if precision is None or level.mode == "burst":
                continue
            workers = level.concurrency or 1  # open loop: records carry worker -1, one "worker"
            complete = sender.complete_until_ns()
            if progress is not None:
                progress.ci_rel = precision.ci_rel(records, workers=workers, complete_until_ns=complete)
            if precision.done(records, elapsed_s=elapsed, workers=workers, complete_until_ns=complete):
                stop.set()
