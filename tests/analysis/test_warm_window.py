"""A warm level's window: where the rate settled (MSER-5), and when the level may end."""

from __future__ import annotations

import numpy as np
import pytest

from plateau_bench.analysis.metrics import Window, batch_throughputs, sorted_tokens
from plateau_bench.analysis.stats import batch_means_ci_rel
from plateau_bench.analysis.warm import cycle_edges, mser_start, warm_check_records
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

S = NS


def stream(index: int, first_s: float, end_s: float, tokens: int, sent_s: float | None = None) -> RequestRecord:
    """A request whose tokens arrive evenly from its first token to its end (chunk per token)."""
    times = np.linspace(first_s, end_s, tokens)
    return RequestRecord(index=index, worker=index, scheduled_ns=0, sent_ns=int((sent_s or first_s - 0.01) * S),
                         first_token_ns=int(first_s * S), end_ns=int(end_s * S),
                         chunk_ns=[int(t * S) for t in times], chunk_tokens=[1] * tokens, output_tokens=tokens)


def steady(rate_per_s: float, start_s: float, end_s: float, base: int = 0) -> list[RequestRecord]:
    """Many overlapping requests whose tokens add up to ``rate_per_s`` between start and end."""
    return [stream(base + k, start_s + 0.013 * k, end_s, max(2, int(rate_per_s * (end_s - start_s) / 20)))
            for k in range(20)]


def test_mser_drops_a_ramp_and_keeps_a_flat_rate() -> None:
    ramp = [stream(k, 0.5 * k, 40.0, int(100 * (40.0 - 0.5 * k))) for k in range(20)]   # joins over 10 s
    times, cumulative = sorted_tokens(ramp)
    cut = mser_start(times, cumulative, 0, int(40 * S))
    assert 5 * S <= cut <= 12 * S
    flat = steady(2000, 0.0, 40.0)
    times, cumulative = sorted_tokens(flat)
    assert mser_start(times, cumulative, 0, int(40 * S)) <= 2 * S


def check(streams: list[RequestRecord], now_s: float, **kw: object) -> object:
    args: dict[str, object] = dict(level_start_ns=0, settled_ns=0, now_ns=int(now_s * S), workers=20,
                                   precision=0.02, min_s=5.0, max_s=60.0)
    args.update(kw)
    return warm_check_records(streams, **args)


def test_a_steady_rate_is_done_once_the_window_is_long_enough() -> None:
    data = steady(2000, 0.0, 30.0)
    early = check(data, 3.0)
    assert not early.done and early.window_ns is not None           # precise, but under the shortest window
    late = check(data, 20.0)
    assert late.done and late.tok_s == pytest.approx(2000, rel=0.05)
    assert late.ci_rel is not None and late.ci_rel <= 0.02


def test_nothing_is_measured_before_the_concurrency_settled_and_the_time_limit_ends_it_anyway() -> None:
    data = steady(2000, 0.0, 30.0)
    waiting = check(data, 20.0, settled_ns=None)
    assert waiting.window_ns is None and not waiting.done
    assert check(data, 61.0, settled_ns=None).done


def test_a_noisy_level_may_end_when_its_interval_is_wholly_above_or_below_the_decision_bar() -> None:
    # Tokens in bursts: the interval stays wider than the precision ...
    bursts = [stream(k, 2.0 * k, 2.0 * k + 0.5, 400) for k in range(15)]
    assert not check(bursts, 29.0, workers=1).done
    estimate = check(bursts, 29.0, workers=1)
    assert estimate.tok_s is not None and estimate.ci_rel is not None and estimate.ci_rel > 0.02
    # ... but clears a bar far below it, or stays under one far above it: the search's decision is made.
    assert check(bursts, 29.0, workers=1, clear_above=estimate.tok_s / 3).done
    assert check(bursts, 29.0, workers=1, clear_below=estimate.tok_s * 3).done
    assert not check(bursts, 29.0, workers=1, clear_above=estimate.tok_s).done


def test_a_level_the_servers_gauges_show_only_queued_ends_after_the_batch_period_with_a_fair_interval() -> None:
    data = steady(2000, 0.0, 30.0)
    ci = check(data, 20.0).ci_rel
    assert ci is not None and ci > 0
    loose = ci / 1.5    # a precision the window does not meet, but within twice of it
    assert not check(data, 20.0, precision=loose).done
    held = check(data, 20.0, precision=loose, queued=True, queued_min_s=10.0)
    assert held.done and held.queued
    assert not check(data, 9.0, precision=loose, queued=True, queued_min_s=10.0).done   # under one batch period
    # A rate swinging within the window gives no such interval: the gauges alone do not end the level.
    bursts = [stream(k, 2.0 * k, 2.0 * k + 0.5, 400) for k in range(15)]
    assert not check(bursts, 29.0, workers=1, queued=True, queued_min_s=12.0).done
    # A level precise on its own is not said to have ended on the gauges.
    precise = check(data, 20.0, queued=True, queued_min_s=5.0)
    assert precise.done and not precise.queued


