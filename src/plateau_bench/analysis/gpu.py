"""GPU evidence from DCGM exporters: a level's GPU figures, and what they say about the verdict.

``gpu_metrics`` reduces a level's DCGM samples (``telemetry.dcgm``, source ``dcgm``) to ``GpuMetrics``.
Each GPU's quantity is a step function over time, reduced like every gauge
(``telemetry.summary.gauge_stats``): the time-weighted mean over the level's window ``[start_ns,
end_ns]``, the value in force at the window start counting from there. Series of different nodes are
kept apart by the samples' ``node`` index. Then, over the GPUs that have the quantity:

* ratios (``sm_active``, ``sm_occupancy``, ``tensor_active``, ``dram_active``), ``gpu_util`` (percent
  / 100), power, the power limit, ``power_share`` (each GPU's mean power over its limit) and
  ``fb_used_share`` (used / (used + free)) are means over the GPUs;
* ``pcie_bytes_per_s`` and ``nvlink_bytes_per_s`` (TX + RX) are sums over the GPUs.

``sm_clock_mhz``, its maximum and ``sm_clock_share`` (each GPU's clock over its maximum) are means over the
GPUs; ``energy_j`` is the window's energy summed over the GPUs (``analysis.energy``: energy counters,
else power readings integrated). ``raw`` keeps the busiest and idlest GPU (``sm_active_max``/``_min``,
``power_share_max``, ...), ``gr_engine_active``, ``temp_c`` and ``nvlink_bandwidth_total`` (summed, in
the exporter's unit).

``gpu_evidence`` turns the GPU figures of the plateau level into sentences for the verdict. The level
read is the one the plateau is made of: among the levels with GPU figures (failed levels left out),
those within 5 % of the best output throughput, the highest of them (the one with most load). A
compute or prefill verdict also reads power against the limit with the SM clock against its maximum
(``headroom``), and every verdict ends with the level's energy per output token where it is known. The
thresholds, and why:

* ``SM_BUSY`` 0.80 and ``SM_IDLE`` 0.50: DCGM's own reading of SM activity ("a value of 0.8 or greater is
  necessary, but not sufficient, for effective use of the GPU; a value less than 0.5 likely indicates
  ineffective GPU usage", DCGM profiling metrics). ``SM_SATURATED`` 0.95 is shown as "~100 %".
* ``DRAM_BUSY`` 0.60: DCGM notes that about 0.8 is the most DRAM activity achievable in practice, so
  0.6 is three quarters of the attainable memory bandwidth: decode that streams weights and KV cache at
  that rate while the tensor pipes idle is bandwidth-bound, not compute-bound.
* ``TENSOR_BUSY`` 0.50: a tensor activity of 1 is a tensor instruction every other cycle (DCGM); half
  of that sustained is what dense prefill (large matrix products) reaches, decode rarely.
* ``POWER_CAPPED`` 0.90: the driver lowers clocks as the draw nears the enforced limit, and DCGM's
  power is an average, so a mean at 90 % of the limit already has peaks at it. ``POWER_LOW`` 0.60:
  below it the board has clear power headroom.
* ``CLOCK_AT_MAX`` 0.95: an SM clock at 95 % of its maximum or more is "at maximum": GPU Boost moves the
  clock in bins of ~15 MHz around the top one even unthrottled, so the exact maximum is not a fair test.
  Power at ``POWER_CAPPED`` with the clock below it is power-bound (the driver trades clock for power);
  power below it with the clock below it is a clock held down by something else (temperature, a clock
  cap, idling between steps); the clock at maximum with power to spare is neither power- nor thermal-bound.
* ``UNEVEN`` 0.25: the busiest GPU's SM activity this far above the mean means one GPU (a tensor- or
  expert-parallel rank) waits on another: the mean understates how close the busiest one is.

When SM activity is not exported (the exporter's default counters leave the profiling fields out),
the graphics-engine activity or ``DCGM_FI_DEV_GPU_UTIL`` stand in for "the GPUs had headroom", never
for "the GPUs are saturated": a GPU can be busy 100 % of the time with one small kernel.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from plateau_bench.analysis.energy import energy_sentence, total_energy
from plateau_bench.records import TelemetrySample
from plateau_bench.result import GpuMetrics, LevelResult
from plateau_bench.telemetry.summary import Point, gauge_stats, series

SM_BUSY = 0.80
SM_IDLE = 0.50
SM_SATURATED = 0.95
DRAM_BUSY = 0.60
TENSOR_BUSY = 0.50
POWER_CAPPED = 0.90
POWER_LOW = 0.60
CLOCK_AT_MAX = 0.95
UNEVEN = 0.25
PLATEAU_BAND = 0.05

SOURCE_DCGM = "dcgm"   # telemetry.dcgm.SOURCE_DCGM (that module does I/O; analysis does not import it)
SOURCE_NVML = "gpu"    # records.SOURCE_GPU: local NVML readings, with DCGM's quantity names

_PER_GPU = re.compile(r"gpu([A-Za-z0-9]+)_([a-z_]+)")
_RATIOS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
GpuMeans = dict[str, float]


def _per_gpu_series(samples: Sequence[TelemetrySample]) -> dict[tuple[int, str], dict[str, list[Point]]]:
    """Per (node, GPU) each quantity's series; nodes' series kept apart by the samples' ``node`` index."""
    by_node: dict[int, list[TelemetrySample]] = {}
    for s in samples:
        by_node.setdefault(int(s.raw.get("node", 0.0)), []).append(s)
    out: dict[tuple[int, str], dict[str, list[Point]]] = {}
    for node, node_samples in by_node.items():
        for key, points in series(node_samples).items():
            match = _PER_GPU.fullmatch(key)
            if match is not None:
                out.setdefault((node, match.group(1)), {})[match.group(2)] = points
    return out


