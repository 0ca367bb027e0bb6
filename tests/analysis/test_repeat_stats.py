"""Between-run statistics of ``--repeat``: Student-t intervals and Welch's test, on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from plateau_bench.analysis.repeats import (
    compare_repeats,
    repeat_figures,
    repeat_stats,
    t_interval,
    verdict_of,
    welch,
)
from plateau_bench.result import Interval, Latency, LevelResult, RepeatFigures

from support.builders import level_result


def test_t_interval_of_three_values() -> None:
    # mean 12, s = 2, half-width = t(0.975, 2) * 2 / sqrt(3) = 4.303 * 1.1547 = 4.9687
    iv = t_interval([10.0, 12.0, 14.0])
    assert iv is not None
    assert iv.mean == pytest.approx(12.0)
    assert iv.stdev == pytest.approx(2.0)
    assert iv.low == pytest.approx(12.0 - 4.9687, abs=1e-3)
    assert iv.high == pytest.approx(12.0 + 4.9687, abs=1e-3)
    assert iv.n == 3


def test_t_interval_of_one_value_has_no_width_and_none_has_no_interval() -> None:
    one = t_interval([7.0])
    assert one == Interval(mean=7.0, n=1)
    assert t_interval([]) is None


def test_welch_separated_means_are_real() -> None:
    # Equal variances 4 over n=3: se = sqrt(8/3) = 1.633, t = -10 / 1.633 = -6.124; df = 4, t(0.975, 4) = 2.776.
    a, b = t_interval([10.0, 12.0, 14.0]), t_interval([20.0, 22.0, 24.0])
    assert a is not None and b is not None
    test = welch(a, b)
    assert test is not None
    assert test.t == pytest.approx(-6.1237, abs=1e-3)
    assert test.df == pytest.approx(4.0)
    assert test.threshold == pytest.approx(2.776)
    assert test.real and verdict_of(test) == "real"


def test_welch_overlapping_means_are_noise_with_satterthwaite_df() -> None:
    # a: mean 2.5, var 5/3, n 4 -> 0.41667; b: mean 4, var 4, n 3 -> 1.33333.
    # df = 1.75^2 / (0.41667^2 / 3 + 1.33333^2 / 2) = 3.0625 / 0.94676 = 3.2347 -> t(0.975, 3) = 3.182.
    # t = -1.5 / sqrt(1.75) = -1.1339.
    a, b = t_interval([1.0, 2.0, 3.0, 4.0]), t_interval([2.0, 4.0, 6.0])
    assert a is not None and b is not None
    test = welch(a, b)
    assert test is not None
    assert test.df == pytest.approx(3.2347, abs=1e-3)
    assert test.threshold == pytest.approx(3.182)
    assert test.t == pytest.approx(-1.1339, abs=1e-3)
    assert not test.real and verdict_of(test) == "within noise"


def test_welch_needs_two_repeats_each_side() -> None:
    one = t_interval([5.0])
    three = t_interval([1.0, 2.0, 3.0])
    assert one is not None and three is not None
    assert welch(one, three) is None
    assert verdict_of(None) == "cannot tell"


def test_welch_without_any_spread() -> None:
    same = Interval(mean=3.0, low=3.0, high=3.0, stdev=0.0, n=3)
    other = Interval(mean=4.0, low=4.0, high=4.0, stdev=0.0, n=3)
    equal = welch(same, same)
    apart = welch(same, other)
    assert equal is not None and not equal.real
    assert apart is not None and apart.real and math.isinf(apart.t)


def _level(label: str, tok_s: float, ttft_p99: float, *, failed: bool = False) -> LevelResult:
    return level_result(int(label[2:]), tok_s, label=label, completed=0 if failed else 10, num_requests=10,
                        failed=10 if failed else 0, level_failed=failed,
                        ttft_ms=Latency(p50=ttft_p99 / 2, p99=ttft_p99, count=10))


def test_a_failed_repeat_is_kept_but_not_counted() -> None:
    figures = [repeat_figures(_level("C=8", v, 100.0), i + 1) for i, v in enumerate((100.0, 110.0, 120.0))]
    figures.append(repeat_figures(_level("C=8", 0.0, 0.0, failed=True), 4))
    stats = repeat_stats(figures)
    assert stats.n == 3
    assert stats.output_throughput is not None
    assert stats.output_throughput.mean == pytest.approx(110.0)
    assert stats.output_throughput.n == 3
    # A figure the level never measured has no interval.
    assert stats.tpot_p99_ms is None


def _with_repeats(label: str, tok_s: list[float], ttft_p99: list[float]) -> LevelResult:
    level = _level(label, tok_s[0], ttft_p99[0])
    level.repeats = [RepeatFigures(repeat=i + 1, completed=10, num_requests=10, output_throughput=t,
                                   ttft_p99_ms=p) for i, (t, p) in enumerate(zip(tok_s, ttft_p99, strict=True))]
    level.repeat_stats = repeat_stats(level.repeats)
    return level


def test_compare_repeats_names_real_and_noise_per_metric() -> None:
    a = [_with_repeats("C=8", [100.0, 102.0, 98.0], [50.0, 60.0, 40.0])]
    b = [_with_repeats("C=8", [120.0, 121.0, 119.0], [52.0, 58.0, 46.0])]
    rc = compare_repeats(("a", "b"), a, b)
    assert rc.cannot_tell is None
    (lv,) = rc.levels
    assert lv.level == "C=8" and lv.repeats == (3, 3)
    by_metric = {m.metric: m.verdict for m in lv.metrics}
    assert by_metric["output_throughput"] == "real"
    assert by_metric["ttft_p99_ms"] == "within noise"
    assert by_metric["tpot_p99_ms"] == "cannot tell"   # neither measured it


def test_compare_repeats_without_repeats_cannot_tell() -> None:
    a = [_with_repeats("C=8", [100.0, 102.0, 98.0], [50.0, 60.0, 40.0])]
    b = [_level("C=8", 150.0, 50.0)]
    rc = compare_repeats(("a", "b"), a, b)
    assert rc.levels == ()
    assert rc.cannot_tell is not None and rc.cannot_tell.startswith("b has no repeats")
    apart = compare_repeats(("a", "b"), a, [_with_repeats("C=16", [1.0, 2.0], [1.0, 2.0])])
    assert apart.cannot_tell == "the runs share no measured level"
