"""Telemetry samples reduced to one flat dict per level: pure functions, no I/O.

Gauges (running, waiting, kv_usage, ...) are step functions: a scraped value holds from its
sample until the next sample (the scraper cannot know what happened in between, and a step is
what Prometheus' own "last value" semantics assume). Over the window ``[start_ns, end_ns]``:

    mean = integral of the step function over the covered part of the window / covered length

The value in force when the window opens (the last sample before ``start_ns``) counts from the
window start; the last sample holds to the window end. A window with no sample at or before its
end has no value. ``min``/``max`` are over the values in force at some moment of the window.

Counters (tokens, preemptions) are made monotone first: a decrease means the server restarted,
and the new value is counted as growth from zero (Prometheus ``increase()`` semantics). The
corrected series is interpolated linearly between samples, and

    delta = C(b) - C(a),  rate = delta / (b - a),  a = max(start, first sample), b = min(end, last sample)

so samples on either side of a window boundary are split in proportion instead of being
attributed wholly to one level.

Static quantities (cap, kv_capacity_tokens) take the last value known at the window end.

Keys of the result: ``<gauge>_mean``, ``<gauge>_max``, ``<gauge>_min``, ``<counter>_delta``,
``<counter>_rate`` (per second), ``<static>``, and ``samples`` (samples inside the window).
For llama.cpp, ``busy_slots_per_decode_window`` = busy slots / decode calls over the window: the
mean decoding batch, where the server's own gauge averages over its whole lifetime.
``prefix_cache_hit_rate``: the share of prompt tokens the server found cached (``prefix_cache_hit_rate``).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from plateau_bench.records import TelemetrySample
from plateau_bench.telemetry.engines import kind_of
from plateau_bench.units import NS

Point = tuple[int, float]


@dataclass(frozen=True)
class GaugeStats:
    mean: float
    min: float
    max: float


@dataclass(frozen=True)
class TelemetrySummary:
    """One level's telemetry: the engine it came from and the flat values for LevelResult.telemetry."""

    engine: str | None
    values: dict[str, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.values or self.values.keys() == {"samples"}


def gauge_stats(points: Sequence[Point], start_ns: int, end_ns: int) -> GaugeStats | None:
    """Time-weighted mean, min and max of a step function over ``[start_ns, end_ns]``.

    ``points`` are (t_ns, value) in time order.
    """
    integral = 0.0
    covered = 0
    seen: list[float] = []
    for i, (t, v) in enumerate(points):
        next_t = points[i + 1][0] if i + 1 < len(points) else None
        lo = max(t, start_ns)
        hi = end_ns if next_t is None else min(next_t, end_ns)
        if hi > lo:
            integral += v * (hi - lo)
            covered += hi - lo
            seen.append(v)
    if covered > 0:
        return GaugeStats(integral / covered, min(seen), max(seen))
    # A zero-length window (or samples only at its end): the value in force at its end.
    held = [v for t, v in points if t <= end_ns]
    if not held:
        return None
    return GaugeStats(held[-1], held[-1], held[-1])


def time_weighted_mean(points: Sequence[Point], start_ns: int, end_ns: int) -> float | None:
    stats = gauge_stats(points, start_ns, end_ns)
    return None if stats is None else stats.mean


def reset_corrected(points: Sequence[Point]) -> list[Point]:
    """A counter series made monotone: after a drop (restart) the new value counts from zero."""
    out: list[Point] = []
    total = 0.0
    prev: float | None = None
    for t, v in points:
        if prev is None:
            total = v
        else:
            total += v - prev if v >= prev else v
        prev = v
        out.append((t, total))
    return out


def interpolate(points: Sequence[Point], t: int) -> float:
    """The series linearly interpolated at ``t``, held at its ends outside the samples."""
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(points):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def counter_delta(points: Sequence[Point], start_ns: int, end_ns: int) -> tuple[float, int] | None:
    """Growth of a counter over the part of ``[start_ns, end_ns]`` its samples cover, and that span (ns)."""
    if len(points) < 2:
        return None
    corrected = reset_corrected(points)
    a = max(start_ns, corrected[0][0])
    b = min(end_ns, corrected[-1][0])
    if b <= a:
        return None
    return interpolate(corrected, b) - interpolate(corrected, a), b - a


def _static_value(points: Sequence[Point], end_ns: int) -> float | None:
    if not points:
        return None
    before = [v for t, v in points if t <= end_ns]
    return before[-1] if before else points[0][1]


def series(samples: Sequence[TelemetrySample]) -> dict[str, list[Point]]:
    """Per-key (t_ns, value) series in time order; a sample lacking a key simply has no point."""
    out: dict[str, list[Point]] = {}
    for s in sorted(samples, key=lambda x: x.t_ns):
        for source in (s.values, s.raw):
            for key, v in source.items():
                out.setdefault(key, []).append((s.t_ns, v))
    return out


def summarize(samples: Sequence[TelemetrySample], start_ns: int, end_ns: int) -> TelemetrySummary:
    """Reduce samples to the flat dict stored on ``LevelResult.telemetry`` (see module docstring)."""
    if not samples:
        return TelemetrySummary(engine=None)
    engine = next((s.engine for s in samples if s.engine), None)
    values: dict[str, float] = {}
    for key, points in series(samples).items():
        kind = kind_of(key)
        if kind == "static":
            static = _static_value(points, end_ns)
            if static is not None:
                values[key] = static
        elif kind == "counter":
            counted = counter_delta(points, start_ns, end_ns)
            if counted is not None:
                delta, span_ns = counted
                values[f"{key}_delta"] = delta
                values[f"{key}_rate"] = delta / (span_ns / NS)
        else:
            stats = gauge_stats(points, start_ns, end_ns)
            if stats is not None:
                values.update({f"{key}_mean": stats.mean, f"{key}_max": stats.max, f"{key}_min": stats.min})
    calls = values.get("decode_calls_delta")
    if calls and "busy_slots_total_delta" in values:
        values["busy_slots_per_decode_window"] = values["busy_slots_total_delta"] / calls
    hit_rate = prefix_cache_hit_rate(values)
    if hit_rate is not None:
        values["prefix_cache_hit_rate"] = hit_rate
    values["samples"] = float(sum(1 for s in samples if start_ns <= s.t_ns <= end_ns))
    return TelemetrySummary(engine=engine, values=values)


def prefix_cache_hit_rate(values: dict[str, float]) -> float | None:
    """The share of prompt tokens found in the prefix cache over the window.

    vLLM: cached tokens over looked-up tokens (``prefix_cache_hits`` / ``prefix_cache_queries``, both
    counters); SGLang: its ``cache_hit_rate`` gauge, time-averaged. llama.cpp states none on
    ``/metrics`` (see ``analysis.level`` for the estimate from its evaluated-token counter).
    """
    queries = values.get("prefix_cache_queries_delta")
    if queries:
        return min(1.0, max(0.0, values.get("prefix_cache_hits_delta", 0.0) / queries))
    sglang = values.get("cache_hit_rate_mean")
    return min(1.0, max(0.0, sglang)) if sglang is not None else None
