"""Throughput curves and where one overtakes another (pure).

A run's curve is its usable closed-loop levels; between measured levels it is interpolated
linearly in ``log2(C)`` (the sweeps double concurrency, so log spacing is what the data was
measured on), never extrapolated. For a pair of curves the difference ``d(C) = a(C) - b(C)`` is
piecewise linear in ``log2(C)`` with breakpoints at either run's levels, so each sign change
between consecutive levels locates a crossover exactly by solving ``d = 0`` on that segment. A lead
that never exceeds the combined noise of the two curves is a tie, not a lead; two curves without a lead
anywhere are not distinguishable at any concurrency.

The noise: with repeats (``--repeat``, two or more that stand on every level of both curves) the
between-run 95 % intervals of the mean tok/s, and the curves are the repeats' means; otherwise each
level's own 95 % CI on its tok/s. A crossover's interval is where the lead is within that noise around
it: from where the lead it ends stops being real to where the next one starts to be (``|d|`` equal to
the combined half-width, interpolated in ``log2(C)`` like the curves), so the crossing may be anywhere
inside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import msgspec

from plateau_bench.result import LevelResult
from plateau_bench.result_parts import Interval


@dataclass(frozen=True)
class Curve:
    """A run's usable levels (measured, not failed, closed-loop), sorted by concurrency."""

    name: str
    levels: tuple[LevelResult, ...]

    @property
    def concurrencies(self) -> list[int]:
        return [lv.concurrency or 0 for lv in self.levels]

    @property
    def repeated(self) -> bool:
        """Every level has a between-repeat interval on its tok/s."""
        return all(_repeat_interval(lv) is not None for lv in self.levels)

    def at(self, c: float, value: str = "output_throughput") -> float | None:
        """``value`` (a LevelResult attribute) at concurrency ``c``, log2-interpolated; None outside.
        Output tok/s is the repeats' mean where every level has repeats."""
        xs = self.concurrencies
        if value == "output_throughput" and self.repeated:
            return interpolate_log2(xs, [_repeat_interval(lv).mean for lv in self.levels], c)  # type: ignore[union-attr]
        ys = [float(getattr(lv, value)) for lv in self.levels]
        return interpolate_log2(xs, ys, c)

    def half_width(self, c: float, repeats: bool) -> float:
        """The 95 % half-width of tok/s at ``c``: between repeats, or the levels' own CI (0 when unknown)."""
        if repeats:
            widths = [_half(_repeat_interval(lv)) for lv in self.levels]
        else:
            widths = [lv.output_throughput * (lv.throughput_ci_rel or 0.0) for lv in self.levels]
        return interpolate_log2(self.concurrencies, widths, c) or 0.0


def _repeat_interval(level: LevelResult) -> Interval | None:
    stats = level.repeat_stats
    interval = stats.output_throughput if stats is not None else None
    return interval if interval is not None and interval.low is not None and interval.high is not None else None


def _half(interval: Interval | None) -> float:
    if interval is None or interval.low is None or interval.high is None:
        return 0.0
    return (interval.high - interval.low) / 2


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
    # Where neither leads beyond the noise around it (module docstring); None when no level states its noise.
    interval: tuple[float, float] | None = None


class PairResult(msgspec.Struct, frozen=True, kw_only=True):
    runs: tuple[str, str]
    common_range: tuple[int, int] | None
    crossovers: tuple[Crossover, ...]
    leader_low: str | None        # ahead at the bottom of the common range (None: tied)
    leader_high: str | None       # ahead at the top of it
    noise: str = "level CIs"      # what a lead had to exceed: "level CIs" or "N repeats"

    @property
    def first(self) -> str:
        return self.runs[0]

    @property
    def second(self) -> str:
        return self.runs[1]


def _sign(d: float) -> int:
    return (d > 0) - (d < 0)


def _noise(a: Curve, b: Curve, c: float, repeats: bool) -> float:
    """Combined absolute half-width of the two curves' 95 % intervals at ``c`` (0 when unknown)."""
    return math.hypot(a.half_width(c, repeats), b.half_width(c, repeats))


def _noise_name(a: Curve, b: Curve, repeats: bool) -> str:
    if not repeats:
        return "level CIs"
    fewest = min(_repeat_interval(lv).n for cv in (a, b) for lv in cv.levels)  # type: ignore[union-attr]
    return f"{fewest} repeats"


def _edge(grid: Sequence[int], lead: Sequence[float], real: int, step: int) -> float:
    """Where a real lead (``lead``: the leader's margin over the noise, > 0 at ``real``) stops being real,
    going from ``real`` by ``step`` (+1 towards higher C, -1 towards lower)."""
    i = real
    while 0 <= i + step < len(grid) and lead[i + step] > 0:
        i += step
    j = i + step
    if not 0 <= j < len(grid):
        return float(grid[i])
    x0, x1 = math.log2(grid[i]), math.log2(grid[j])
    t = lead[i] / (lead[i] - lead[j])
    return float(2 ** (x0 + t * (x1 - x0)))


def find_crossovers(a: Curve, b: Curve) -> PairResult:
    """Every concurrency where one curve overtakes the other inside their common range."""
    pair = (a.name, b.name)
    lo = max(a.concurrencies[0], b.concurrencies[0])
    hi = min(a.concurrencies[-1], b.concurrencies[-1])
    if lo > hi:
        return PairResult(runs=pair, common_range=None, crossovers=(), leader_low=None, leader_high=None)
    grid = sorted({c for c in a.concurrencies + b.concurrencies if lo <= c <= hi})
    repeats = a.repeated and b.repeated
    diff = [(a.at(c) or 0.0) - (b.at(c) or 0.0) for c in grid]
    noise = [_noise(a, b, c, repeats) for c in grid]
    significant = [abs(d) > n for d, n in zip(diff, noise, strict=True)]
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
        below = [s0 * d - n for d, n in zip(diff, noise, strict=True)]    # > 0: the lower leader's lead is real
        above = [-s0 * d - n for d, n in zip(diff, noise, strict=True)]
        low = _edge(grid, below, max(m for m in idx0 if significant[m]), +1)
        high = _edge(grid, above, min(m for m in idx1 if significant[m]), -1)
        crossings.append(Crossover(runs=pair, leader_below=names[s0], leader_above=names[-s0], concurrency=c,
                                   bracket=bracket, throughput=thr, per_user_tok_s=thr / c,
                                   interval=(min(low, c), max(high, c)) if any(noise) else None))
    return PairResult(runs=pair, common_range=(lo, hi), crossovers=tuple(crossings),
                      leader_low=names[merged[0][0]] if merged else None,
                      leader_high=names[merged[-1][0]] if merged else None, noise=_noise_name(a, b, repeats))
