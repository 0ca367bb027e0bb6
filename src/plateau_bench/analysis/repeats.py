"""Repeats (``--repeat N``): between-run confidence intervals, and whether two runs really differ.

A level measured N times gives N values of each figure (output tok/s, TTFT/TPOT/ITL/E2E p50 and p99).
Treating the repeats as independent draws of the level's figure, the interval is the Student-t one:
``mean ± t(0.975, N-1) * s / sqrt(N)`` with ``s`` the sample standard deviation. It says how much the
figure moves from run to run (drift, scheduling, the workload's own randomness), which the
within-level interval on tok/s (``throughput_ci_rel``) cannot: that one only sees one run.

Two runs' figures at the same level are compared with Welch's t test (unequal variances): the
difference of means over ``sqrt(s1²/n1 + s2²/n2)``, against the two-sided 95 % t quantile with the
Welch-Satterthwaite degrees of freedom (rounded down, which is conservative). Above it the difference
is called real at 95 %; below it, within noise. With fewer than two repeats on either side there is
no between-run spread to test against, and the comparison says it cannot tell.

Repeats whose level failed (``level_failed``) are kept in the result but left out of the intervals:
their figures cannot stand, and a failure never counts as throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec

from plateau_bench.analysis.stats import t95
from plateau_bench.result import Interval, LevelResult, RepeatFigures, RepeatStats

CONFIDENCE = 0.95
# The figures the intervals cover, as named in ``RepeatFigures`` and ``RepeatStats``.
METRICS = ("output_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
           "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms")

Verdict = Literal["real", "within noise", "cannot tell"]


def t_interval(values: Sequence[float]) -> Interval | None:
    """The two-sided 95 % Student-t interval of the mean of ``values`` (None when there are none)."""
    n = len(values)
    if n == 0:
        return None
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean=mean, n=1)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return Interval(mean=mean, low=mean - half, high=mean + half, stdev=sd, n=n)


def repeat_figures(level: LevelResult, repeat: int) -> RepeatFigures:
    """The figures of one measured repeat of a level."""
    return RepeatFigures(
        repeat=repeat, started_at=level.started_at, num_requests=level.num_requests, completed=level.completed,
        failed=level.failed, hung=level.hung, level_failed=level.level_failed or level.completed == 0,
        duration_s=level.duration_s, benchmark_s=level.benchmark_s, output_throughput=level.output_throughput,
        ttft_p50_ms=level.ttft_ms.p50, ttft_p99_ms=level.ttft_ms.p99, tpot_p50_ms=level.tpot_ms.p50,
        tpot_p99_ms=level.tpot_ms.p99, itl_p50_ms=level.itl_ms.p50, itl_p99_ms=level.itl_ms.p99,
        e2e_p50_ms=level.e2e_ms.p50, e2e_p99_ms=level.e2e_ms.p99)


def repeat_stats(figures: Sequence[RepeatFigures]) -> RepeatStats:
    """The intervals over the repeats that stand."""
    kept = [f for f in figures if not f.level_failed]
    intervals: dict[str, Interval | None] = {}
    for name in METRICS:
        values = [v for v in (getattr(f, name) for f in kept) if v is not None]
        intervals[name] = t_interval([float(v) for v in values])
    return RepeatStats(n=len(kept), confidence=CONFIDENCE, **intervals)


def add_repeat(level: LevelResult, figures: RepeatFigures) -> None:
    """Record one more repeat on the level (its own figures stay those of the first)."""
    level.repeats = [*level.repeats, figures]
    level.repeat_stats = repeat_stats(level.repeats)


class Welch(msgspec.Struct, frozen=True, kw_only=True):
    """Welch's t test of two means: the statistic, its degrees of freedom and the 95 % threshold."""

    t: float
    df: float
    threshold: float
    real: bool


def welch(a: Interval, b: Interval) -> Welch | None:
    """Welch's two-sided test at 95 % of ``a.mean != b.mean``; None without two repeats on each side."""
    if a.n < 2 or b.n < 2 or a.stdev is None or b.stdev is None:
        return None
    va, vb = a.stdev ** 2 / a.n, b.stdev ** 2 / b.n
    diff = a.mean - b.mean
    if va + vb == 0:
        # No spread at all on either side: any difference is beyond noise, none is within it.
        return Welch(t=math.inf if diff else 0.0, df=float(a.n + b.n - 2), threshold=t95(a.n + b.n - 2),
                     real=diff != 0)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1))
    threshold = t95(max(1, math.floor(df)))
    t = diff / se
    return Welch(t=t, df=df, threshold=threshold, real=abs(t) > threshold)


def verdict_of(test: Welch | None) -> Verdict:
    if test is None:
        return "cannot tell"
    return "real" if test.real else "within noise"


# -- comparing two runs ------------------------------------------------------------------------------

class MetricDifference(msgspec.Struct, frozen=True, kw_only=True):
    metric: str                    # a field of ``RepeatStats``
    a: Interval | None
    b: Interval | None
    verdict: Verdict               # real | within noise | cannot tell (at ``RepeatComparison.confidence``)
    welch: Welch | None = None


class LevelDifference(msgspec.Struct, frozen=True, kw_only=True):
    level: str                     # the label both runs measured
    concurrency: int | None
    repeats: tuple[int, int]       # repeats counted in each run
    metrics: tuple[MetricDifference, ...]


class RepeatComparison(msgspec.Struct, frozen=True, kw_only=True):
    """Per level both runs measured and per figure: is the difference beyond the between-run noise?"""

    runs: tuple[str, str]
    confidence: float = CONFIDENCE
    levels: tuple[LevelDifference, ...] = ()
    cannot_tell: str | None = None  # why no level could be tested (a run without repeats)


def _n(level: LevelResult) -> int:
    return level.repeat_stats.n if level.repeat_stats is not None else 1


def _metric(name: str, a: LevelResult, b: LevelResult) -> MetricDifference:
    ia = getattr(a.repeat_stats, name) if a.repeat_stats is not None else None
    ib = getattr(b.repeat_stats, name) if b.repeat_stats is not None else None
    test = welch(ia, ib) if ia is not None and ib is not None else None
    return MetricDifference(metric=name, a=ia, b=ib, verdict=verdict_of(test), welch=test)


def compare_repeats(names: tuple[str, str], a: Sequence[LevelResult], b: Sequence[LevelResult]) -> RepeatComparison:
    """Welch's test, per level both runs measured (matched by label) and per figure in ``METRICS``."""
    lacking = [name for name, levels in zip(names, (a, b), strict=True)
               if not any(_n(lv) >= 2 for lv in levels)]
    by_label = {lv.label: lv for lv in b if not lv.level_failed}
    common = [(lv, by_label[lv.label]) for lv in a if lv.label in by_label and not lv.level_failed]
    if not common:
        return RepeatComparison(runs=names, cannot_tell="the runs share no measured level")
    if lacking:
        return RepeatComparison(runs=names, cannot_tell=(
            f"{' and '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} no repeats, so there is no "
            "between-run spread to test a difference against (measure with --repeat 3 or more)"))
    levels = tuple(
        LevelDifference(level=la.label, concurrency=la.concurrency, repeats=(_n(la), _n(lb)),
                        metrics=tuple(_metric(m, la, lb) for m in METRICS))
        for la, lb in sorted(common, key=lambda p: (p[0].concurrency or 0, p[0].rate or 0.0)))
    return RepeatComparison(runs=names, levels=levels)
