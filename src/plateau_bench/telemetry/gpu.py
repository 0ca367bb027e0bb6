"""Local GPU telemetry through NVML (the ``gpu`` extra: ``pip install plateau-bench[gpu]``).

When the load generator runs on the GPU host, NVML gives what /metrics does not: board power,
SM utilization, memory in use and the SM clock, per GPU. A power-capped or clock-throttled GPU
explains a plateau that no scheduler metric shows.

NVML is optional in every sense: the module imports without ``nvidia-ml-py``, and ``open_nvml``
returns ``(None, NVML_UNAVAILABLE)`` when the library is missing, the driver is absent, or
``nvmlInit`` fails. A reading a GPU does not support (power on some boards) is omitted, not zero.

Samples use the common ``TelemetrySample`` (source ``gpu``, engine ``nvml``) with raw keys
``gpu<i>_power_w``, ``gpu<i>_util_pct``, ``gpu<i>_mem_used_gib``, ``gpu<i>_sm_clock_mhz`` and the
totals ``gpu_power_w`` (sum) and ``gpu_util_pct`` (mean), so ``summary.summarize`` reduces them
like any gauge. NVML calls block for up to milliseconds, so ``GpuPoller`` makes them in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

from plateau_bench.telemetry.samples import SOURCE_GPU, TelemetrySample

NVML_UNAVAILABLE = "NVML not available: no local GPU telemetry"
GIB = 1024**3


@dataclass(frozen=True)
class GpuReading:
    index: int
    power_w: float | None = None
    util_pct: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    sm_clock_mhz: float | None = None


def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:  # NVMLError_NotSupported and friends: this reading is simply unknown
        return None


class NvmlSampler:
    """Reads every GPU NVML sees. Create with ``open_nvml``; ``close`` when done."""

    def __init__(self, nvml: ModuleType, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._closed = False

    @property
    def count(self) -> int:
        return len(self._handles)

    def read(self) -> list[GpuReading]:
        nvml = self._nvml
        out: list[GpuReading] = []
        for i, h in enumerate(self._handles):
            power_mw = _try(partial(nvml.nvmlDeviceGetPowerUsage, h))
            util = _try(partial(nvml.nvmlDeviceGetUtilizationRates, h))
            mem = _try(partial(nvml.nvmlDeviceGetMemoryInfo, h))
            clock = _try(partial(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM))
            out.append(GpuReading(
                index=i,
                power_w=None if power_mw is None else power_mw / 1000.0,
                util_pct=None if util is None else float(util.gpu),
                mem_used_bytes=None if mem is None else float(mem.used),
                mem_total_bytes=None if mem is None else float(mem.total),
                sm_clock_mhz=None if clock is None else float(clock),
            ))
        return out

    def sample(self, t_ns: int) -> TelemetrySample:
        return TelemetrySample(t_ns=t_ns, engine="nvml", source=SOURCE_GPU, raw=readings_to_raw(self.read()))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _try(self._nvml.nvmlShutdown)


def readings_to_raw(readings: list[GpuReading]) -> dict[str, float]:
    raw: dict[str, float] = {}
    for r in readings:
        for key, value in (("power_w", r.power_w), ("util_pct", r.util_pct),
                           ("mem_used_gib", None if r.mem_used_bytes is None else r.mem_used_bytes / GIB),
                           ("sm_clock_mhz", r.sm_clock_mhz)):
            if value is not None:
                raw[f"gpu{r.index}_{key}"] = value
    powers = [r.power_w for r in readings if r.power_w is not None]
    utils = [r.util_pct for r in readings if r.util_pct is not None]
    if powers:
        raw["gpu_power_w"] = sum(powers)
    if utils:
        raw["gpu_util_pct"] = sum(utils) / len(utils)
    return raw


def open_nvml(module_name: str = "pynvml") -> tuple[NvmlSampler | None, str]:
    """An NVML sampler and an empty note, or ``(None, NVML_UNAVAILABLE + reason)``."""
    try:
        nvml = importlib.import_module(module_name)
    except ImportError:
        return None, f"{NVML_UNAVAILABLE} (nvidia-ml-py is not installed)"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # no driver, no device, container without /dev/nvidia*: all "unavailable"
        return None, f"{NVML_UNAVAILABLE} ({exc})"
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception as exc:
        _try(nvml.nvmlShutdown)
        return None, f"{NVML_UNAVAILABLE} ({exc})"
    if not handles:
        _try(nvml.nvmlShutdown)
        return None, f"{NVML_UNAVAILABLE} (no GPU found)"
    return NvmlSampler(nvml, handles), ""


class GpuPoller:
    """Samples an ``NvmlSampler`` every ``interval_s`` in a worker thread; same lifecycle as the scraper."""

    def __init__(self, sampler: NvmlSampler, *, interval_s: float = 1.0,
                 clock_ns: Callable[[], int] = time.monotonic_ns, t0_ns: int | None = None) -> None:
        self._sampler = sampler
        self.interval_s = interval_s
        self._clock_ns = clock_ns
        self._t0_ns = t0_ns
        self._samples: list[TelemetrySample] = []
        self._task: asyncio.Task[None] | None = None
        self.errors = 0

    @property
    def samples(self) -> list[TelemetrySample]:
        return list(self._samples)

    async def _once(self) -> None:
        t0 = self._t0_ns or 0
        try:
            t = self._clock_ns()
            sample = await asyncio.to_thread(self._sampler.sample, t - t0)
            self._samples.append(sample)
        except Exception:  # a failed reading must not stop the level
            self.errors += 1

    async def _run(self) -> None:
        while True:
            await self._once()
            await asyncio.sleep(self.interval_s)

    async def start(self) -> None:
        if self._task is None:
            if self._t0_ns is None:
                self._t0_ns = self._clock_ns()
            self._task = asyncio.create_task(self._run(), name="plateau-gpu-telemetry")

    async def stop(self) -> list[TelemetrySample]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self._once()
        return self.samples
