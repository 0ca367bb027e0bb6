"""NVML sampling: absent library, failing init, and the reading path through a stand-in NVML module."""

from __future__ import annotations

import asyncio
import sys
import types
from typing import Any

import pytest

from plateau_bench.analysis.gpu import gpu_metrics
from plateau_bench.telemetry.gpu import NVML_UNAVAILABLE, GpuPoller, open_nvml, readings_to_raw
from plateau_bench.telemetry.summary import summarize


class NotSupported(Exception):
    pass


def stand_in_nvml(*, init_error: str | None = None, gpus: int = 2) -> types.ModuleType:
    """A module with pynvml's call names; GPU 1 cannot report power, as some boards cannot."""
    m = types.ModuleType("stand_in_nvml")
    m.NVML_CLOCK_SM = 1  # type: ignore[attr-defined]
    m.shutdowns = 0  # type: ignore[attr-defined]

    def init() -> None:
        if init_error:
            raise RuntimeError(init_error)

    def shutdown() -> None:
        m.shutdowns += 1  # type: ignore[attr-defined]

    def power(h: int) -> int:
        if h == 1:
            raise NotSupported("Not Supported")
        return 350_500   # mW

    def clock(h: int, kind: int) -> int:
        assert kind == 1
        return 1980 - 10 * h

    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = shutdown  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: gpus  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=90 + h, memory=40)  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30)  # type: ignore[attr-defined]
    m.nvmlDeviceGetClockInfo = clock  # type: ignore[attr-defined]
    return m


def full_nvml(energy_mj: list[int]) -> types.ModuleType:
    """The stand-in with the readings a current nvidia-ml-py has: limit, top clock, temperature, energy."""
    m = stand_in_nvml(gpus=1)
    m.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000  # type: ignore[attr-defined]
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980  # type: ignore[attr-defined]
    m.nvmlDeviceGetTemperature = lambda h, sensor: 52  # type: ignore[attr-defined]
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: energy_mj.pop(0)  # type: ignore[attr-defined]
    return m


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Any:
    def put(module: types.ModuleType) -> str:
        monkeypatch.setitem(sys.modules, module.__name__, module)
        return module.__name__
    return put


def test_missing_library_gives_none_and_a_note() -> None:
    sampler, note = open_nvml("plateau_bench_no_such_nvml")
    assert sampler is None
    assert note.startswith(NVML_UNAVAILABLE) and "not installed" in note


def test_failing_init_gives_none_and_the_reason(install: Any) -> None:
    sampler, note = open_nvml(install(stand_in_nvml(init_error="Driver Not Loaded")))
    assert sampler is None and note == f"{NVML_UNAVAILABLE} (Driver Not Loaded)"


def test_no_gpu(install: Any) -> None:
    module = stand_in_nvml(gpus=0)
    sampler, note = open_nvml(install(module))
    assert sampler is None and "no GPU" in note and module.shutdowns == 1  # type: ignore[attr-defined]


def test_readings_per_gpu_with_an_unsupported_field(install: Any) -> None:
    module = stand_in_nvml()
    sampler, note = open_nvml(install(module))
    assert sampler is not None and note == "" and sampler.count == 2
    first, second = sampler.read()
    assert (first.power_w, first.util_pct, first.mem_used_bytes, first.sm_clock_mhz) == (350.5, 90, 2**30, 1980)
    assert second.power_w is None   # omitted, not zero
    raw = readings_to_raw([first, second])
    assert raw["gpu0_power_w"] == 350.5 and "gpu1_power_w" not in raw
    assert raw["gpu1_mem_used_gib"] == 2.0 and raw["gpu1_sm_clock_mhz"] == 1970
    assert raw["gpu_power_w"] == 350.5 and raw["gpu_util_pct"] == 90.5
    sampler.close()
    sampler.close()
    assert module.shutdowns == 1  # type: ignore[attr-defined]


async def test_poller_samples_in_a_thread_and_summarizes_as_gauges(install: Any) -> None:
    sampler, _ = open_nvml(install(stand_in_nvml()))
    assert sampler is not None
    poller = GpuPoller(sampler, interval_s=0.01, t0_ns=0, clock_ns=lambda: 5)
    await poller.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while len(poller.samples) < 3:
        assert loop.time() < deadline
        await asyncio.sleep(0.01)
    samples = await poller.stop()
    assert all(s.source == "gpu" and s.engine == "nvml" and s.t_ns == 5 for s in samples)
    values = summarize(samples, 0, 10).values
    assert values["gpu0_power_w_mean"] == 350.5 and values["gpu_util_pct_max"] == 90.5


def test_the_readings_a_verdict_needs_and_the_energy_counter(install: Any) -> None:
    """Power against the enforced limit, the clock against its maximum, the framebuffer as DCGM
    names it, and the energy counter summarised as a counter (joules over the window)."""
    sampler, _ = open_nvml(install(full_nvml([1_000_000, 1_350_500])))
    assert sampler is not None
    first = sampler.sample(0)
    raw = first.raw
    assert (raw["gpu0_power_limit_w"], raw["gpu0_sm_clock_max_mhz"], raw["gpu0_temp_c"]) == (700.0, 1980.0, 52.0)
    assert raw["gpu0_fb_used_mib"] == 1024.0 and raw["gpu0_fb_free_mib"] == 79 * 1024.0
    assert raw["gpu0_energy_j"] == 1000.0
    values = summarize([first, sampler.sample(10**9)], 0, 10**9).values
    assert values["gpu0_energy_j_delta"] == pytest.approx(350.5)
    assert values["gpu0_energy_j_rate"] == pytest.approx(350.5)   # watts: the mean power over the second


def test_an_older_library_without_some_calls_still_reads_the_rest(install: Any) -> None:
    sampler, _ = open_nvml(install(stand_in_nvml(gpus=1)))   # no limit, top clock, temperature or energy calls
    assert sampler is not None
    raw = sampler.sample(0).raw
    assert raw["gpu0_power_w"] == 350.5 and "gpu0_power_limit_w" not in raw and "gpu0_energy_j" not in raw


def test_nvml_readings_give_the_windows_energy_and_headroom(install: Any) -> None:
    """The counter read at 0, 1 and 2 s (350.5 W between readings): a window from 0.5 s to 2 s opens between
    two readings and holds 1.5 s x 350.5 W; the clock at its maximum and half the power limit."""
    sampler, _ = open_nvml(install(full_nvml([1_000_000, 1_350_500, 1_701_000])))
    assert sampler is not None
    samples = [sampler.sample(t * 10**9) for t in range(3)]
    m = gpu_metrics(samples, 5 * 10**8, 2 * 10**9)
    assert m is not None and m.source == "nvml" and m.energy_source == "counter"
    assert m.energy_j == pytest.approx(1.5 * 350.5)
    assert m.power_share == pytest.approx(350.5 / 700, abs=1e-4) and m.sm_clock_share == 1.0


def test_a_gpu_without_the_counter_or_power_leaves_the_energy_unknown(install: Any) -> None:
    """GPU 1 reports neither power nor energy: the two GPUs' energy is unknown, not GPU 0's alone."""
    sampler, _ = open_nvml(install(stand_in_nvml(gpus=2)))
    assert sampler is not None
    m = gpu_metrics([sampler.sample(0), sampler.sample(10**9)], 0, 10**9)
    assert m is not None and m.gpus == 2 and m.power_w_mean == 350.5
    assert m.energy_j is None and m.energy_source is None and m.sm_clock_share is None
