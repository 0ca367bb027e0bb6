"""Golden exposition samples parsed with the official parser and mapped to canonical quantities."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.telemetry.engines import (
    CANONICAL,
    TRTLLM,
    detect_engine,
    extract,
    extract_histograms,
    info_values,
    kind_of,
)
from plateau_bench.telemetry.exposition import _WANTED, is_wanted, parse_exposition, prefilter

from telemetry_support import golden, golden_json


def mapped(name: str) -> tuple[str | None, dict[str, float], dict[str, float]]:
    index = parse_exposition(golden(name))
    engine = detect_engine(index)
    assert engine is not None
    values, raw = extract(engine, index)
    return engine.name, values, raw


def test_vllm_v1_sums_engines_and_keeps_the_reason_breakdown_apart() -> None:
    engine, values, raw = mapped("vllm_v1.prom")
    assert engine == "vllm"
    assert values["running"] == 4 + 3
    # 12, not 24: waiting_by_reason (6+1 and 5+0) must not be added to waiting (7 and 5)
    assert values["waiting"] == 7 + 5
    # ratios are averaged over engines, and gpu_cache_usage_perc (same values) is not added in
    assert values["kv_usage"] == pytest.approx((0.62 + 0.48) / 2)
    assert values["preemptions"] == 3 + 1
    assert values["prompt_tokens"] == 51200 + 40960
    assert values["generation_tokens"] == 20480 + 18000
    assert values["kv_capacity_tokens"] == 2 * 2048 * 16
    assert "cap" not in values   # vLLM does not state max_num_seqs
    assert raw["waiting_reason_capacity"] == 6 + 5
    assert raw["waiting_reason_deferred"] == 1 + 0
    assert raw["requests_finished"] == 40 + 2 + 35 + 0
    assert raw["num_gpu_blocks"] == 4096 and raw["block_size"] == 16


def test_vllm_v0_names() -> None:
    engine, values, raw = mapped("vllm_v0.prom")
    assert engine == "vllm"
    assert values == {"running": 2, "waiting": 9, "kv_usage": 0.97, "preemptions": 12,
                      "prompt_tokens": 8192, "generation_tokens": 30000, "kv_capacity_tokens": 16000}
    assert raw["swapped"] == 1 and raw["cpu_kv_usage"] == 0.1


def test_sglang() -> None:
    engine, values, raw = mapped("sglang.prom")
    assert engine == "sglang"
    assert values == {"running": 48, "waiting": 17, "kv_usage": 0.28, "preemptions": 2,
                      "prompt_tokens": 8128902, "generation_tokens": 7557572, "kv_capacity_tokens": 442367}
    assert raw["gen_throughput"] == 2412.7 and raw["used_tokens"] == 123859
    assert raw["cache_hit_rate"] == 0.0075


def test_llamacpp_reads_the_gauge_it_types_as_a_counter() -> None:
    engine, values, raw = mapped("llamacpp.prom")
    assert engine == "llamacpp"
    assert values == {"running": 4, "waiting": 12, "kv_usage": 0.25, "prompt_tokens": 6886,
                      "generation_tokens": 3469}
    # "# TYPE llamacpp:n_busy_slots_per_decode counter": the parser renames the sample to *_total
    assert raw["busy_slots_per_decode"] == 3.5
    assert raw["decode_calls"] == 1000
    assert raw["busy_slots_total"] == 3500
    assert raw["kv_tokens"] == 2048


def test_trtllm_serves_its_cap_kv_pool_and_time_split() -> None:
    engine, values, raw = mapped("trtllm.prom")
    assert engine == "trtllm"
    assert values == {"running": 64, "waiting": 120, "kv_usage": 0.4125, "prompt_tokens": 5210 * 512,
                      "generation_tokens": 5210 * 256, "cap": 64, "kv_capacity_tokens": 4096 * 32}
    assert raw["paused"] == 0 and raw["step_token_budget"] == 8192 and raw["requests_finished"] == 5210
    assert raw["iteration_latency_s"] == pytest.approx(0.0152)
    split = extract_histograms(TRTLLM, parse_exposition(golden("trtllm.prom")))
    assert sorted(split) == ["decode_s", "e2e_s", "inference_s", "prefill_s", "queue_s", "ttft_s"]
    assert split["queue_s"].count == 100 and split["queue_s"].sum == pytest.approx(112.0)


def test_trtllm_under_dynamo_names() -> None:
    page = golden("trtllm.prom").replace("trtllm_", "trtllm:")
    index = parse_exposition(page)
    engine = detect_engine(index)
    assert engine is not None and engine.name == "trtllm"
    values, _ = extract(engine, index)
    assert (values["running"], values["cap"], values["kv_capacity_tokens"]) == (64, 64, 4096 * 32)


def test_tgi_counters_without_total_and_histogram_sums() -> None:
    engine, values, raw = mapped("tgi.prom")
    assert engine == "tgi"
    assert values == {"running": 8, "waiting": 5, "generation_tokens": 64000, "prompt_tokens": 32000}
    assert raw["requests_finished"] == 250
    assert raw["batch_inferences_prefill"] == 180 and raw["batch_inferences_decode"] == 51200
    assert raw["batch_max_tokens"] == 20480


@pytest.mark.parametrize("name", ["vllm_v1.prom", "vllm_v0.prom", "sglang.prom", "llamacpp.prom", "tgi.prom"])
def test_prefilter_changes_nothing_that_is_read(name: str) -> None:
    text = golden(name)
    full, kept = parse_exposition(text, filtered=False), parse_exposition(text)
    engine = detect_engine(full)
    assert engine is not None and detect_engine(kept) == engine
    assert extract(engine, kept) == extract(engine, full)
    assert len(prefilter(text)) < len(text)


def test_waiting_by_reason_alone_is_not_waiting() -> None:
    text = (
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 3.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0"} 2.0\n'
    )
    index = parse_exposition(text)
    engine = detect_engine(index)
    assert engine is not None
    values, raw = extract(engine, index)
    assert values == {"running": 2.0}
    assert raw == {"waiting_reason_capacity": 3.0}


def test_untyped_counters_with_and_without_total() -> None:
    untyped_total = "vllm:num_preemptions_total 5\nvllm:num_requests_running 1\n"
    untyped_bare = "vllm:num_preemptions 6\nvllm:num_requests_running 1\n"
    for text, expected in ((untyped_total, 5.0), (untyped_bare, 6.0)):
        index = parse_exposition(text)
        engine = detect_engine(index)
        assert engine is not None
        assert extract(engine, index)[0]["preemptions"] == expected


def test_nan_values_are_missing_not_zero() -> None:
    index = parse_exposition("llamacpp:kv_cache_usage_ratio NaN\nllamacpp:requests_processing 1\n")
    engine = detect_engine(index)
    assert engine is not None
    assert extract(engine, index)[0] == {"running": 1.0}


def test_cache_config_before_profiling_gives_no_capacity() -> None:
    index = parse_exposition(
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="None",engine="0"} 1.0\n'
        'vllm:num_requests_running{engine="0"} 0.0\n'
    )
    engine = detect_engine(index)
    assert engine is not None
    assert "kv_capacity_tokens" not in extract(engine, index)[0]


def test_a_config_info_that_states_max_num_seqs_gives_the_cap() -> None:
    index = parse_exposition(
        'vllm:scheduler_config_info{max_num_seqs="256",engine="0"} 1.0\n'
        'vllm:scheduler_config_info{max_num_seqs="256",engine="1"} 1.0\n'
        'vllm:num_requests_running{engine="0"} 0.0\n'
    )
    engine = detect_engine(index)
    assert engine is not None
    assert extract(engine, index)[0]["cap"] == 512


def test_detection_needs_known_names() -> None:
    assert detect_engine(parse_exposition('process_cpu_seconds_total 1.5\npython_info{version="3"} 1\n')) is None
    # an engine's prefix alone (no mapped quantity) is still recognized through the hint
    index = parse_exposition("vllm:some_new_metric 1\n", filtered=False)
    engine = detect_engine(index)
    assert engine is not None and engine.name == "vllm"


def test_malformed_text_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_exposition('vllm:num_requests_running{engine="0" 4\n')


def test_info_endpoints() -> None:
    assert info_values("llamacpp", "props", golden_json("llamacpp_props.json")) == {"cap": 4}
    assert info_values("llamacpp", "slots", golden_json("llamacpp_slots.json")) == {"cap": 3}
    # null at the top level: the scheduler's own figure in internal_states is used
    assert info_values("sglang", "server_info", golden_json("sglang_server_info.json")) == {
        "cap": 2048, "kv_capacity_tokens": 442367}
    # max_batch_size is null: no cap; the router's 429 limit is kept apart
    assert info_values("tgi", "info", golden_json("tgi_info.json")) == {
        "kv_capacity_tokens": 123456, "max_concurrent_requests": 128}
    assert info_values("llamacpp", "props", {"total_slots": "4"}) == {}
    assert info_values("vllm", "props", {"total_slots": 4}) == {}


def test_kinds() -> None:
    assert kind_of("running") == "gauge"
    assert kind_of("generation_tokens") == "counter"
    assert kind_of("cap") == "static"
    assert kind_of("waiting_reason_capacity") == "gauge"
    assert kind_of("batch_inferences_decode") == "counter"
    assert kind_of("gpu0_power_w") == "gauge"
    assert set(CANONICAL) >= {"running", "waiting", "kv_usage", "preemptions", "cap", "kv_capacity_tokens"}


label_values = st.text(alphabet="abcdefgh0123456789", min_size=1, max_size=6)


@given(st.dictionaries(label_values, st.integers(min_value=0, max_value=10_000), min_size=1, max_size=8))
def test_running_is_the_sum_over_label_sets(per_engine: dict[str, int]) -> None:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{e}"}} {n}' for e, n in per_engine.items()]
    lines += ["# TYPE vllm:generation_tokens_total counter"]
    lines += [f'vllm:generation_tokens_total{{engine="{e}"}} {n * 3}' for e, n in per_engine.items()]
    index = parse_exposition("\n".join(lines) + "\n")
    engine = detect_engine(index)
    assert engine is not None
    values, _ = extract(engine, index)
    assert values["running"] == sum(per_engine.values())
    assert values["generation_tokens"] == 3 * sum(per_engine.values())


wanted_names = sorted(_WANTED)
name_variants = st.builds(
    lambda base, cut, suffix: base[: len(base) - cut] + suffix,
    st.sampled_from([*wanted_names, "vllm:cache_config_info", "vllm:scheduler_config_info"]),
    st.sampled_from([0, 0, 0, 1, 6]),
    st.sampled_from(["", "", "_total", "_created", "_bucket", "_by_reason", "x", ":", "_info"]),
)


@given(name_variants, st.sampled_from(["sample", "help", "type"]))
def test_prefilter_keeps_a_line_exactly_when_its_name_is_wanted(name: str, form: str) -> None:
    line = {"sample": f'{name}{{engine="0",le="+Inf"}} 1.0',
            "help": f"# HELP {name} Some help text.",
            "type": f"# TYPE {name} gauge"}[form]
    assert (prefilter(line) == line + "\n") == is_wanted(name)


def test_the_api_servers_process_cpu_is_read_from_a_real_vllm_scrape() -> None:
    # vLLM 0.32.0's own /metrics (CPU build): prometheus_client's process collector, no prefix, no labels
    (_, before, _), (engine, after, _) = mapped("vllm_v1_cpu_before.prom"), mapped("vllm_v1_cpu_after.prom")
    assert engine == "vllm"
    assert (before["process_cpu"], after["process_cpu"]) == (7.75, 7.82)
    assert kind_of("process_cpu") == "counter"
    assert is_wanted("process_cpu_seconds_total")
    # a bare Python process's metrics are still no engine (test_detection_needs_known_names)
    assert detect_engine(parse_exposition("process_cpu_seconds_total 1.5\n")) is None