def _per_gpu_means(per_gpu: dict[tuple[int, str], dict[str, list[Point]]], start_ns: int,
                   end_ns: int) -> dict[tuple[int, str], GpuMeans]:
    """Per (node, GPU) the time-weighted mean of each quantity over the window."""
    out: dict[tuple[int, str], GpuMeans] = {}
    for gpu, quantities in per_gpu.items():
        for quantity, points in quantities.items():
            stats = gauge_stats(points, start_ns, end_ns)
            if stats is not None:
                out.setdefault(gpu, {})[quantity] = stats.mean
    return out


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _column(gpus: Sequence[GpuMeans], quantity: str) -> list[float]:
    return [g[quantity] for g in gpus if quantity in g]


def _rate(gpus: Sequence[GpuMeans], link: str) -> float | None:
    rates = [g[f"{link}_{d}_bytes_per_s"] for g in gpus for d in ("tx", "rx") if f"{link}_{d}_bytes_per_s" in g]
    return round(sum(rates)) if rates else None


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _shares(gpus: Sequence[GpuMeans], part: str, whole: str) -> list[float]:
    """Each GPU's ``part`` over its ``whole`` (power over its limit, clock over its maximum)."""
    return [g[part] / g[whole] for g in gpus if part in g and g.get(whole, 0.0) > 0]


def _fb_shares(gpus: Sequence[GpuMeans]) -> list[float]:
    return [g["fb_used_mib"] / (g["fb_used_mib"] + g["fb_free_mib"]) for g in gpus
            if "fb_used_mib" in g and "fb_free_mib" in g and g["fb_used_mib"] + g["fb_free_mib"] > 0]


def _raw(gpus: Sequence[GpuMeans], power_shares: Sequence[float]) -> dict[str, float]:
    raw: dict[str, float] = {}
    for quantity in _RATIOS:
        column = _column(gpus, quantity)
        if column:
            raw[f"{quantity}_max"], raw[f"{quantity}_min"] = round(max(column), 4), round(min(column), 4)
    if power_shares:
        raw["power_share_max"], raw["power_share_min"] = round(max(power_shares), 4), round(min(power_shares), 4)
    for quantity, digits in (("gr_engine_active", 4), ("temp_c", 1)):
        value = _mean(_column(gpus, quantity))
        if value is not None:
            raw[quantity] = round(value, digits)
    bandwidth = _column(gpus, "nvlink_bandwidth_total")
    if bandwidth:
        raw["nvlink_bandwidth_total"] = round(sum(bandwidth), 1)
    return raw


