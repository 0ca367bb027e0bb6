"""Health of the load generator itself, sampled alongside a level.

A load generator that cannot keep up looks, from its own records, like a slow server: fewer
requests in flight than asked for, late sends, inflated latencies. Two signals expose it:

* **process CPU** (``psutil``, this process, in % of one core): an asyncio client runs on one
  core, so a value near 100 % means it is the bottleneck;
* **event-loop lag**: the sampler sleeps ``interval_s`` and measures how late it wakes up. Every
  chunk the client reads waits behind the same loop, so a lag of tens of milliseconds is added to
  every measured time.

``summary()`` reduces the samples to the figures the diagnosis reads (``cpu_pct_mean``,
``cpu_pct_max``, ``loop_lag_ms_p99``, ``loop_lag_ms_max``, and in-flight statistics when a source
was given). Samples are written to ``telemetry.jsonl`` with ``source: "client"``.

``busy_fraction`` is a test and demonstration hook: it blocks the event loop for that fraction of
every ``BURN_TICK_S`` with a busy CPU loop, producing a load-generator-bound level on purpose.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

BURN_TICK_S = 0.02
NS_PER_MS = 1_000_000


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
    ) -> None:
        if not 0.0 <= busy_fraction < 1.0:
            raise ValueError(f"busy_fraction must be in [0, 1) (got {busy_fraction})")
        self.interval_s = interval_s
        self.in_flight = in_flight
        self.clock_ns = clock_ns
        self.t0_ns = t0_ns
        self.busy_fraction = busy_fraction
        self.samples: list[dict[str, Any]] = []
        self._abs_ns: list[int] = []  # absolute clock of each sample, for summary windows
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

    async def stop(self) -> list[dict[str, Any]]:
        """Stop and return the samples (telemetry lines)."""
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
            now = self.clock_ns()
            sample: dict[str, Any] = {
                "source": "client",
                "t_ns": now - self.t0_ns,
                "cpu_pct": self._process.cpu_percent(None),
                "loop_lag_ms": round(lag_ms, 3),
            }
            if self.in_flight is not None:
                sample["in_flight"] = self.in_flight()
            self.samples.append(sample)
            self._abs_ns.append(now)

    async def _burn_loop(self) -> None:
        busy = BURN_TICK_S * self.busy_fraction
        idle = BURN_TICK_S - busy
        while True:
            end = time.perf_counter() + busy
            while time.perf_counter() < end:
                pass
            await asyncio.sleep(idle)

    def summary(self, start_ns: int | None = None, end_ns: int | None = None) -> dict[str, float]:
        """Figures over the samples taken in ``[start_ns, end_ns]`` (absolute clock), else all."""
        chosen = [s for s, t in zip(self.samples, self._abs_ns, strict=True)
                  if (start_ns is None or t >= start_ns) and (end_ns is None or t <= end_ns)]
        return summarize_health(chosen or self.samples)


def summarize_health(samples: list[dict[str, Any]]) -> dict[str, float]:
    """cpu_pct_mean/max, loop_lag_ms_mean/p99/max, in_flight_mean/max (when sampled), samples."""
    if not samples:
        return {}
    cpu = np.asarray([s["cpu_pct"] for s in samples], dtype=np.float64)
    lag = np.asarray([s["loop_lag_ms"] for s in samples], dtype=np.float64)
    out = {
        "cpu_pct_mean": round(float(cpu.mean()), 2),
        "cpu_pct_max": round(float(cpu.max()), 2),
        "loop_lag_ms_mean": round(float(lag.mean()), 3),
        "loop_lag_ms_p99": round(float(np.percentile(lag, 99)), 3),
        "loop_lag_ms_max": round(float(lag.max()), 3),
        "samples": float(len(samples)),
    }
    flights = [s["in_flight"] for s in samples if "in_flight" in s]
    if flights:
        out["in_flight_mean"] = round(float(np.mean(flights)), 2)
        out["in_flight_max"] = float(max(flights))
    return out
