"""GPU energy over a level's measurement window, and per output token.

Per GPU, over the window ``[start_ns, end_ns]``:

* **from the board's energy counter** (``energy_j``: NVML's ``nvmlDeviceGetTotalEnergyConsumption``,
  DCGM's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, both in joules once read) where the GPU has one. The
  counter is made monotone and interpolated linearly at the window's edges
  (``telemetry.summary.counter_delta``), so an edge between two samples splits their energy in
  proportion. Preferred: the board accumulates energy itself, so the power spikes between two samples
  are counted, which a power reading once a second misses.
* **else from power readings** (``power_w``), by the trapezoid rule over the samples, each edge of the
  window interpolated linearly between the samples around it.

Either gives the mean power over the part of the window the samples cover; times the window's length
it is the window's energy. The pollers sample from a level's start to its end, so the part covered is
the whole window unless scrapes failed. A counter that did not move is not a measurement of zero watts
(a DCGM exporter at its default 30 s collect interval serves one cached value for a whole short window):
the power readings stand in, and without them the GPU's energy is unknown.

The level's energy is the sum over its GPUs, known only when every GPU has one (a partial sum would
understate it); ``source`` says how it was measured: ``counter``, ``power`` or ``mixed``.

Per output token: the energy over the output tokens completed in the same window (its output throughput
times its length), and the inverse, output tokens per joule. Unknown stays unknown, never 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from plateau_bench.result import GpuMetrics
from plateau_bench.telemetry.summary import Point, counter_delta, interpolate
from plateau_bench.units import NS

GpuSeries = Mapping[str, Sequence[Point]]   # one GPU's quantities (``power_w``, ``energy_j``, ...) over time


@dataclass(frozen=True)
class WindowEnergy:
    joules: float
    source: str   # "counter" | "power" | "mixed"


def counter_power_w(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Mean power (W) from an energy counter in joules over the covered part of the window; None when it did
    not move or does not cover the window."""
    counted = counter_delta(points, start_ns, end_ns)
    if counted is None:
        return None
    joules, span_ns = counted
    return joules / (span_ns / NS) if joules > 0 else None


def trapezoid_power_w(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    """Mean of the power readings over the covered part of the window, linear between samples (trapezoids)."""
    if len(points) < 2:
        return None
    a, b = max(start_ns, points[0][0]), min(end_ns, points[-1][0])
    if b <= a:
        return None
    knots = [(a, interpolate(points, a)), *((t, v) for t, v in points if a < t < b), (b, interpolate(points, b))]
    area = sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in itertools.pairwise(knots))
    return area / (b - a)


def gpu_energy(gpu: GpuSeries, start_ns: int, end_ns: int) -> WindowEnergy | None:
    """One GPU's energy over the window: its counter where it moved, else its power readings."""
    window_s = (end_ns - start_ns) / NS
    if window_s <= 0:
        return None
    counted = counter_power_w(gpu.get("energy_j", ()), start_ns, end_ns)
    if counted is not None:
        return WindowEnergy(counted * window_s, "counter")
    integrated = trapezoid_power_w(gpu.get("power_w", ()), start_ns, end_ns)
    return None if integrated is None else WindowEnergy(integrated * window_s, "power")


def total_energy(gpus: Iterable[GpuSeries], start_ns: int, end_ns: int) -> WindowEnergy | None:
    """The sum over the GPUs, or None when any GPU's energy is unknown."""
    each = [gpu_energy(g, start_ns, end_ns) for g in gpus]
    known = [e for e in each if e is not None]
    if not each or len(known) < len(each):
        return None
    sources = {e.source for e in known}
    return WindowEnergy(sum(e.joules for e in known), sources.pop() if len(sources) == 1 else "mixed")


def per_output_token(m: GpuMetrics, output_tokens: float) -> GpuMetrics:
    """``m`` with joules per output token and output tokens per joule, where both are known."""
    if m.energy_j is None or m.energy_j <= 0 or output_tokens <= 0:
        return m
    return msgspec.structs.replace(m, joules_per_output_token=round(m.energy_j / output_tokens, 6),
                                   output_tokens_per_joule=round(output_tokens / m.energy_j, 4))


_HOW = {"counter": "from the boards' energy counters", "power": "from power readings integrated over time",
        "mixed": "from energy counters and, where a GPU has none, power readings"}


def energy_sentence(m: GpuMetrics) -> str | None:
    """``0.42 J per output token (2.4 output tokens per joule; 12,600 J over the window, from ...)``."""
    if m.joules_per_output_token is None or m.output_tokens_per_joule is None or m.energy_j is None:
        return None
    how = _HOW.get(m.energy_source or "", "")
    return (f"{m.joules_per_output_token:.3g} J per output token ({m.output_tokens_per_joule:.3g} output tokens "
            f"per joule; {m.energy_j:,.0f} J over the window{', ' + how if how else ''})")