def cycling(cycles: int, period_s: float) -> list[RequestRecord]:
    """One worker whose every request streams 400 tokens in the first quarter of its cycle and 100 over the
    rest: a token rate that repeats with the request cycle, as a closed loop of like requests does."""
    out = []
    for k in range(cycles):
        sent = k * period_s
        fast = np.linspace(sent + 0.01, sent + period_s / 4, 400)
        slow = np.linspace(sent + period_s / 4 + 0.05, sent + period_s - 0.001, 100)
        chunks = [int(t * S) for t in np.concatenate([fast, slow])]
        out.append(RequestRecord(index=k, worker=0, scheduled_ns=int(sent * S), sent_ns=int(sent * S),
                                 first_token_ns=chunks[0], end_ns=chunks[-1], chunk_ns=chunks,
                                 chunk_tokens=[1] * len(chunks), output_tokens=len(chunks)))
    return out


def test_a_rate_that_repeats_with_the_request_cycle_is_measured_over_whole_cycles() -> None:
    data = cycling(5, 8.0)
    times, cumulative = sorted_tokens(data)
    # Ten equal sub-windows of four cycles cut the pattern at different phases: their spread is wide ...
    sub = batch_means_ci_rel(batch_throughputs(times, cumulative, Window(0, int(32 * S)), 10))
    assert sub is not None and sub > 0.2
    # ... while whole cycles (the cycle measured from the finished requests) are alike, and exact.
    whole = check(data, 32.0, workers=1, cycle_s=20.0)   # a wrong prediction: the measured cycle replaces it
    assert whole.done and whole.ci_rel is not None and whole.ci_rel <= 0.02
    assert whole.tok_s == pytest.approx(500 / 8.0, rel=0.01)


def test_cycle_batches_need_three_whole_cycles_and_give_way_to_equal_sub_windows_from_ten() -> None:
    window = Window(0, int(40 * S))
    assert cycle_edges(window, 15.0, 10) is None          # two cycles: too few batches
    edges = cycle_edges(window, 8.0, 10)
    assert edges is not None and len(edges) == 6 and edges[-1] == 40 * S and edges[0] == pytest.approx(0)
    assert cycle_edges(window, 4.0, 10) is None           # ten cycles: each equal sub-window is one already


def test_a_level_whose_time_runs_out_just_after_it_settled_is_measured_over_the_whole_level() -> None:
    data = steady(2000, 0.0, 30.0)
    # Settled 0.3 s before the limit: no window of its own, so the whole level, not those 0.3 s.
    late = check(data, 30.0, settled_ns=int(29.7 * S), max_s=30.0)
    assert late.done and late.whole_level and late.window_ns == (0, int(30.0 * S))
    assert late.tok_s == pytest.approx(2000, rel=0.05)
    # A window of its own that is long enough is kept.
    kept = check(data, 30.0, settled_ns=int(5 * S), max_s=30.0)
    assert kept.done and not kept.whole_level and kept.window_ns is not None and kept.window_ns[0] >= 5 * S


def test_auto_level_time_stretches_a_level_whose_window_is_too_short_while_tokens_arrive() -> None:
    data = steady(2000, 0.0, 200.0)
    # Joins spread past the minute: settled at 55 s, a window of 5 s at 60 s where 20 s are needed.
    stretched = check(data, 60.0, settled_ns=int(55 * S), min_s=20.0, bound_s=600.0)
    assert not stretched.done
    assert check(data, 60.0, settled_ns=int(55 * S), min_s=20.0).done, "without a stretch: the minute ends it"
    assert check(data, 80.0, settled_ns=int(55 * S), min_s=20.0, bound_s=600.0).done   # a long enough window
    # With a 10 s request cycle, the stretched window must hold three of them (the noise-free data is
    # precise at once, so a loose precision leaves the decision to the window's length).
    cycles = {"settled_ns": int(55 * S), "min_s": 20.0, "bound_s": 600.0, "cycle_s": 10.0, "precision": 1e-9}
    assert not check(data, 80.0, **cycles).done and check(data, 92.0, **cycles).done
    # Not settled yet: it waits while tokens arrive, until the bound.
    assert not check(data, 61.0, settled_ns=None, bound_s=600.0).done
    assert check(data, 600.0, settled_ns=None, bound_s=600.0).done
    # A server that stopped streaming (no token for half the minute) is not held.
    assert check(data, 240.0, settled_ns=None, bound_s=600.0).done
