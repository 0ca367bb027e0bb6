"""Which of a level's figures were measured: the zeros of a level summary that stand for "not stated".

A level's counts, rates and concurrencies are plain numbers that default to 0 (scripts read them from
result.json, so they keep their types). A level imported from a summary (a table, another tool's per-level
report) has no per-request times: the most requests at once (``peak_decoding``, ``peak_in_flight``) are
never known, and the rates and time-average concurrencies only where the source stated them or they follow
from what it stated (``importers.common``). Such a zero is unknown, not a measured 0, and is shown as unknown.

``LevelResult.unmeasured`` names those figures; ``plateau import`` fills it (``summary_unmeasured``). A
level built before that field existed, or handed straight from an importer, is read the same way: an
imported level with requests completed and no decoding peak came from a summary.
"""

from __future__ import annotations

from plateau_bench.result import Latency, LevelResult

# The importers' token source ("imported"); spelled here because the importers depend on the analysis.
IMPORTED = "imported"

# Figures a summary may leave at their 0 default. The rates and counts count only when requests were served
# (some completed, or tokens flowed: a table of tok/s need not count requests); with none served, a zero
# throughput is what was measured.
ALWAYS_PER_REQUEST = ("peak_decoding", "peak_in_flight")
RATES = ("output_throughput", "total_throughput", "peak_output_throughput", "request_throughput",
         "achieved_concurrency", "decoding_concurrency", "wall_s", "duration_s")
COUNTS = ("num_requests", "completed", "failed", "hung")   # unknown together: tokens flowed, yet no request was counted


def _served(level: LevelResult) -> bool:
    return level.completed > 0 or level.output_throughput > 0


def summary_unmeasured(level: LevelResult) -> list[str]:
    """The figures of a level built from a summary that its source left at 0 (see the module docstring)."""
    names = [n for n in ALWAYS_PER_REQUEST if not getattr(level, n)]
    if _served(level):
        names += [n for n in RATES if not getattr(level, n)]
    if level.completed == 0 and level.output_throughput > 0:
        names += list(COUNTS)
    return names


def from_summary(level: LevelResult) -> bool:
    """The level has no per-request times: a level summary (a table or another tool's report)."""
    if level.unmeasured:
        return "peak_decoding" in level.unmeasured
    return level.token_source == IMPORTED and level.peak_decoding == 0 and _served(level)


def counted(level: LevelResult) -> bool:
    """Requests completed at the level, or its summary served tokens without counting them."""
    return level.completed > 0 or "completed" in unmeasured(level)


def unmeasured(level: LevelResult) -> frozenset[str]:
    """The level's figures that are unknown, not 0."""
    if level.unmeasured:
        return frozenset(level.unmeasured)
    return frozenset(summary_unmeasured(level)) if from_summary(level) else frozenset()


def known(level: LevelResult, name: str) -> float | None:
    """The figure ``name`` of the level, or None when it was not measured."""
    if name in unmeasured(level):
        return None
    value: float = getattr(level, name)
    return value


def mean_only(lat: Latency) -> bool:
    """Only the mean is known (a summary stating means): no percentile to show."""
    return lat.mean is not None and lat.p50 is None and lat.p90 is None and lat.p99 is None
