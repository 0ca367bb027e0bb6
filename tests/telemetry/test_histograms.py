"""The server's histograms: read from recorded vLLM pages, and their maths over a window (mean, p99, unknown).

``vllm_v1_cpu_before.prom`` / ``_after.prom`` were recorded from vLLM 0.32.0 (CPU build, the real-server
tests' tiny model, ``--max-num-seqs 4``): one request, then 16 more sent at once.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.records import HistogramSnapshot, TelemetrySample, samples_from_lines
from plateau_bench.telemetry.engines import ENGINES, HISTOGRAMS, LLAMACPP, SGLANG, VLLM, extract_histograms
from plateau_bench.telemetry.exposition import parse_exposition
from plateau_bench.telemetry.histograms import (
    MIN_OBSERVATIONS,
    histogram_delta,
    quantile,
    window_histogram,
    window_histograms,
)

from telemetry_support import golden

S = 1_000_000_000


def recorded(name: str) -> dict[str, HistogramSnapshot]:
    return extract_histograms(VLLM, parse_exposition(golden(name)))


def test_a_recorded_vllm_page_gives_every_histogram_of_the_split() -> None:
    after = recorded("vllm_v1_cpu_after.prom")
    assert set(after) == {"queue_s", "prefill_s", "decode_s", "inference_s", "e2e_s", "ttft_s", "step_tokens"}
    queue = after["queue_s"]
    assert queue.count == 17
    assert queue.sum == pytest.approx(1.6172664359946793)
    assert queue.le[:3] == [0.3, 0.5, 0.8] and queue.le[-1] == 7680.0   # +Inf is the count, not stored
    # vllm:iteration_tokens_total is a histogram despite its _total: buckets, count and sum all read
    steps = after["step_tokens"]
    assert (steps.count, steps.sum) == (165.0, 1488.0)
    assert steps.cumulative[:2] == [35.0, 156.0]


def test_the_window_over_two_recorded_pages_splits_the_sixteen_requests() -> None:
    samples = [TelemetrySample(t_ns=0, engine="vllm", histograms=recorded("vllm_v1_cpu_before.prom")),
               TelemetrySample(t_ns=10 * S, engine="vllm", histograms=recorded("vllm_v1_cpu_after.prom"))]
    windowed = window_histograms(samples, 0, 10 * S)
    queue, prefill = windowed["queue_s"], windowed["prefill_s"]
    assert queue is not None and prefill is not None
    assert queue.count == 16
    assert queue.mean == pytest.approx((1.6172664359946793 - 2.956400203402154e-05) / 16)
    # 16 requests on a cap of 4 wait in waves: queueing, not prefill, is most of their time to first token
    assert prefill.mean is not None and queue.mean is not None and queue.mean > 5 * prefill.mean


def test_data_parallel_engines_are_summed_bucket_by_bucket() -> None:
    page = "".join(
        f'vllm:request_queue_time_seconds_bucket{{engine="{e}",le="{le}"}} {n}\n'
        for e, counts in (("0", (1, 3, 3)), ("1", (0, 2, 4))) for le, n in zip(("0.3", "1.0", "+Inf"), counts,
                                                                              strict=True))
    page += "".join(f'vllm:request_queue_time_seconds_{s}{{engine="{e}"}} {v}\n'
                    for e in ("0", "1") for s, v in (("count", 3 if e == "0" else 4), ("sum", 1.5)))
    queue = extract_histograms(VLLM, parse_exposition("# TYPE vllm:request_queue_time_seconds histogram\n" + page))
    assert queue["queue_s"] == HistogramSnapshot(le=[0.3, 1.0], cumulative=[1.0, 5.0], count=7.0, sum=3.0)


def test_label_sets_with_different_bounds_are_not_summed() -> None:
    page = ('vllm:request_queue_time_seconds_bucket{engine="0",le="0.3"} 1\n'
            'vllm:request_queue_time_seconds_bucket{engine="1",le="0.5"} 1\n'
            'vllm:request_queue_time_seconds_count{engine="0"} 1\nvllm:request_queue_time_seconds_sum{engine="0"} 1\n')
    assert extract_histograms(VLLM, parse_exposition(page)) == {}


def test_each_engine_maps_only_what_it_publishes() -> None:
    assert all(key in HISTOGRAMS for engine in ENGINES for key, _ in engine.histograms)
    assert extract_histograms(LLAMACPP, parse_exposition(golden("llamacpp.prom"))) == {}
    assert {key for key, _ in SGLANG.histograms} == {"queue_s", "e2e_s", "ttft_s"}
    sglang = extract_histograms(SGLANG, parse_exposition(golden("sglang.prom")))
    assert "ttft_s" in sglang and sglang["ttft_s"].count > 0


def snap(cumulative: list[float], count: float, total: float, le: list[float] | None = None) -> HistogramSnapshot:
    return HistogramSnapshot(le=le or [0.1, 0.5, 1.0], cumulative=cumulative, count=count, sum=total)


def test_mean_is_the_difference_of_sums_over_the_difference_of_counts() -> None:
    points = [(0, snap([0, 0, 0], 0, 0.0)), (10 * S, snap([0, 10, 10], 10, 3.0))]
    h = window_histogram(points, 0, 10 * S)
    assert h is not None and h.mean == pytest.approx(0.3) and h.count == 10


def test_a_window_inside_the_scrapes_takes_its_share_of_the_growth() -> None:
    points = [(0, snap([0, 0, 0], 0, 0.0)), (10 * S, snap([0, 20, 20], 20, 8.0))]
    delta = histogram_delta(points, 5 * S, 10 * S)
    assert delta is not None and delta.count == pytest.approx(10) and delta.sum == pytest.approx(4.0)


def test_too_few_observations_are_unknown_not_zero() -> None:
    points = [(0, snap([0, 0, 0], 0, 0.0)), (S, snap([0, 2, 2], MIN_OBSERVATIONS - 1, 1.0))]
    h = window_histogram(points, 0, S)
    assert h is not None and h.mean is None and h.p99 is None and h.count == MIN_OBSERVATIONS - 1


def test_no_overlap_or_one_scrape_is_no_window() -> None:
    points = [(0, snap([0, 0, 0], 0, 0.0)), (S, snap([0, 9, 9], 9, 1.0))]
    assert window_histogram(points, 2 * S, 3 * S) is None
    assert window_histogram(points[:1], 0, S) is None


def test_p99_interpolates_inside_its_bucket() -> None:
    # 100 observations: 50 in (0, 0.1], 50 in (0.5, 1.0]; rank 99 is the 49th of 50 in the last bucket
    h = snap([50, 50, 100], 100, 40.0)
    assert quantile(h, 0.99) == (pytest.approx(0.5 + 0.5 * 49 / 50), False)
    assert quantile(h, 0.5) == (pytest.approx(0.1), False)


def test_p99_in_the_inf_bucket_is_above_the_last_bound() -> None:
    h = window_histogram([(0, snap([0, 0, 0], 0, 0.0)), (S, snap([10, 10, 10], 20, 60.0))], 0, S)
    assert h is not None and h.p99 == 1.0 and h.p99_above


def test_p99_is_bounded_by_what_the_sum_allows() -> None:
    # ten observations of 1 ms in vLLM's first queue bucket (0-0.3 s): interpolation alone says ~0.3 s
    h = window_histogram([(0, snap([0, 0], 0, 0.0, [0.3, 0.5])), (S, snap([10, 10], 10, 0.01, [0.3, 0.5]))], 0, S)
    assert h is not None and h.p99 is not None and h.p99 <= 0.01


def test_a_restart_counts_on_from_before_it() -> None:
    points = [(0, snap([0, 5, 5], 5, 1.0)), (S, snap([0, 10, 10], 10, 2.0)),
              (2 * S, snap([0, 3, 3], 3, 0.9))]   # restarted, then 3 more
    delta = histogram_delta(points, 0, 2 * S)
    assert delta is not None and delta.count == 8 and delta.sum == pytest.approx(1.9)


def test_changed_bounds_make_the_window_unknown() -> None:
    points = [(0, snap([0, 0, 0], 0, 0.0)), (S, snap([0, 9, 9], 9, 1.0, [0.2, 0.5, 1.0]))]
    assert histogram_delta(points, 0, S) is None


@given(st.lists(st.floats(min_value=0.0, max_value=3.0), min_size=MIN_OBSERVATIONS, max_size=200))
def test_window_figures_agree_with_the_observations(values: list[float]) -> None:
    le = [0.1, 0.25, 0.5, 1.0, 2.0]
    cumulative = [float(sum(1 for v in values if v <= b)) for b in le]
    points = [(0, snap([0.0] * len(le), 0, 0.0, le)), (S, snap(cumulative, len(values), sum(values), le))]
    h = window_histogram(points, 0, S)
    assert h is not None and h.mean == pytest.approx(sum(values) / len(values))
    true_p99 = sorted(values)[math.ceil(0.99 * len(values)) - 1]
    assert h.p99 is not None
    if h.p99_above:
        assert true_p99 > le[-1] and h.p99 == le[-1]
    else:   # inside the bucket that holds the true p99
        upper = next(b for b in le if true_p99 <= b)
        lower = max([0.0, *(b for b in le if b < upper)])
        assert lower - 1e-9 <= h.p99 <= upper + 1e-9


def test_histograms_survive_telemetry_jsonl_and_a_broken_one_is_dropped_alone() -> None:
    sample = TelemetrySample(t_ns=5, engine="vllm", values={"running": 4.0},
                             histograms={"queue_s": snap([1, 2, 3], 3, 0.7)})
    line = sample.to_line()
    assert samples_from_lines([line]) == [sample]
    line["histograms"]["prefill_s"] = {"le": [0.1], "cumulative": [1, 2], "count": 2, "sum": 1.0}
    line["histograms"]["decode_s"] = "not a histogram"
    assert samples_from_lines([line]) == [sample]
    assert "histograms" not in TelemetrySample(t_ns=1, values={"running": 1.0}).to_line()


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@given(st.lists(st.tuples(st.sampled_from(["_bucket", "_count", "_sum"]),
                          st.dictionaries(st.sampled_from(["engine", "model_name", "le", "x"]),
                                          st.text(alphabet='ab0\\"\n}{,= .+', max_size=6), max_size=3),
                          st.floats(min_value=0, max_value=1e9, allow_nan=False)), min_size=1, max_size=8))
def test_the_histogram_fast_path_reads_what_the_official_parser_reads(
        lines: list[tuple[str, dict[str, str], float]]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    text = "".join("vllm:request_queue_time_seconds" + suffix
                   + ("{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in labels.items()) + "}" if labels else "")
                   + f" {value!r}\n" for suffix, labels, value in lines)
    official: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            official.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    assert parse_exposition(text) == official
