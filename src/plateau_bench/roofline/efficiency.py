"""How much of each roofline resource an engine reaches: the first-principles twin's efficiency.

The roofline is what the hardware allows; an engine's kernels reach a fraction of it, and not the
same fraction of each resource: streaming weights through matrix-vector products comes closer to the
memory bandwidth than large matrix products come to the tensor peak once the board nears its power
limit. ``Efficiency`` holds one factor per resource (memory, compute, interconnect), each in (0, 1].

``measured_efficiency()`` is the twin's default, shipped in ``efficiency.json`` with where each figure
comes from: memory and compute measured on a GPU by ``bench/gpu_truth.py`` (a decoder of a public
model's shape, its weight products timed apart from the small kernels an engine fuses), the
interconnect not measured (one GPU). ``Efficiency.uniform(f)`` is one factor for all three, what
``--efficiency F`` and ``--efficiency-from RUN`` give.
"""

from __future__ import annotations

import functools

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.hardware import Sourced, packaged


class Efficiency(msgspec.Struct, frozen=True, kw_only=True):
    memory: float          # weights and KV cache read over the memory bandwidth
    compute: float         # FLOPs over the dense peak
    interconnect: float    # collectives over the link

    @classmethod
    def uniform(cls, factor: float) -> Efficiency:
        return cls(memory=factor, compute=factor, interconnect=factor)

    def check(self) -> Efficiency:
        for name in ("memory", "compute", "interconnect"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"the {name} efficiency must be in (0, 1] (got {value})")
        return self

    def describe(self) -> str:
        if self.memory == self.compute == self.interconnect:
            return f"{self.memory:.0%} efficiency"
        return (f"{self.memory:.0%} of the memory bandwidth, {self.compute:.0%} of the compute peak and "
                f"{self.interconnect:.0%} of the interconnect")


class _Shipped(msgspec.Struct, frozen=True, kw_only=True):
    about: str
    measured_by: str
    memory: Sourced
    compute: Sourced
    interconnect: Sourced


@functools.cache
def _shipped() -> _Shipped:
    return packaged("efficiency.json", _Shipped)


def measured_efficiency() -> Efficiency:
    """The twin's default efficiencies (``efficiency.json``)."""
    s = _shipped()
    return Efficiency(memory=s.memory.value, compute=s.compute.value, interconnect=s.interconnect.value).check()


def measured_by() -> str:
    """Where the defaults were measured, in a few words."""
    return _shipped().measured_by


def efficiency_sources() -> dict[str, str]:
    """Where each default efficiency comes from, by resource."""
    s = _shipped()
    return {"memory": s.memory.source, "compute": s.compute.source, "interconnect": s.interconnect.source}
