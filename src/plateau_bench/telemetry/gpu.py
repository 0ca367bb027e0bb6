"""Local GPU telemetry through NVML (the ``gpu`` extra: ``pip install plateau-bench[gpu]``).

When the load generator runs on the GPU host, NVML gives what /metrics does not: board power
against its enforced limit, utilization, memory in use, the SM clock against its maximum, the
temperature and the energy counter, per GPU. A power-capped or clock-throttled GPU explains a
plateau that no scheduler metric shows.

NVML is optional in every sense: the module imports without ``nvidia-ml-py``, and ``open_nvml``
returns ``(None, NVML_UNAVAILABLE)`` when the library is missing, the driver is absent, or
``nvmlInit`` fails. A reading a GPU does not support (power on some boards) is omitted, not zero.

Samples use the common ``TelemetrySample`` (source ``gpu``, engine ``nvml``) with raw keys
``gpu<i>_power_w``, ``gpu<i>_power_limit_w``, ``gpu<i>_util_pct``, ``gpu<i>_mem_used_gib``,
``gpu<i>_fb_used_mib``, ``gpu<i>_fb_free_mib``, ``gpu<i>_sm_clock_mhz``, ``gpu<i>_sm_clock_max_mhz``,
``gpu<i>_temp_c``, ``gpu<i>_energy_j`` (the board's counter since the driver loaded) and the totals
``gpu_power_w`` (sum) and ``gpu_util_pct`` (mean), so ``summary.summarize`` reduces them like any
gauge. The per-GPU names are DCGM's quantities (``telemetry.dcgm``), so ``analysis.gpu`` reads NVML
samples as it reads an exporter's when no exporter is given. NVML calls block for up to
milliseconds, so ``GpuPoller`` makes them in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from plateau_bench.records import SOURCE_GPU, TelemetrySample

NVML_UNAVAILABLE = "NVML not available: no local GPU telemetry"
GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class GpuReading:
    index: int
    power_w: float | None = None
    util_pct: float | None = None
    mem_used_bytes: float | None = None
    mem_total_bytes: float | None = None
    sm_clock_mhz: float | None = None
    power_limit_w: float | None = None
    sm_clock_max_mhz: float | None = None
    temp_c: float | None = None
    energy_j: float | None = None


def _call(nvml: ModuleType, name: str, *args: Any) -> Any:
    """``nvml.name(*args)``, or None where the call fails or this nvidia-ml-py lacks it."""
    try:
        return getattr(nvml, name)(*args)
    except Exception:  # NVMLError_NotSupported, an older library without the call: this reading is unknown
        return None


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
            sm = getattr(nvml, "NVML_CLOCK_SM", 0)
            power_mw = _call(nvml, "nvmlDeviceGetPowerUsage", h)
            util = _call(nvml, "nvmlDeviceGetUtilizationRates", h)
            mem = _call(nvml, "nvmlDeviceGetMemoryInfo", h)
            clock = _call(nvml, "nvmlDeviceGetClockInfo", h, sm)
            limit_mw = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", h)
            clock_max = _call(nvml, "nvmlDeviceGetMaxClockInfo", h, sm)
            temp = _call(nvml, "nvmlDeviceGetTemperature", h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
            energy_mj = _call(nvml, "nvmlDeviceGetTotalEnergyConsumption", h)
            out.append(GpuReading(
                index=i,
                power_w=_scaled(power_mw, 1e-3),
                util_pct=None if util is None else float(util.gpu),
                mem_used_bytes=None if mem is None else float(mem.used),
                mem_total_bytes=None if mem is None else float(mem.total),
                sm_clock_mhz=_scaled(clock, 1.0),
                power_limit_w=_scaled(limit_mw, 1e-3),
                sm_clock_max_mhz=_scaled(clock_max, 1.0),
                temp_c=_scaled(temp, 1.0),
                energy_j=_scaled(energy_mj, 1e-3),
            ))
        return out

    def sample(self, t_ns: int) -> TelemetrySample:
        return TelemetrySample(t_ns=t_ns, engine="nvml", source=SOURCE_GPU, raw=readings_to_raw(self.read()))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _try(self._nvml.nvmlShutdown)


def _scaled(value: Any, factor: float) -> float | None:
    """A numeric NVML reading times ``factor``; None for a missing or non-numeric one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) * factor


def _fb(r: GpuReading) -> tuple[float | None, float | None]:
    """Framebuffer used and free in MiB, as DCGM exports them."""
    if r.mem_used_bytes is None or r.mem_total_bytes is None:
        return None, None
    return r.mem_used_bytes / MIB, max(0.0, r.mem_total_bytes - r.mem_used_bytes) / MIB


def readings_to_raw(readings: list[GpuReading]) -> dict[str, float]:
    raw: dict[str, float] = {}
    for r in readings:
        fb_used, fb_free = _fb(r)
        for key, value in (("power_w", r.power_w), ("power_limit_w", r.power_limit_w), ("util_pct", r.util_pct),
                           ("mem_used_gib", None if r.mem_used_bytes is None else r.mem_used_bytes / GIB),
                           ("fb_used_mib", fb_used), ("fb_free_mib", fb_free),
                           ("sm_clock_mhz", r.sm_clock_mhz), ("sm_clock_max_mhz", r.sm_clock_max_mhz),
                           ("temp_c", r.temp_c), ("energy_j", r.energy_j)):
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
