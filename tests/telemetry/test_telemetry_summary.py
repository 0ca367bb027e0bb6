"""Window summaries on hand-built series, answers computed by hand in the comments."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.records import TelemetrySample
from plateau_bench.telemetry.summary import (
    counter_delta,
    gauge_stats,
    reset_corrected,
    summarize,
    time_weighted_mean,
)

S = 1_000_000_000


def test_time_weighted_mean_of_a_step_function() -> None:
    points = [(0, 2.0), (1 * S, 4.0), (3 * S, 0.0)]
    # 2 for 1 s, 4 for 2 s, 0 for 1 s: (2 + 8 + 0) / 4
    stats = gauge_stats(points, 0, 4 * S)
    assert stats is not None
    assert stats.mean == pytest.approx(2.5)
    assert (stats.min, stats.max) == (0.0, 4.0)
    # [0.5 s, 2 s]: 2 for 0.5 s, 4 for 1 s -> 5 / 1.5; the 0 at 3 s is outside
    part = gauge_stats(points, S // 2, 2 * S)
    assert part is not None
    assert part.mean == pytest.approx(5 / 1.5)
    assert (part.min, part.max) == (2.0, 4.0)


def test_value_in_force_when_the_window_opens_counts_from_its_start() -> None:
    # 6 holds from -1 s to 2 s (2 s inside), then 2 for 2 s: (12 + 4) / 4
    assert time_weighted_mean([(-S, 6.0), (2 * S, 2.0)], 0, 4 * S) == pytest.approx(4.0)


def test_window_opening_before_the_first_sample_uses_the_covered_part() -> None:
    assert time_weighted_mean([(1 * S, 3.0), (3 * S, 5.0)], 0, 4 * S) == pytest.approx((3 * 2 + 5 * 1) / 3)


def test_window_without_data() -> None:
    assert gauge_stats([(5 * S, 1.0)], 0, 4 * S) is None
    assert gauge_stats([], 0, 4 * S) is None


def test_zero_length_window_takes_the_value_in_force() -> None:
    stats = gauge_stats([(0, 2.0), (1 * S, 4.0)], 3 * S // 2, 3 * S // 2)
    assert stats is not None and (stats.mean, stats.min, stats.max) == (4.0, 4.0, 4.0)


def test_counter_reset_counts_the_new_value_as_growth_from_zero() -> None:
    points = [(0, 100.0), (1 * S, 110.0), (2 * S, 5.0), (3 * S, 15.0)]
    assert [v for _, v in reset_corrected(points)] == [100.0, 110.0, 115.0, 125.0]
    counted = counter_delta(points, 0, 3 * S)
    assert counted == (25.0, 3 * S)


def test_counter_is_interpolated_at_the_window_bounds() -> None:
    # 100 tokens over 2 s; the window [0.5 s, 1.5 s] gets half of them
    assert counter_delta([(0, 0.0), (2 * S, 100.0)], S // 2, 3 * S // 2) == (50.0, S)
    # a window reaching past the last sample stops at it
    assert counter_delta([(0, 0.0), (2 * S, 100.0)], S, 10 * S) == (50.0, S)
    assert counter_delta([(0, 7.0)], 0, S) is None
    assert counter_delta([(0, 0.0), (S, 1.0)], 2 * S, 3 * S) is None


def _sample(t_s: float, values: dict[str, float], raw: dict[str, float] | None = None) -> TelemetrySample:
    return TelemetrySample(t_ns=int(t_s * S), engine="vllm", values=values, raw=raw or {})


def test_summarize_a_level() -> None:
    samples = [
        _sample(-0.5, {"running": 2, "waiting": 0, "kv_usage": 0.1, "generation_tokens": 1000,
                       "preemptions": 5, "cap": 8, "kv_capacity_tokens": 65536}, {"waiting_reason_capacity": 0}),
        _sample(1.0, {"running": 8, "waiting": 4, "kv_usage": 0.5, "generation_tokens": 1600,
                      "preemptions": 5, "cap": 8, "kv_capacity_tokens": 65536}, {"waiting_reason_capacity": 4}),
        _sample(3.0, {"running": 8, "waiting": 6, "kv_usage": 0.9, "generation_tokens": 2800,
                      "preemptions": 7, "cap": 8, "kv_capacity_tokens": 65536}, {"waiting_reason_capacity": 6}),
    ]
    summary = summarize(samples, 0, 4 * S)
    t = summary.values
    assert summary.engine == "vllm"
    # running: 2 for 1 s, 8 for 3 s -> 26 / 4
    assert t["running_mean"] == pytest.approx(6.5)
    assert (t["running_max"], t["running_min"]) == (8, 2)
    # waiting: 0 for 1 s, 4 for 2 s, 6 for 1 s -> 14 / 4
    assert t["waiting_mean"] == pytest.approx(3.5)
    assert t["waiting_reason_capacity_mean"] == pytest.approx(3.5)
    assert t["kv_usage_max"] == 0.9
    # tokens: samples cover [0, 3 s]; 1000 at -0.5 s and 1600 at 1 s interpolate to 1200 at 0
    assert t["generation_tokens_delta"] == pytest.approx(2800 - 1200)
    assert t["generation_tokens_rate"] == pytest.approx(1600 / 3)
    assert t["preemptions_delta"] == pytest.approx(2)
    assert t["cap"] == 8 and t["kv_capacity_tokens"] == 65536
    assert t["samples"] == 2
    assert "running" not in t and "generation_tokens_mean" not in t


def test_llamacpp_batch_per_decode_over_the_window() -> None:
    samples = [
        TelemetrySample(t_ns=0, engine="llamacpp", raw={"busy_slots_total": 3000, "decode_calls": 1000}),
        TelemetrySample(t_ns=2 * S, engine="llamacpp", raw={"busy_slots_total": 3400, "decode_calls": 1100}),
    ]
    # 400 busy slots over 100 decode calls: batches of 4 in this window (the lifetime average was 3)
    assert summarize(samples, 0, 2 * S).values["busy_slots_per_decode_window"] == pytest.approx(4.0)


def test_no_samples_no_values() -> None:
    summary = summarize([], 0, S)
    assert summary.engine is None and summary.values == {} and summary.empty


times = st.lists(st.integers(min_value=-10 * S, max_value=10 * S), min_size=1, max_size=30, unique=True).map(sorted)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def series_and_window(draw: st.DrawFn) -> tuple[list[tuple[int, float]], int, int]:
    ts = draw(times)
    values = draw(st.lists(finite, min_size=len(ts), max_size=len(ts)))
    a = draw(st.integers(min_value=-12 * S, max_value=12 * S))
    b = draw(st.integers(min_value=a, max_value=12 * S))
    return list(zip(ts, values, strict=True)), a, b


@given(times, finite, st.integers(min_value=-12 * S, max_value=12 * S), st.integers(min_value=0, max_value=5 * S))
def test_constant_series_has_that_mean(ts: list[int], c: float, a: int, length: int) -> None:
    stats = gauge_stats([(t, c) for t in ts], a, a + length)
    if stats is not None:
        assert stats.mean == pytest.approx(c, rel=1e-9, abs=1e-9)
        assert stats.min == stats.max == c


@given(series_and_window())
def test_mean_is_bounded_by_min_and_max(case: tuple[list[tuple[int, float]], int, int]) -> None:
    points, a, b = case
    stats = gauge_stats(points, a, b)
    if stats is None:
        assert all(t > b for t, _ in points)
        return
    tol = 1e-9 * max(1.0, abs(stats.min), abs(stats.max))
    assert stats.min - tol <= stats.mean <= stats.max + tol
    values = [v for _, v in points]
    assert min(values) <= stats.min and stats.max <= max(values)


@given(series_and_window(), st.floats(min_value=-100, max_value=100, allow_nan=False))
def test_mean_is_linear(case: tuple[list[tuple[int, float]], int, int], k: float) -> None:
    points, a, b = case
    base = time_weighted_mean(points, a, b)
    scaled = time_weighted_mean([(t, k * v + 1.0) for t, v in points], a, b)
    assert (base is None) == (scaled is None)
    if base is not None and scaled is not None:
        assert scaled == pytest.approx(k * base + 1.0, rel=1e-6, abs=1e-3)


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=2, max_size=30))
def test_corrected_counter_never_decreases(values: list[float]) -> None:
    corrected = reset_corrected([(i * S, v) for i, v in enumerate(values)])
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(corrected))
    counted = counter_delta([(i * S, v) for i, v in enumerate(values)], 0, (len(values) - 1) * S)
    assert counted is not None and counted[0] >= 0


def test_prefix_cache_hit_rate_from_vllm_counters() -> None:
    samples = [_sample(0, {}, {"prefix_cache_queries": 1000, "prefix_cache_hits": 100}),
               _sample(2, {}, {"prefix_cache_queries": 3000, "prefix_cache_hits": 1600})]
    values = summarize(samples, 0, 2 * S).values
    # cached tokens over looked-up tokens in the window: (1600 - 100) / (3000 - 1000)
    assert values["prefix_cache_hit_rate"] == 0.75


def test_prefix_cache_hit_rate_from_sglangs_gauge() -> None:
    samples = [TelemetrySample(t_ns=0, engine="sglang", raw={"cache_hit_rate": 0.2}),
               TelemetrySample(t_ns=S, engine="sglang", raw={"cache_hit_rate": 0.6}),
               TelemetrySample(t_ns=2 * S, engine="sglang", raw={"cache_hit_rate": 0.6})]
    assert summarize(samples, 0, 2 * S).values["prefix_cache_hit_rate"] == 0.4   # time-weighted


def test_no_cache_metrics_no_hit_rate() -> None:
    samples = [_sample(0, {"running": 1}), _sample(1, {"running": 2})]
    assert "prefix_cache_hit_rate" not in summarize(samples, 0, S).values
