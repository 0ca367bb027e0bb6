"""The server's own time split of a level (``analysis.time_split``) and the verdict's line from it
(``analysis.diagnosis_split``)."""

from __future__ import annotations

import msgspec
import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.time_split import server_time_split
from plateau_bench.records import HistogramSnapshot, TelemetrySample
from plateau_bench.result import Latency, LevelResult, ServerPhase, ServerTelemetry, ServerTimeSplit

from support.builders import level_result

S = 1_000_000_000
LE = [0.3, 0.5, 1.0, 2.5, 5.0]


def hist(count: float, total: float, cumulative: list[float]) -> HistogramSnapshot:
    return HistogramSnapshot(le=LE, cumulative=cumulative, count=count, sum=total)


def samples(**after: HistogramSnapshot) -> list[TelemetrySample]:
    zero = {key: hist(0, 0.0, [0.0] * len(LE)) for key in after}
    return [TelemetrySample(t_ns=0, engine="vllm", histograms=zero),
            TelemetrySample(t_ns=10 * S, engine="vllm", histograms=after)]


def test_milliseconds_and_the_time_outside_the_engine() -> None:
    split = server_time_split(
        samples(queue_s=hist(20, 40.0, [0, 0, 0, 20, 20]), prefill_s=hist(20, 2.0, [20, 20, 20, 20, 20])),
        0, 10 * S, client_ttft_mean_ms=2250.0, engine=None)
    assert split is not None and split.engine == "vllm"
    assert split.queue_ms is not None and split.queue_ms.mean == pytest.approx(2000.0)
    assert split.prefill_ms is not None and split.prefill_ms.mean == pytest.approx(100.0)
    assert split.outside_engine_ms == pytest.approx(150.0)
    assert split.decode_ms is None and split.step_tokens is None   # not published: None, not a zero phase


def test_too_few_requests_leave_the_means_and_the_gap_unknown() -> None:
    split = server_time_split(samples(queue_s=hist(3, 6.0, [0, 0, 0, 3, 3]), prefill_s=hist(3, 0.3, [3] * 5)),
                              0, 10 * S, client_ttft_mean_ms=2250.0, engine="vllm")
    assert split is not None and split.queue_ms == ServerPhase(observations=3)
    assert split.outside_engine_ms is None


def test_no_histograms_no_split() -> None:
    assert server_time_split([TelemetrySample(t_ns=0, values={"running": 1.0})], 0, S,
                             client_ttft_mean_ms=5.0, engine="vllm") is None


def capped_levels(cap: int = 256) -> list[LevelResult]:
    """A sweep held by an admission cap of 256 (as in test_diagnosis): TTFT grows by queueing above it."""
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        b = min(c, cap)
        tpot = 14 + 0.195 * b
        ttft = 50.0 if c <= cap else 50 + (c - cap) / cap * 33_000
        out.append(level_result(
            c, b * 1000 / tpot, num_requests=max(c, 10), completed=max(c, 10), decoding_concurrency=b * 0.98,
            peak_decoding=b, achieved_concurrency=float(c), wall_s=10.0,
            ttft_ms=Latency(mean=ttft, p50=ttft, p99=ttft * 1.1), tpot_ms=Latency(mean=tpot, p50=tpot, p99=tpot),
            itl_ms=Latency(mean=tpot, p50=tpot, p99=tpot, max=tpot * 1.5),
            telemetry=ServerTelemetry(running_max=float(b), waiting_mean=float(max(c - cap, 0)), kv_usage_max=0.41)))
    return out


def with_split(levels: list[LevelResult], queue_ms: float, prefill_ms: float, client_ms: float = 99_000.0) -> None:
    levels[-1].time_split = ServerTimeSplit(
        engine="vllm", queue_ms=ServerPhase(observations=500, mean=queue_ms),
        prefill_ms=ServerPhase(observations=500, mean=prefill_ms), client_ttft_mean_ms=client_ms,
        outside_engine_ms=client_ms - queue_ms - prefill_ms)


def test_the_verdict_says_where_the_grown_ttft_went() -> None:
    levels = capped_levels()
    with_split(levels, queue_ms=98_000.0, prefill_ms=400.0)
    v = diagnose(levels, engine="vllm")
    assert v.constraint == "admission_cap"
    line = next(e for e in v.evidence if "outside the engine" in e)
    assert line == ("at C=1024: TTFT 99.0 s = 98.0 s queue + 400 ms prefill + 600 ms outside the engine (means, "
                    "by the server's own histograms; TTFT 50 ms at C=1)")


def test_with_preemptions_the_line_says_the_queue_stops_at_the_first_scheduling() -> None:
    levels = capped_levels()
    with_split(levels, queue_ms=2.0, prefill_ms=98_000.0)
    levels[-1].telemetry = msgspec.structs.replace(levels[-1].telemetry, preemptions_delta=39.0)
    line = next(e for e in diagnose(levels, engine="vllm").evidence if "outside the engine" in e)
    assert line.endswith("TTFT 50 ms at C=1; 39 preemptions in the window: the server stamps queue time at a "
                         "request's first scheduling, so a preempted request's wait counts as prefill or decode)")


def test_no_line_without_a_split_or_when_ttft_did_not_grow() -> None:
    assert not any("outside the engine" in e for e in diagnose(capped_levels()).evidence)
    levels = capped_levels()
    with_split(levels, queue_ms=98_000.0, prefill_ms=400.0)
    levels[0] = msgspec.structs.replace(levels[0], ttft_ms=levels[-1].ttft_ms)   # as slow at C=1: no growth
    assert not any("outside the engine" in e for e in diagnose(levels).evidence)
