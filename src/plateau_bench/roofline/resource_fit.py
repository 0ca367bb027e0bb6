"""One measured figure calibrates one resource: the efficiencies a twin takes from measured decode steps.

An engine reaches a different fraction of each roofline resource (``Efficiency``), and one measurement
exercises mostly one of them: a single stream's TPOT is a memory-bound step (the weights read once per
token), a large batch's step is mostly compute. Scaling every resource by the factor read off one point
(``fit_overhead_and_efficiency``) carries a memory figure into compute-bound predictions and back, so a
twin calibrated on a single-stream TPOT mispredicts its large batches by the ratio of the two.

``fit_resources`` splits each point's roofline work by resource (memory, compute, interconnect: the step's
coefficients taken apart, ``work_by_resource``), and calibrates only what the points exercise: the resource
with the largest share of their work takes the factor that explains them (overhead and factor as the one-
factor fit reads them); the others keep the defaults they were given, and the result says which were
fitted and which kept. Points that exercise two resources each in earnest (the second above
``SECOND_SHARE`` of the work at some point and below it at another) fit both, by least squares with the
overhead as the one-factor fit found it; a solution outside (0, 1] falls back to the one resource.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np

from plateau_bench.roofline.bound import Roofline
from plateau_bench.roofline.efficiency import Efficiency
from plateau_bench.roofline.twin import expert_weights_s, fit_overhead_and_efficiency, step_coefficients

RESOURCES = ("memory", "compute", "interconnect")
SECOND_SHARE = 0.3   # a resource carrying this share of the work at some point, and not at another, is fitted too


class ResourceWork(NamedTuple):
    """A decode step's roofline work at efficiency 1, by resource (seconds, the fixed overhead apart)."""

    memory: float
    compute: float
    interconnect: float

    def share(self, resource: str) -> float:
        total = self.memory + self.compute + self.interconnect
        return getattr(self, resource) / total if total > 0 else 0.0


class ResourceCalibration(NamedTuple):
    efficiency: Efficiency
    step_overhead_s: float
    fitted: tuple[str, ...]      # the resources the points calibrated; the rest kept their defaults
    residuals: list[float]       # measured minus fitted step time per point (seconds)

    def describe(self) -> str:
        kept = [r for r in RESOURCES if r not in self.fitted]
        fitted = ", ".join(f"{r} {getattr(self.efficiency, r):.2f}" for r in self.fitted)
        rest = ", ".join(f"{r} {getattr(self.efficiency, r):.2f}" for r in kept)
        return f"fitted {fitted}; kept {rest} (what the points do not exercise)"


def _work(rf: Roofline, e: Efficiency, batch: float, context: float) -> float:
    c = step_coefficients(rf, e, experts="separate")
    return c.t0 - rf.deployment.step_overhead_s + c.a * batch + c.c * batch * context + \
        expert_weights_s(rf, batch, e.memory)


def work_by_resource(rf: Roofline, batch: float, context: float) -> ResourceWork:
    """The work split by resource: each term of the step is linear in one resource's 1/efficiency, so halving
    one efficiency adds exactly that resource's work."""
    full = _work(rf, Efficiency.uniform(1.0), batch, context)
    halved = {r: _work(rf, msgspec.structs.replace(Efficiency.uniform(1.0), **{r: 0.5}), batch, context) - full
              for r in RESOURCES}
    return ResourceWork(**halved)


def _step(work: ResourceWork, e: Efficiency, overhead: float) -> float:
    return overhead + work.memory / e.memory + work.compute / e.compute + work.interconnect / e.interconnect


def _clamped(value: float) -> float:
    return min(1.0, max(value, 1e-3))


def _one(rf: Roofline, points: list[tuple[float, float, float]], works: list[ResourceWork],
         base: Efficiency, resource: str) -> ResourceCalibration:
    """The one-factor fit's overhead, and the factor given to ``resource`` so the points' steps come back."""
    uniform = fit_overhead_and_efficiency(rf, points)
    overhead = uniform.step_overhead_s
    own = sum(getattr(w, resource) for w in works)
    rest = sum(_step(w, msgspec.structs.replace(base, **{resource: 1e12}), 0.0) for w in works)
    spare = sum(t for _, t, _ in points) - len(points) * overhead - rest
    factor = _clamped(own / spare) if spare > 0 else 1.0
    e = msgspec.structs.replace(base, **{resource: factor})
    residuals = [t - _step(w, e, overhead) for (_, t, _), w in zip(points, works, strict=True)]
    return ResourceCalibration(e, overhead, (resource,), residuals)


def _two(points: list[tuple[float, float, float]], works: list[ResourceWork], base: Efficiency, overhead: float,
         pair: tuple[str, str]) -> ResourceCalibration | None:
    """Least squares for two resources' 1/efficiency, the third kept and the overhead given; None when the
    solution is not a pair of efficiencies in (0, 1]."""
    third = next(r for r in RESOURCES if r not in pair)
    a = np.array([[getattr(w, pair[0]), getattr(w, pair[1])] for w in works])
    b = np.array([t - overhead - getattr(w, third) / getattr(base, third) for (_, t, _), w in zip(points, works,
                                                                                                 strict=True)])
    inverse, *_ = np.linalg.lstsq(a, b, rcond=None)
    if not all(x >= 1.0 for x in inverse):
        return None
    e = msgspec.structs.replace(base, **{pair[0]: 1.0 / inverse[0], pair[1]: 1.0 / inverse[1]})
    residuals = [t - _step(w, e, overhead) for (_, t, _), w in zip(points, works, strict=True)]
    return ResourceCalibration(e, overhead, pair, residuals)


def fit_resources(rf: Roofline, points: list[tuple[float, float, float]], base: Efficiency) -> ResourceCalibration:
    """The efficiencies that explain measured decode steps (module docstring).

    ``points``: (decoding batch, measured step seconds, context tokens) per measurement; ``base``: the
    efficiencies a resource the points do not exercise keeps."""
    works = [work_by_resource(rf, batch, ctx) for batch, _, ctx in points]
    totals = {r: sum(getattr(w, r) for w in works) for r in RESOURCES}
    order = sorted(RESOURCES, key=lambda r: -totals[r])
    one = _one(rf, points, works, base, order[0])
    second = order[1]
    shares = [w.share(second) for w in works]
    if len(points) >= 2 and max(shares) >= SECOND_SHARE and min(shares) < SECOND_SHARE:
        both = _two(points, works, base, one.step_overhead_s, (order[0], second))
        if both is not None:
            return both
    return one