def gpu_metrics(samples: Sequence[TelemetrySample], start_ns: int, end_ns: int) -> GpuMetrics | None:
    """The GPU figures over ``[start_ns, end_ns]`` (see the module docstring); None without GPU data.

    DCGM exporters' samples when there are any, else local NVML readings (``telemetry.gpu``: the same
    quantity names, without the profiling counters); ``source`` says which."""
    dcgm = [s for s in samples if s.source == SOURCE_DCGM]
    source = SOURCE_DCGM if dcgm else "nvml"
    if not dcgm:
        dcgm = [s for s in samples if s.source == SOURCE_NVML]
    per_gpu_series = _per_gpu_series(dcgm)
    per_gpu = _per_gpu_means(per_gpu_series, start_ns, end_ns)
    if not per_gpu:
        return None
    gpus = list(per_gpu.values())
    power_shares = _shares(gpus, "power_w", "power_limit_w")
    util = _mean(_column(gpus, "util_pct"))
    energy = total_energy((per_gpu_series[gpu] for gpu in per_gpu), start_ns, end_ns)
    return GpuMetrics(
        gpus=len(per_gpu),
        nodes=len({node for node, _ in per_gpu}),
        power_w_mean=_r(_mean(_column(gpus, "power_w")), 1),
        power_limit_w=_r(_mean(_column(gpus, "power_limit_w")), 1),
        power_share=_r(_mean(power_shares), 4),
        sm_active=_r(_mean(_column(gpus, "sm_active")), 4),
        sm_occupancy=_r(_mean(_column(gpus, "sm_occupancy")), 4),
        tensor_active=_r(_mean(_column(gpus, "tensor_active")), 4),
        dram_active=_r(_mean(_column(gpus, "dram_active")), 4),
        gpu_util=None if util is None else round(util / 100.0, 4),
        fb_used_share=_r(_mean(_fb_shares(gpus)), 4),
        pcie_bytes_per_s=_rate(gpus, "pcie"),
        nvlink_bytes_per_s=_rate(gpus, "nvlink"),
        samples=sum(1 for s in dcgm if start_ns <= s.t_ns <= end_ns),
        raw=_raw(gpus, power_shares),
        source=source,
        sm_clock_mhz=_r(_mean(_column(gpus, "sm_clock_mhz")), 1),
        sm_clock_max_mhz=_r(_mean(_column(gpus, "sm_clock_max_mhz")), 1),
        sm_clock_share=_r(_mean(_shares(gpus, "sm_clock_mhz", "sm_clock_max_mhz")), 4),
        energy_j=None if energy is None else round(energy.joules, 3),
        energy_source=None if energy is None else energy.source,
    )


# -- evidence for the verdict ---------------------------------------------------------------------

State = Literal["idle", "some", "busy"]


@dataclass(frozen=True)
class _Activity:
    value: float
    label: str
    proves_busy: bool   # only SM activity shows saturation; engine activity and utilisation show idleness


def _pct(value: float, saturated: float = 2.0) -> str:
    return "~100 %" if value >= saturated else f"{value * 100:.0f} %"


def _activity(m: GpuMetrics) -> _Activity | None:
    if m.sm_active is not None:
        return _Activity(m.sm_active, "SM activity", True)
    if "gr_engine_active" in m.raw:
        return _Activity(m.raw["gr_engine_active"], "graphics-engine activity", False)
    if m.gpu_util is not None:
        return _Activity(m.gpu_util, "GPU utilisation", False)
    return None


def _state(m: GpuMetrics) -> State | None:
    """How loaded the GPUs were: idle (clear headroom), some, or busy (near saturation)."""
    act, power, dram = _activity(m), m.power_share, m.dram_active
    if act is None and power is None:
        return None
    if ((act is not None and act.proves_busy and act.value >= SM_BUSY) or (power or 0.0) >= POWER_CAPPED
            or (dram or 0.0) >= DRAM_BUSY):
        return "busy"
    if (act is None or act.value < SM_IDLE) and (power is None or power < POWER_LOW):
        return "idle"
    return "some"


def _clocks(m: GpuMetrics) -> tuple[float | None, float | None]:
    """The mean SM clock and its maximum (MHz); results saved before they were fields kept them in ``raw``."""
    return (m.sm_clock_mhz if m.sm_clock_mhz is not None else m.raw.get("sm_clock_mhz"),
            m.sm_clock_max_mhz if m.sm_clock_max_mhz is not None else m.raw.get("sm_clock_max_mhz"))


def _clock_share(m: GpuMetrics) -> float | None:
    if m.sm_clock_share is not None:
        return m.sm_clock_share
    clock, top = _clocks(m)
    return clock / top if clock is not None and top else None


Bound = Literal["free", "edge", "power", "other", "throttled", "unthrottled"]

