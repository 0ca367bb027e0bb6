"""Server histograms over a level's window: mean and p99 of what finished inside it (pure, no I/O).

A Prometheus histogram is cumulative since the server started: per finite upper bound ``le`` the count
of observations at or below it, plus the total ``count`` and ``sum``. Over a window ``[a, b]`` the
observations made inside it are the differences of those counters, read as ``telemetry.summary`` reads
counters: made monotone first (a ``count`` that falls means the server restarted; every component then
counts on from the values before the fall), interpolated linearly between scrapes, with
``a = max(start, first scrape)`` and ``b = min(end, last scrape)``. Then

    mean = Δsum / Δcount
    p99  = the bucket holding rank 0.99 * Δcount, interpolated linearly inside it (Prometheus'
           ``histogram_quantile``: the first bucket starts at 0); when that rank lies in the +Inf
           bucket the answer is only "above the last finite bound", and says so (``p99_above``). As no
           observation is negative, at least m = Δcount - ceil(0.99 Δcount) + 1 of them reach the p99,
           so it is at most Δsum / m: a coarse first bucket cannot put it above what the sum allows.

With fewer than ``MIN_OBSERVATIONS`` observations in the window both are unknown (None), not 0: a
mean of two requests is not the level's, and a p99 of four is their maximum's bucket.

The window's observations are the requests that *finished* in it (vLLM observes at the end of a
request), which in a steady state stand for those that started in it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from plateau_bench.records import HistogramSnapshot, TelemetrySample

MIN_OBSERVATIONS = 5
QUANTILE = 0.99

TimedSnapshot = tuple[int, HistogramSnapshot]


@dataclass(frozen=True)
class WindowHistogram:
    """One histogram over a window: the observations in it, their mean and p99 (None when too few)."""

    count: float
    mean: float | None = None
    p99: float | None = None
    p99_above: bool = False   # p99 lies in the +Inf bucket: it is above ``p99``, the last finite bound


def _vector(s: HistogramSnapshot) -> list[float]:
    return [*s.cumulative, s.count, s.sum]


def _corrected(points: Sequence[TimedSnapshot]) -> list[tuple[int, list[float]]] | None:
    """(t, [cumulative..., count, sum]) made monotone across restarts; None when the bounds change."""
    bounds = points[0][1].le
    out: list[tuple[int, list[float]]] = []
    offset = [0.0] * (len(bounds) + 2)
    previous: list[float] | None = None
    for t, snap in points:
        if snap.le != bounds:
            return None
        current = _vector(snap)
        if previous is not None and current[-2] < previous[-2]:   # count fell: a restart
            offset = [o + p for o, p in zip(offset, previous, strict=True)]
        previous = current
        out.append((t, [o + c for o, c in zip(offset, current, strict=True)]))
    return out


def _at(series: Sequence[tuple[int, list[float]]], t: int) -> list[float]:
    if t <= series[0][0]:
        return series[0][1]
    for (t0, v0), (t1, v1) in itertools.pairwise(series):
        if t <= t1:
            w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return [x + (y - x) * w for x, y in zip(v0, v1, strict=True)]
    return series[-1][1]


def histogram_delta(points: Sequence[TimedSnapshot], start_ns: int, end_ns: int) -> HistogramSnapshot | None:
    """The observations made inside ``[start_ns, end_ns]``, as a histogram of their own.

    ``points`` are (t_ns, snapshot) in time order. None when fewer than two scrapes, when they do not
    overlap the window, or when the server changed its buckets between them.
    """
    if len(points) < 2:
        return None
    series = _corrected(points)
    if series is None:
        return None
    a, b = max(start_ns, series[0][0]), min(end_ns, series[-1][0])
    if b <= a:
        return None
    delta = [max(0.0, y - x) for x, y in zip(_at(series, a), _at(series, b), strict=True)]
    cumulative: list[float] = []
    for value in delta[:-2]:   # interpolation cannot make a cumulative count fall; rounding can
        cumulative.append(max(value, cumulative[-1] if cumulative else 0.0))
    return HistogramSnapshot(le=list(points[0][1].le), cumulative=cumulative, count=delta[-2], sum=delta[-1])


def quantile(h: HistogramSnapshot, q: float) -> tuple[float, bool] | None:
    """The ``q`` quantile of ``h`` and whether it lies in the +Inf bucket (then: above the value given)."""
    if h.count <= 0:
        return None
    rank = q * h.count
    below, lower = 0.0, 0.0
    for bound, cumulative in zip(h.le, h.cumulative, strict=True):
        if cumulative >= rank and cumulative > below:
            if bound <= 0:
                return bound, False
            return lower + (bound - lower) * (rank - below) / (cumulative - below), False
        below, lower = cumulative, bound
    return (h.le[-1], True) if h.le else None


def window_histogram(points: Sequence[TimedSnapshot], start_ns: int, end_ns: int) -> WindowHistogram | None:
    """Mean and p99 over the window (module docstring); None when the window cannot be measured."""
    delta = histogram_delta(points, start_ns, end_ns)
    if delta is None:
        return None
    if delta.count < MIN_OBSERVATIONS:
        return WindowHistogram(count=delta.count)
    p99 = quantile(delta, QUANTILE)
    if p99 is None:
        return WindowHistogram(count=delta.count, mean=delta.sum / delta.count)
    value, above = p99
    if not above:
        value = min(value, _largest_possible(delta, QUANTILE))
    return WindowHistogram(count=delta.count, mean=delta.sum / delta.count, p99=value, p99_above=above)


def _largest_possible(h: HistogramSnapshot, q: float) -> float:
    """The largest the ``q`` quantile can be given the sum: at least ``m`` observations are at or above it
    and none is negative (durations, token counts), so it is at most sum / m. Interpolating inside a
    coarse bucket (vLLM's first queue bucket is 0-0.3 s) can place it far above what the sum allows."""
    at_or_above = max(1.0, h.count - math.ceil(q * h.count) + 1)
    return h.sum / at_or_above


def window_histograms(samples: Sequence[TelemetrySample], start_ns: int,
                      end_ns: int) -> dict[str, WindowHistogram | None]:
    """Every histogram the samples carry, over the window; None for one whose window cannot be measured."""
    series: dict[str, list[TimedSnapshot]] = {}
    for sample in sorted(samples, key=lambda s: s.t_ns):
        for key, snapshot in sample.histograms.items():
            series.setdefault(key, []).append((sample.t_ns, snapshot))
    return {key: window_histogram(points, start_ns, end_ns) for key, points in series.items()}
