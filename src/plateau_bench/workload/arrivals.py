"""Arrival schedules for open-loop (``--rate``) levels.

Inter-arrival gaps are drawn from a gamma distribution with shape ``k = burstiness`` and scale
``1 / (rate * k)``: the mean gap is always ``1 / rate``, and the coefficient of variation is
``1 / sqrt(k)``. ``k = 1`` is the exponential distribution, i.e. a Poisson process; ``k < 1`` is
burstier, ``k > 1`` more regular. This is the parameterisation of vLLM's ``--burstiness``.

The first request is sent at offset 0 (the level starts with an arrival rather than an idle gap);
every later offset is the running sum of the gaps. Schedules are pure functions of their
arguments: the same seed gives the same offsets.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from plateau_bench.units import NS

_CHUNK = 4096


def _gaps_s(rng: np.random.Generator, rate: float, burstiness: float, n: int) -> np.ndarray:
    if burstiness == 1.0:
        return rng.exponential(1.0 / rate, n)
    return rng.gamma(burstiness, 1.0 / (rate * burstiness), n)


def _check(rate: float, burstiness: float) -> None:
    if not rate > 0:
        raise ValueError(f"rate must be > 0 (got {rate})")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (got {burstiness})")


def arrival_offsets_ns(n: int, rate: float, *, burstiness: float = 1.0, seed: int = 0) -> list[int]:
    """The send offsets (ns from the start of the level) of ``n`` arrivals, first at 0."""
    _check(rate, burstiness)
    if n <= 0:
        return []
    rng = np.random.default_rng(seed)
    gaps = _gaps_s(rng, rate, burstiness, n - 1)
    offsets = np.concatenate(([0.0], np.cumsum(gaps)))
    return [int(x) for x in np.rint(offsets * NS)]


def iter_arrival_offsets_ns(rate: float, *, burstiness: float = 1.0, seed: int = 0) -> Iterator[int]:
    """An endless schedule for duration-bounded levels; its prefix equals ``arrival_offsets_ns``.

    Gaps are drawn in chunks from the same generator stream and summed in the same order, so the
    first ``n`` values are identical to ``arrival_offsets_ns(n, ...)``.
    """
    _check(rate, burstiness)
    rng = np.random.default_rng(seed)
    t_s = 0.0
    yield 0
    while True:
        for gap in _gaps_s(rng, rate, burstiness, _CHUNK):
            t_s += float(gap)
            yield round(t_s * NS)
