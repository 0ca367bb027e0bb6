"""Metrics on hand-built records with hand-computed answers."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from plateau_bench.analysis.metrics import (
    DETAIL_CHARS,
    DETAILS_KEPT,
    Window,
    batch_throughputs,
    compute_level,
    full_window,
    phase_edges,
    sorted_first_tokens,
    sorted_tokens,
    steady_batches,
    steady_window,
)
from plateau_bench.analysis.stats import batch_means_ci_rel
from plateau_bench.records import RequestRecord
from plateau_bench.report.terminal import seed_line
from plateau_bench.units import NS

from support.builders import lockstep_records, request_record

MS = 1_000_000


def rec(index: int, sent_ms: float, chunks_ms: list[float], *, worker: int = 0, tokens: list[int] | None = None,
        prompt: int = 10, error: str | None = None, warmup: bool = False) -> RequestRecord:
    chunk_ns = [int(c * MS) for c in chunks_ms]
    toks = tokens or [1] * len(chunk_ns)
    return request_record(
        index, worker=worker, sent_ns=int(sent_ms * MS), first_token_ns=chunk_ns[0] if chunk_ns else None,
        end_ns=chunk_ns[-1] if chunk_ns else int(sent_ms * MS), chunk_ns=chunk_ns, chunk_tokens=toks,
        prompt_tokens=prompt, output_tokens=sum(toks) if chunk_ns else 0, error=error, warmup=warmup,
    )


def test_ttft_tpot_itl_e2e_by_hand() -> None:
    # Request A: sent 0, tokens at 100, 110, 120, 130 ms -> TTFT 100, TPOT 10, E2E 130.
    # Request B: sent 0, tokens at 200, 240 (chunk of 2 tokens) -> TTFT 200, TPOT (240-200)/2=20,
    # ITL: one chunk of 2 tokens after a 40 ms gap -> two gaps of 20 ms.
    a = rec(0, 0, [100, 110, 120, 130])
    b = rec(1, 0, [200, 240], tokens=[1, 2], worker=1)
    lv = compute_level([a, b], label="C=2", mode="burst", concurrency=2)
    assert lv.ttft_ms.mean == pytest.approx(150)
    assert lv.tpot_ms.mean == pytest.approx(15)
    assert lv.e2e_ms.max == pytest.approx(240)
    # ITL values: A: 10,10,10 (weights 1); B: 20,20 (one chunk, weight 2) -> mean (30+40)/5 = 14.
    assert lv.itl_ms.mean == pytest.approx(14)
    assert lv.itl_ms.count == 5
    assert lv.itl_ms.max == pytest.approx(20)


def test_throughput_and_littles_law_by_hand() -> None:
    # Two requests in flight for the whole window [0, 1000] ms: achieved concurrency 2.
    a = rec(0, 0, [500, 1000])
    b = rec(1, 0, [250, 1000], worker=1)
    lv = compute_level([a, b], label="C=2", mode="burst", concurrency=2)
    assert lv.duration_s == pytest.approx(1.0)
    assert lv.output_throughput == pytest.approx(4.0)
    assert lv.total_throughput == pytest.approx(24.0)  # + 2 x 10 prompt tokens
    assert lv.achieved_concurrency == pytest.approx(2.0)
    # decoding: A from 500 ms, B from 250 ms -> (0.5 + 0.75) / 1 s
    assert lv.decoding_concurrency == pytest.approx(1.25)
    assert lv.request_throughput == pytest.approx(2.0)
    assert lv.peak_in_flight == 2


def test_peak_output_throughput_uses_one_second_buckets() -> None:
    # 3 tokens in the first second, 1 in the second: peak 3 tok/s.
    a = rec(0, 0, [100, 200, 300, 1500])
    lv = compute_level([a], label="C=1", mode="burst", concurrency=1)
    assert lv.peak_output_throughput == pytest.approx(3.0)


def test_errors_counted_and_level_failed_by_majority() -> None:
    ok = rec(0, 0, [10, 20])
    bad = [rec(i, 0, [], error="http_429", worker=i) for i in range(1, 4)]
    lv = compute_level([ok, *bad], label="C=4", mode="burst", concurrency=4)
    assert (lv.completed, lv.failed) == (1, 3)
    assert lv.errors == {"http_429": 3}
    assert lv.dominant_error == "http_429"
    assert lv.level_failed


def test_a_level_keeps_its_failed_requests_most_common_messages_shortened() -> None:
    ok = rec(0, 0, [10, 20])
    said = ["Context size has been exceeded."] * 3 + ["x" * 400] + ["a", "b"]
    bad = [msgspec.structs.replace(rec(i, 0, [], error="server_error_event", worker=i), error_detail=d)
           for i, d in enumerate(said, start=1)]
    lv = compute_level([ok, *bad], label="C=8", mode="burst", concurrency=8)
    assert next(iter(lv.error_details.items())) == ("Context size has been exceeded.", 3)
    assert len(lv.error_details) == DETAILS_KEPT
    assert all(len(m) <= DETAIL_CHARS for m in lv.error_details)


def test_warmup_records_are_ignored() -> None:
    warm = rec(0, 0, [1000, 2000], warmup=True)
    real = rec(1, 0, [100, 200])
    lv = compute_level([warm, real], label="C=1", mode="burst", concurrency=1)
    assert lv.num_requests == 1
    assert lv.e2e_ms.max == pytest.approx(200)


def test_chunkless_records_spread_tokens_evenly() -> None:
    r = request_record(0, ttft_ms=100, e2e_ms=1100, output_tokens=11, prompt_tokens=5)
    lv = compute_level([r], label="C=1", mode="burst", concurrency=1)
    assert lv.tpot_ms.mean == pytest.approx(100)
    assert lv.itl_ms.mean == pytest.approx(100)
    assert lv.output_tokens == 11


def test_steady_window_excludes_ramp_up_and_drain() -> None:
    # Two workers, each 5 back-to-back requests of 100 ms; worker 1 starts 50 ms later.
    records = []
    for w, offset in ((0, 0), (1, 50)):
        for k in range(5):
            s = offset + 100 * k
            records.append(rec(len(records), s, [s + 20, s + 100], worker=w))
    win = steady_window(records)
    assert win.start_ns == 70 * MS      # worker 1's first token
    # Worker 0's last request ends first (500 ms); the window closes on the last first token before it
    # (worker 1's, 470 ms), the phase it opened on.
    assert win.end_ns == 470 * MS
    assert "steady" in win.note
    assert full_window(records) == Window(0, 550 * MS, "whole level")


def test_seed_line_format() -> None:
    a = rec(0, 0, [1000, 33_100])
    line = seed_line(compute_level([a], label="C=1", mode="burst", concurrency=1))
    assert line.startswith("C=    1 | 1/1 ok (0 err) | wall=   33.1s |")
    assert "lat avg= 33.10 p50= 33.10 p99= 33.10" in line


def test_tokens_of_failed_requests_are_not_throughput() -> None:
    # Streams that broke halfway (reset, malformed chunk, truncated) carry tokens; none is throughput.
    broken = [rec(i, 0, [100 + 10 * k for k in range(50)], worker=i, error=e)
              for i, e in enumerate(["protocol", "truncated", "truncated"])]
    lv = compute_level(broken, label="C=3", mode="burst", concurrency=3)
    assert lv.completed == 0 and lv.failed == 3
    assert lv.output_throughput == 0.0 and lv.peak_output_throughput == 0.0 and lv.output_tokens == 0
    assert lv.failed_output_tokens == 150
    ok = rec(3, 0, [100 + 10 * k for k in range(50)], worker=3)
    mixed = compute_level([*broken, ok], label="C=4", mode="burst", concurrency=4)
    assert mixed.output_tokens == 50 and mixed.failed_output_tokens == 150
    assert mixed.output_throughput == pytest.approx(50 / mixed.duration_s)


def test_every_request_sent_is_counted_once_and_hung_apart() -> None:
    records = [rec(0, 0, [10, 20]), rec(1, 0, [], error="hung", worker=1), rec(2, 0, [], error="http_5xx", worker=2)]
    lv = compute_level(records, label="C=3", mode="burst", concurrency=3)
    assert lv.num_requests == lv.completed + lv.failed == 3
    assert lv.hung == 1 and lv.errors == {"hung": 1, "http_5xx": 1}


def test_a_refuted_usage_report_is_counted() -> None:
    claimed = msgspec.structs.replace(rec(0, 0, [10, 20, 30]), usage_tokens=64)
    lv = compute_level([claimed, rec(1, 0, [10, 20], worker=1)], label="C=2", mode="burst", concurrency=2)
    assert lv.token_mismatches == 1 and lv.output_tokens == 5


def test_slow_connects_are_noted_on_the_level() -> None:
    from plateau_bench.analysis.level import build_level
    from plateau_bench.level_run import LevelRun
    from plateau_bench.spec import LevelSpec

    slow = [msgspec.structs.replace(rec(i, 0, [3000, 3010], worker=i), connect_ns=3000 * MS) for i in range(4)]
    level = build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=4), label="C=4", records=slow))
    assert level.connect_ms.p99 == pytest.approx(3000.0)
    assert any("slow to open" in n for n in level.notes)


def test_chunkless_tokens_are_spread_exactly_as_linspace_would() -> None:
    import numpy as np

    from plateau_bench.analysis.metrics import token_arrays

    rng = np.random.default_rng(7)
    records = []
    for i in range(300):
        first = int(rng.integers(0, 10**12))
        n = int(rng.integers(0, 40))
        end = first + int(rng.integers(0, 10**10)) * (i % 5 != 0)   # every fifth: all tokens at once
        records.append(RequestRecord(index=i, worker=i % 7, scheduled_ns=0, sent_ns=0, first_token_ns=first,
                                     end_ns=end, prompt_tokens=1, output_tokens=n))
    times, counts = token_arrays(records)
    expected = [np.linspace(r.first_token_ns, r.end_ns, r.output_tokens) for r in records if r.output_tokens]
    assert np.array_equal(times, np.concatenate(expected))   # bit for bit: windows cut at exact times
    assert counts.sum() == sum(r.output_tokens for r in records)


def test_counts_from_sorted_tokens_match_the_histogram() -> None:
    import numpy as np

    from plateau_bench.analysis.metrics import counts_between

    rng = np.random.default_rng(3)
    times = rng.integers(0, 100, 5000).astype(np.float64) * 1e7   # many ties, some on the edges
    counts = rng.integers(1, 4, times.size).astype(np.float64)
    order = np.argsort(times)
    cumulative = np.concatenate([[0.0], np.cumsum(counts[order])])
    for edges in (np.linspace(0, 10**9, 11), np.linspace(2e8, 7e8, 4), np.array([1e7, 1e7 + 3]),
                  np.array([-5.0, 3e8, 3.5e8, 2e9])):
        expected, _ = np.histogram(times, bins=edges, weights=counts)
        assert np.array_equal(counts_between(times[order], cumulative, edges), expected)


def test_a_lock_step_level_is_measured_over_whole_cycles() -> None:
    # Four workers in lock step, five cycles of a 3-s prefill then 100 tokens over 7 s: 40 tok/s.
    # A window from the last first token to the first last end would hold five decode phases and four
    # prefill phases (2,000 tokens over 47 s: 42.6 tok/s, +6 %); closed on a first token it holds four
    # whole cycles.
    records = [RequestRecord(index=k * 4 + w, worker=w, scheduled_ns=k * 10 * NS, sent_ns=k * 10 * NS,
                             first_token_ns=(k * 10 + 3) * NS, end_ns=(k + 1) * 10 * NS, prompt_tokens=10,
                             output_tokens=100) for k in range(5) for w in range(4)]
    level = compute_level(records, label="C=4", mode="steady", concurrency=4)
    assert (level.window_start_s, level.window_end_s) == (3.0, 43.0)
    # 40.1: the four first tokens on the closing edge count (a window holds both its edges)
    assert level.output_throughput == pytest.approx(40.0, rel=0.003)


def test_a_spread_level_keeps_nearly_its_whole_window() -> None:
    # Workers offset by a quarter cycle: the last first token before the first last end is moments
    # before it, so the window loses at most that quarter.
    records = [RequestRecord(index=k * 4 + w, worker=w, scheduled_ns=(k * 10 + 2.5 * w) * NS,
                             sent_ns=int((k * 10 + 2.5 * w) * NS), first_token_ns=int((k * 10 + 2.5 * w + 3) * NS),
                             end_ns=int(((k + 1) * 10 + 2.5 * w) * NS), prompt_tokens=10, output_tokens=100)
               for k in range(5) for w in range(4)]
    w = steady_window(records)
    assert w.start_ns == int(10.5 * NS) and w.end_ns == int(48 * NS)   # the first last end is 50 s
    assert compute_level(records, label="C=4", mode="steady", concurrency=4).output_throughput == \
        pytest.approx(40.0, rel=0.02)


def test_lock_step_batches_close_on_whole_waves_and_differ_only_as_the_waves_do() -> None:
    tokens = [100, 102, 98, 100, 104, 100]
    records = lockstep_records(tokens, prefill_s=3.0, decode_s=7.0)
    w = steady_window(records)
    times, cumulative = sorted_tokens(records)
    first = sorted_first_tokens(records)
    # The window opens on the first wave's first tokens (3 s) and closes on the last wave's (53 s).
    edges = phase_edges(first, w, workers=4)
    assert edges is not None
    assert (edges / NS).tolist() == [3.0, 13.0, 23.0, 33.0, 43.0, 53.0]
    by_hand = [4 * t / 10.0 for t in tokens[:5]]   # each batch one wave: its four requests over 10 s
    assert steady_batches(times, cumulative, w, first, workers=4) == pytest.approx(by_hand)
    level = compute_level(records, label="C=4", mode="steady", concurrency=4)
    assert level.throughput_ci_rel == pytest.approx(batch_means_ci_rel(by_hand))
    # Ten equal sub-windows of the same 40 s cut the waves in different places: the spread they show
    # is the phase pattern, several times the waves' own.
    equal = batch_means_ci_rel(batch_throughputs(times, cumulative, w))
    assert equal is not None and level.throughput_ci_rel is not None and equal > 3 * level.throughput_ci_rel


def test_identical_waves_read_no_spread_where_equal_sub_windows_read_the_phase_pattern() -> None:
    records = lockstep_records([100] * 6, prefill_s=3.0, decode_s=7.0)
    times, cumulative = sorted_tokens(records)
    w = steady_window(records)
    assert batch_means_ci_rel(steady_batches(times, cumulative, w, sorted_first_tokens(records), 4)) == 0.0
    equal = batch_means_ci_rel(batch_throughputs(times, cumulative, w))
    assert equal is not None and equal > 0.1


def test_under_three_whole_waves_the_equal_sub_windows_serve() -> None:
    records = lockstep_records([100] * 3, prefill_s=3.0, decode_s=7.0)
    w = steady_window(records)
    first = sorted_first_tokens(records)
    assert phase_edges(first, w, workers=4) is None
    times, cumulative = sorted_tokens(records)
    assert steady_batches(times, cumulative, w, first, 4) == batch_throughputs(times, cumulative, w)


def test_requests_spread_over_their_cycle_leave_no_wave_to_close_on() -> None:
    rng = np.random.default_rng(7)
    records, workers = [], 64
    for worker in range(workers):
        t = rng.uniform(0, 10.0)   # each worker's first request at a random phase
        for i in range(12):
            length = rng.uniform(6.0, 14.0)
            sent = round(t * NS)
            records.append(RequestRecord(index=worker * 100 + i, worker=worker, scheduled_ns=sent, sent_ns=sent,
                                         first_token_ns=sent + round(0.3 * NS), end_ns=round((t + length) * NS),
                                         prompt_tokens=10, output_tokens=100))
            t += length
    w = steady_window(records)
    first = sorted_first_tokens(records)
    assert phase_edges(first, w, workers) is None
    times, cumulative = sorted_tokens(records)
    assert steady_batches(times, cumulative, w, first, workers) == batch_throughputs(times, cumulative, w)
