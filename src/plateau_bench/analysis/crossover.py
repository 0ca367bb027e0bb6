"""Throughput curves and where one overtakes another (pure).

A run's curve is its usable closed-loop levels; between measured levels it is interpolated
linearly in ``log2(C)`` (the sweeps double concurrency, so log spacing is what the data was
measured on), never extrapolated. For a pair of curves the difference ``d(C) = a(C) - b(C)`` is
piecewise linear in ``log2(C)`` with breakpoints at either run's levels, so each sign change
between consecutive levels locates a crossover exactly by solving ``d = 0`` on that segment. A lead
that never exceeds the combined noise of the two curves (their 95 % CIs) is a tie, not a lead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import msgspec

from plateau_bench.result import LevelResult


@dataclass(frozen=True)
class Curve:
    """A run's usable levels (measured, not failed, closed-loop), sorted by concurrency."""

    name: str
    levels: tuple[LevelResult, ...]

    @property
    def concurrencies(self) -> list[int]:
        return [lv.concurrency or 0 for lv in self.levels]

    def at(self, c: float, value: str = "output_throughput") -> float | None:
        """``value`` (a LevelResult attribute) at concurrency ``c``, log2-interpolated; None outside."""
        xs = self.concurrencies
        ys = [float(getattr(lv, value)) for lv in self.levels]
        return interpolate_log2(xs, ys, c)


def interpolate_log2(xs: Sequence[float], ys: Sequence[float | None], c: float) -> float | None:
    """Linear interpolation in log2(x) over sorted ``xs``; None outside the range or at a gap."""
    if not xs or c < xs[0] or c > xs[-1]:
        return None
    for i, x in enumerate(xs):
        if c == x:
            return ys[i]
        if c < x:
            lo, hi = ys[i - 1], ys[i]
            if lo is None or hi is None:
                return None
            t = (math.log2(c) - math.log2(xs[i - 1])) / (math.log2(x) - math.log2(xs[i - 1]))
            return lo + t * (hi - lo)
    return None


# -- crossovers ------------------------------------------------------------------------------------

class Crossover(msgspec.Struct, frozen=True, kw_only=True):
    runs: tuple[str, str]         # the pair, in the order the runs were given
    leader_below: str             # ahead at lower concurrency
    leader_above: str             # ahead at higher concurrency (the one that overtakes)
    concurrency: float
    bracket: tuple[int, int]      # measured levels (of either run) around it
    throughput: float             # both runs' (interpolated) output tok/s there
    per_user_tok_s: float         # throughput / concurrency


class PairResult(msgspec.Struct, frozen=True, kw_only=True):
    runs: tuple[str, str]
    common_range: tuple[int, int] | None
    crossovers: tuple[Crossover, ...]
    leader_low: str | None        # ahead at the bottom of the common range (None: tied)
    leader_high: str | None       # ahead at the top of it

    @property
    def first(self) -> str:
        return self.runs[0]

    @property
    def second(self) -> str:
        return self.runs[1]


def _sign(d: float) -> int:
    return (d > 0) - (d < 0)


def _noise(a: Curve, b: Curve, c: float) -> float:
    """Combined absolute half-width of the two curves' 95 % CIs at ``c`` (0 when unknown)."""
    total = 0.0
    for cv in (a, b):
        thr = cv.at(c) or 0.0
        ci = interpolate_log2(cv.concurrencies, [lv.throughput_ci_rel or 0.0 for lv in cv.levels], c) or 0.0
        total += (thr * ci) ** 2
    return math.sqrt(total)


def find_crossovers(a: Curve, b: Curve) -> PairResult:
    """Every concurrency where one curve overtakes the other inside their common range."""
    pair = (a.name, b.name)
    lo = max(a.concurrencies[0], b.concurrencies[0])
    hi = min(a.concurrencies[-1], b.concurrencies[-1])
    if lo > hi:
        return PairResult(runs=pair, common_range=None, crossovers=(), leader_low=None, leader_high=None)
    grid = sorted({c for c in a.concurrencies + b.concurrencies if lo <= c <= hi})
    diff = [(a.at(c) or 0.0) - (b.at(c) or 0.0) for c in grid]
    significant = [abs(d) > _noise(a, b, c) for c, d in zip(grid, diff, strict=True)]
    # Excursions: maximal runs of grid points with one nonzero sign; crossings sit between them.
    excursions: list[tuple[int, list[int]]] = []        # (sign, grid indices)
    for i, d in enumerate(diff):
        s = _sign(d)
        if s == 0:
            continue
        if excursions and excursions[-1][0] == s:
            excursions[-1][1].append(i)
        else:
            excursions.append((s, [i]))
    # A lead that never rises above the noise is a tie: merge it away with its neighbours.
    real = [(s, idx) for s, idx in excursions if any(significant[i] for i in idx)]
    merged: list[tuple[int, list[int]]] = []
    for s, idx in real:
        if merged and merged[-1][0] == s:
            merged[-1][1].extend(idx)
        else:
            merged.append((s, list(idx)))
    names = {1: a.name, -1: b.name}
    crossings: list[Crossover] = []
    for (s0, idx0), (_, idx1) in pairwise(merged):
        i, j = idx0[-1], idx1[0]
        # d = 0 on the first segment between the two leads where its sign changes (or at a zero level).
        k = next((m for m in range(i, j) if _sign(diff[m]) != _sign(diff[m + 1])), i)
        if diff[k + 1] == 0:
            c, bracket = float(grid[k + 1]), (grid[k + 1], grid[k + 1])
        else:
            x0, x1 = math.log2(grid[k]), math.log2(grid[k + 1])
            t = diff[k] / (diff[k] - diff[k + 1])
            c, bracket = 2 ** (x0 + t * (x1 - x0)), (grid[k], grid[k + 1])
        thr = a.at(c) or 0.0
        crossings.append(Crossover(runs=pair, leader_below=names[s0], leader_above=names[-s0], concurrency=c,
                                   bracket=bracket, throughput=thr, per_user_tok_s=thr / c))
    return PairResult(runs=pair, common_range=(lo, hi), crossovers=tuple(crossings),
                      leader_low=names[merged[0][0]] if merged else None,
                      leader_high=names[merged[-1][0]] if merged else None)
