from __future__ import annotations

import numpy as np
import pytest

from plateau_bench.analysis.metrics import NS
from plateau_bench.analysis.timeseries import downsample, in_flight, level_series, output_tps, server_series
from plateau_bench.records import RequestRecord

from support.builders import request_record

MS = 1_000_000


def rec(i: int, sent_s: float, end_s: float, tokens: int = 10, *, warmup: bool = False,
        chunks: bool = False) -> RequestRecord:
    sent, end = int(sent_s * NS), int(end_s * NS)
    first = sent + 100 * MS
    chunk_ns = list(np.linspace(first, end, tokens).astype(int)) if chunks else []
    return request_record(i, sent_ns=sent, end_ns=end, first_token_ns=first, chunk_ns=chunk_ns,
                          chunk_tokens=[1] * len(chunk_ns), output_tokens=tokens, warmup=warmup)


def test_in_flight_counts_requests_between_send_and_end() -> None:
    records = [rec(0, 0.0, 4.0), rec(1, 1.0, 3.0), rec(2, 2.0, 4.0)]
    s = in_flight(records, max_points=9)  # grid every 0.5 s from 0 to 4 s
    assert list(s.t_s) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0])
    # at an instant equal to an end, that request has left; at a send, it has arrived
    assert list(s.values) == [1, 1, 2, 2, 3, 3, 2, 2, 0]


def test_in_flight_ignores_warmup_and_handles_no_records() -> None:
    assert len(in_flight([])) == 0
    s = in_flight([rec(0, 0.0, 2.0), rec(1, 0.0, 10.0, warmup=True)], max_points=5)
    assert s.t_s[-1] == pytest.approx(2.0)
    assert s.values.max() == 1


def test_output_tps_keeps_every_token_and_rates_the_last_bucket_by_its_width() -> None:
    # 4 requests of 100 tokens with explicit chunks, ending at 2.5 s
    records = [rec(i, 0.0, 2.5, tokens=100, chunks=True) for i in range(4)]
    s = output_tps(records)
    widths = np.array([1.0, 1.0, 0.5])
    assert len(s) == 3
    assert float((s.values * widths).sum()) == pytest.approx(400)
    # tokens arrive evenly from 0.1 s to 2.5 s, so the last half-bucket runs at the same rate
    assert s.values[2] == pytest.approx(s.values[1], rel=0.05)


def test_output_tps_merges_a_final_sliver_into_the_previous_bucket() -> None:
    records = [rec(0, 0.0, 2.1, tokens=211, chunks=True)]
    s = output_tps(records)
    assert len(s) == 2
    assert s.t_s[-1] == pytest.approx(1.55)
    assert float(s.values[0] + s.values[1] * 1.1) == pytest.approx(211)


def test_downsample_bounds_points_and_keeps_the_mean() -> None:
    t = np.arange(1001, dtype=np.float64)
    y = np.sin(t / 50.0) + 2.0
    s = downsample(t, y, max_points=400)
    assert len(s) <= 400
    assert float(s.values.mean()) == pytest.approx(float(y.mean()), rel=0.01)
    assert s.t_s[0] >= t[0] and s.t_s[-1] <= t[-1]
    short = downsample(t[:10], y[:10], max_points=400)
    assert list(short.values) == list(y[:10])


def test_server_series_reads_present_keys_defensively() -> None:
    samples = [
        {"t_ns": 0, "running": 4, "kv_usage": 0.5, "source": "server"},
        {"t_ns": NS, "running": 8, "waiting": 2, "kv_usage": 0.75},
        {"t_ns": 2 * NS, "running": "n/a", "waiting": True},      # bad values are skipped
        {"running": 9},                                             # no time: skipped
        {"t_ns": 3 * NS, "gpu_util": 0.9},                          # another quantity: ignored
    ]
    out = server_series(samples)
    assert set(out) == {"running", "waiting", "kv_usage"}
    assert list(out["running"].values) == [4, 8]
    assert list(out["waiting"].t_s) == [1.0]
    assert list(out["kv_usage"].values) == [50.0, 75.0]  # percent
    assert server_series([{"t_ns": 0, "engine": "vllm"}]) == {}


def test_server_series_rebases_samples_from_another_clock() -> None:
    base = 10_000 * NS
    samples = [{"t_ns": base + k * NS, "running": k} for k in range(3)]
    out = server_series(samples, level_end_ns=5 * NS)
    assert list(out["running"].t_s) == [0.0, 1.0, 2.0]
    # on the level clock, times are kept as they are
    same_clock = server_series([{"t_ns": 2 * NS, "running": 1}], level_end_ns=5 * NS)
    assert list(same_clock["running"].t_s) == [2.0]


def test_level_series_combines_everything() -> None:
    records = [rec(i, 0.1 * i, 3.0 + 0.1 * i, tokens=50) for i in range(20)]
    series = level_series(records, [{"t_ns": k * NS // 2, "running": 5} for k in range(7)], max_points=50)
    assert not series.empty
    assert len(series.in_flight) == 50
    assert series.in_flight.values.max() == 20
    assert set(series.server) == {"running"}
    assert level_series([], []).empty
