"""The SLO boundary: the largest load that meets every SLO, which SLO binds, and how it gives way.

The search (``sweep.plan.SloSearchPlan``) doubles the load until a level violates an SLO, then bisects
between the last level that met every bound (``lo``) and the first that did not (``hi``) until they
are within ``resolution`` of each other (or one concurrency apart). This module reads the measured
levels only:

* **boundary** = the largest measured load meeting every SLO; it lies in ``[lo, hi)``, the interval
  reported (bisection narrows it; it is a bracket of measured levels, not a statistical estimate).
* **binding SLO** = the bound with the highest value/limit ratio at ``hi`` (the one the load breaks first).
* **cliff or smooth**: with the binding statistic ``v`` and loads ``x``, the boundary is a *cliff* when
  ``v(hi) / v(lo)`` exceeds ``CLIFF_FACTOR`` times ``x(hi) / x(lo)`` (latency jumps far faster than the
  load grows: a queue forms, a cap is crossed), else *smooth*.
* **goodput** at the boundary (DistServe): requests per second meeting every SLO, per request, at ``lo``.
"""

from __future__ import annotations

from collections.abc import Sequence

from plateau_bench.analysis.slo import Slo, level_meets
from plateau_bench.result import LevelResult, SloBoundary

CLIFF_FACTOR = 2.0


def load_of(level: LevelResult) -> float:
    """The level's load on the searched axis: its concurrency, or its offered rate in open loop."""
    return float(level.rate if level.mode == "rate" and level.rate is not None else level.concurrency or 0)


def bracket(levels: Sequence[LevelResult], slos: Sequence[Slo]) -> tuple[LevelResult | None, LevelResult | None]:
    """(largest meeting level below the first violation, smallest violating level above it)."""
    ordered = sorted((lv for lv in levels if load_of(lv) > 0 and not lv.level_failed), key=load_of)
    hi = next((lv for lv in ordered if not level_meets(lv, slos)), None)
    below = [lv for lv in ordered if hi is None or load_of(lv) < load_of(hi)]
    lo = next((lv for lv in reversed(below) if level_meets(lv, slos)), None)
    return lo, hi


def _ratio(slo: Slo, level: LevelResult) -> float:
    v = slo.value(level)
    return float("inf") if v is None else v / slo.limit_ms


def slo_boundary(levels: Sequence[LevelResult], slos: Sequence[Slo], find: str) -> SloBoundary:
    lo, hi = bracket(levels, slos)
    if hi is None:
        return SloBoundary(find=find, bounds=[s.describe() for s in slos], value=load_of(lo) if lo else None,
                           reached=False, goodput_rps=lo.goodput_rps if lo else None)
    binding = max(slos, key=lambda s: _ratio(s, hi))
    shape = None
    if lo is not None:
        v_lo, v_hi = binding.value(lo), binding.value(hi)
        if v_lo and v_hi:
            shape = "cliff" if v_hi / v_lo > CLIFF_FACTOR * load_of(hi) / load_of(lo) else "smooth"
    return SloBoundary(
        find=find, bounds=[s.describe() for s in slos], value=load_of(lo) if lo else None, reached=True,
        interval=(load_of(lo) if lo else 0.0, load_of(hi)), binding=binding.describe(),
        binding_at_boundary_ms=binding.value(lo) if lo else None, binding_beyond_ms=binding.value(hi),
        shape=shape, goodput_rps=lo.goodput_rps if lo else None,
        throughput=lo.output_throughput if lo else None)
