"""Health of the load generator itself, sampled alongside a level.

A load generator that cannot keep up looks, from its own records, like a slow server: fewer
requests in flight than asked for, late sends, inflated latencies. Two signals expose it:

* **process CPU** (``psutil``, this process, in % of one core): an asyncio client runs on one
  core, so a value near 100 % means it is the bottleneck;
* **event-loop lag**: the sampler sleeps ``interval_s`` and measures how late it wakes up. Every
  chunk the client reads waits behind the same loop, so a lag of tens of milliseconds is added to
  every measured time.

The sampler only records ``HealthSample``s (written to ``telemetry.jsonl`` with ``source: "client"``);
``analysis.health`` reduces them to the figures the diagnosis reads.

``busy_fraction`` is a test and demonstration hook: it blocks the event loop for that fraction of
every ``BURN_TICK_S`` with a busy CPU loop, producing a load-generator-bound level on purpose.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psutil

from plateau_bench.records import HealthSample

BURN_TICK_S = 0.02


class HealthSampler:
    """Samples CPU, loop lag and in-flight count every ``interval_s`` until ``stop()``."""

    def __init__(
        self,
        *,
        interval_s: float = 0.1,
        in_flight: Callable[[], int] | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        t0_ns: int | None = None,
        busy_fraction: float = 0.0,
        worker: int | None = None,
    ) -> None:
        if not 0.0 <= busy_fraction < 1.0:
            raise ValueError(f"busy_fraction must be in [0, 1) (got {busy_fraction})")
        self.interval_s = interval_s
        self.in_flight = in_flight
        self.clock_ns = clock_ns
        self.t0_ns = t0_ns
        self.busy_fraction = busy_fraction
        self.worker = worker
        self.samples: list[HealthSample] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._process = psutil.Process()

    def start(self) -> None:
        """Start sampling (and burning, if asked) in the running event loop."""
        if self._tasks:
            return
        if self.t0_ns is None:
            self.t0_ns = self.clock_ns()
        self._process.cpu_percent(None)  # the first call only sets the reference point
        self._tasks.append(asyncio.create_task(self._sample_loop()))
        if self.busy_fraction > 0:
            self._tasks.append(asyncio.create_task(self._burn_loop()))

    async def stop(self) -> list[HealthSample]:
        """Stop and return the samples."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        return self.samples

    async def __aenter__(self) -> HealthSampler:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _sample_loop(self) -> None:
        assert self.t0_ns is not None
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            lag_ms = max(0.0, (time.perf_counter() - before - self.interval_s) * 1000.0)
            self.samples.append(HealthSample(
                t_ns=self.clock_ns() - self.t0_ns, cpu_pct=self._process.cpu_percent(None),
                loop_lag_ms=round(lag_ms, 3), in_flight=self.in_flight() if self.in_flight is not None else None,
                worker=self.worker))

    async def _burn_loop(self) -> None:
        busy = BURN_TICK_S * self.busy_fraction
        idle = BURN_TICK_S - busy
        while True:
            end = time.perf_counter() + busy
            while time.perf_counter() < end:
                pass
            await asyncio.sleep(idle)