_BOUND_TEXT: dict[Bound, str] = {
    "free": "not power- or thermal-bound",
    "edge": "at the edge of the power limit, not yet throttled",
    "power": "power-bound, the driver lowers clocks to stay under the limit (throttled)",
    "other": "clocks held down by something other than power (temperature, a clock cap such as nvidia-smi -lgc, "
             "or the GPUs idling between steps)",
    "throttled": "throttled (the power limit is not known, so power and heat cannot be told apart)",
    "unthrottled": "not throttled",
}
_BOUND_TRY: dict[Bound, str] = {
    "power": "raise the GPUs' power limit where the board allows it (nvidia-smi -pl, up to its maximum): they run "
             "at the limit with clocks below their maximum",
    "other": "check the throttle reasons (nvidia-smi -q -d PERFORMANCE): the clocks are below their maximum with "
             "power to spare (cooling, a clock cap)",
}


def bound(m: GpuMetrics) -> Bound | None:
    """What power against its limit and the SM clock against its maximum say (thresholds: module docstring);
    None without the clock share (the power share alone is read by ``_extras``)."""
    power, clock = m.power_share, _clock_share(m)
    if clock is None:
        return None
    at_max = clock >= CLOCK_AT_MAX
    if power is None:
        return "unthrottled" if at_max else "throttled"
    if at_max:
        return "free" if power < POWER_CAPPED else "edge"
    return "power" if power >= POWER_CAPPED else "other"


def headroom(m: GpuMetrics) -> str | None:
    """``GPUs at 39 % of their power limit, SM clock at maximum: not power- or thermal-bound``."""
    kind, clock = bound(m), _clock_share(m)
    if kind is None or clock is None:
        return None
    clock_text = "SM clock at maximum" if clock >= CLOCK_AT_MAX else f"SM clock at {_pct(clock)} of its maximum"
    where = clock_text if m.power_share is None else f"GPUs at {_pct(m.power_share)} of their power limit, {clock_text}"
    return f"{where}: {_BOUND_TEXT[kind]}"


def gpu_suggestions(levels: Sequence[LevelResult], constraint: str) -> list[str]:
    """What to try when a compute or prefill plateau's GPUs are held back by power or clocks."""
    level = plateau_level(levels)
    m = level.gpu_metrics if level is not None else None
    if m is None or constraint not in ("compute", "prefill"):
        return []
    kind = bound(m)
    return [_BOUND_TRY[kind]] if kind in _BOUND_TRY else []


def describe(m: GpuMetrics) -> str | None:
    """What is known of power and activity: ``GPUs at 39 % of their power limit and 30 % SM activity``."""
    parts = []
    if m.power_share is not None:
        parts.append(f"{_pct(m.power_share)} of their power limit")
    act = _activity(m)
    if act is not None:
        parts.append(f"{_pct(act.value, SM_SATURATED if act.proves_busy else 2.0)} {act.label}")
    clock, top = _clocks(m)
    if clock is not None and top:
        parts.append(f"an SM clock of {clock:,.0f} of {top:,.0f} MHz")
    if parts:
        return "GPUs at " + " and ".join(parts)
    return f"GPUs drawing {m.power_w_mean:.0f} W on average" if m.power_w_mean is not None else None


def _tensor(m: GpuMetrics) -> str:
    return f" (tensor pipes {_pct(m.tensor_active)})" if m.tensor_active is not None else ""


def _cap(m: GpuMetrics, desc: str, state: State) -> list[str]:
    tail = {"idle": "raising the cap is safe",
            "some": "the GPUs have some headroom, so a higher cap gains less than in proportion",
            "busy": "the GPUs are close to saturation, so raising the cap gains little"}[state]
    return [f"{desc} while the cap binds: {tail}"]


def _compute(m: GpuMetrics, desc: str, state: State) -> list[str]:
    act, dram = _activity(m), m.dram_active
    bandwidth = dram is not None and dram >= DRAM_BUSY and (m.tensor_active is None or m.tensor_active < TENSOR_BUSY)
    if bandwidth and dram is not None:
        sm = f", SM activity {_pct(m.sm_active, SM_SATURATED)}" if m.sm_active is not None else ""
        return [f"DRAM active {_pct(dram)}{sm}{_tensor(m)}: memory-bandwidth-bound (decode streams the weights "
                "and KV cache)"]
    if act is not None and act.proves_busy and act.value >= SM_BUSY:
        return [f"SM activity {_pct(act.value, SM_SATURATED)}{_tensor(m)}: compute-bound"]
    if act is not None and act.value < SM_IDLE:
        return [f"{act.label} only {_pct(act.value)}: the GPUs are not saturated, so the limit is elsewhere "
                "(scheduling, host overhead, batch size)"]
    if act is not None and not act.proves_busy:
        return [f"{desc}; SM activity is not exported (DCGM_FI_PROF_SM_ACTIVE), so compute saturation is "
                "not confirmed"]
    return [f"{desc}: busy but short of saturation"] if act is not None else [desc]


