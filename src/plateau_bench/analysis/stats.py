"""Small statistics helpers shared by the analysis modules."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from plateau_bench.result import Latency

FloatArray = npt.NDArray[np.float64]

# Two-sided 95 % Student-t quantiles, df = 1..30; beyond 30 the normal value is close enough.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t95(df: int) -> float:
    """Two-sided 95 % Student-t quantile for ``df`` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.96


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> float:
    """Inverted-CDF quantile of ``values`` where each value counts ``weights`` times."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    cw = np.cumsum(weights[order])
    target = q * cw[-1]
    idx = int(np.searchsorted(cw, target, side="left"))
    return float(v[min(idx, len(v) - 1)])


def summarize(values_ms: Sequence[float] | FloatArray, weights: FloatArray | None = None) -> Latency:
    """Mean, p50, p90, p99 and max of a latency sample (ms). Empty input gives an empty summary.

    Unweighted percentiles use linear interpolation (numpy's default, as vLLM's and SGLang's
    benchmarks do). Weighted ones (ITL, where a chunk of k tokens counts k times) use the
    inverted CDF.
    """
    arr = np.asarray(values_ms, dtype=np.float64)
    if arr.size == 0:
        return Latency()
    if weights is None:
        p50, p90, p99 = np.percentile(arr, [50, 90, 99])
        return Latency(
            mean=float(arr.mean()), p50=float(p50), p90=float(p90), p99=float(p99),
            max=float(arr.max()), count=int(arr.size),
        )
    w = np.asarray(weights, dtype=np.float64)
    total = float(w.sum())
    return Latency(
        mean=float((arr * w).sum() / total),
        p50=weighted_quantile(arr, w, 0.50),
        p90=weighted_quantile(arr, w, 0.90),
        p99=weighted_quantile(arr, w, 0.99),
        max=float(arr.max()),
        count=round(total),
    )


def batch_means_ci_rel(batch_values: Sequence[float]) -> float | None:
    """Relative half-width of the 95 % CI of the mean of batch means (None if < 3 batches or mean 0)."""
    arr = np.asarray(batch_values, dtype=np.float64)
    n = arr.size
    if n < 3:
        return None
    mean = float(arr.mean())
    if mean <= 0:
        return None
    half = t95(n - 1) * float(arr.std(ddof=1)) / math.sqrt(n)
    return half / mean