def _prefill(m: GpuMetrics, desc: str, state: State) -> list[str]:
    if (m.tensor_active or 0.0) >= TENSOR_BUSY or (m.sm_active or 0.0) >= SM_BUSY:
        sm = f"SM activity {_pct(m.sm_active, SM_SATURATED)}" if m.sm_active is not None else "GPUs busy"
        return [f"{sm}{_tensor(m)} while prompts dominate: prefill is compute-bound"]
    if state == "idle":
        return [f"{desc}: prefill does not saturate the GPUs; how prefill chunks are scheduled sets the pace"]
    return [desc]


def _kv(m: GpuMetrics, desc: str, state: State) -> list[str]:
    if state == "busy":
        return [f"{desc} while the KV cache is full: the GPUs are close to saturation too, so more KV cache "
                "alone gains little"]
    return [f"{desc} while the KV cache is full: the GPUs have headroom, so more KV cache memory would raise "
            "throughput"]


def _client(m: GpuMetrics, desc: str, state: State) -> list[str]:
    if state == "busy":
        return [f"{desc}: the GPUs were busy, which does not fit a limit in the client"]
    return [f"{desc}: the GPUs had headroom, consistent with a limit in the client"]


def _unsaturated(m: GpuMetrics, desc: str, state: State) -> list[str]:
    if state == "busy":
        return [f"{desc}: the GPUs are close to saturation, so the plateau should be near"]
    return [f"{desc}: the GPUs had headroom"]


_BY_CONSTRAINT: dict[str, Callable[[GpuMetrics, str, State], list[str]]] = {
    "admission_cap": _cap, "compute": _compute, "prefill": _prefill, "kv_capacity": _kv,
    "load_generator": _client, "not_saturated": _unsaturated,
}


def plateau_level(levels: Sequence[LevelResult]) -> LevelResult | None:
    """The level whose GPU figures speak for the plateau (see the module docstring)."""
    with_gpu = [lv for lv in levels if lv.gpu_metrics is not None]
    chosen = [lv for lv in with_gpu if not lv.level_failed] or with_gpu
    if not chosen:
        return None
    best = max(lv.output_throughput for lv in chosen)
    band = [(i, lv) for i, lv in enumerate(chosen) if lv.output_throughput >= (1.0 - PLATEAU_BAND) * best]
    return max(band, key=lambda item: (item[1].concurrency or 0, item[1].rate or 0.0, item[0]))[1]


def _extras(m: GpuMetrics, constraint: str) -> list[str]:
    out = []
    bound = headroom(m) if constraint in ("compute", "prefill") else None
    if bound is not None:
        out.append(bound)
    elif constraint in ("compute", "prefill") and (m.power_share or 0.0) >= POWER_CAPPED:
        out.append(f"GPUs at {_pct(m.power_share or 0.0)} of their power limit: power-capped, clocks drop "
                   "before the compute runs out")
    busiest = m.raw.get("sm_active_max")
    if m.sm_active is not None and busiest is not None and busiest - m.sm_active >= UNEVEN:
        out.append(f"GPU load is uneven: the busiest GPU at {_pct(busiest)} SM activity against a mean of "
                   f"{_pct(m.sm_active)} (check the tensor- or expert-parallel balance)")
    energy = energy_sentence(m)
    if energy is not None:
        out.append(energy)
    return out


def gpu_evidence(levels: Sequence[LevelResult], constraint: str) -> list[str]:
    """Sentences on what the GPUs showed at the plateau, for a verdict naming ``constraint``.

    Empty when no level has GPU figures. Constraints without a reading of their own (errors, ...) get
    the plain description.
    """
    level = plateau_level(levels)
    m = level.gpu_metrics if level is not None else None
    return [] if m is None else evidence_for(m, constraint)


def evidence_for(m: GpuMetrics, constraint: str) -> list[str]:
    """The sentences ``gpu_evidence`` gives for one level's GPU figures under ``constraint``."""
    desc, state = describe(m), _state(m)
    if desc is None or state is None:
        return []
    explain = _BY_CONSTRAINT.get(constraint)
    main = explain(m, desc, state) if explain is not None else [desc]
    return main + _extras(m, constraint)
