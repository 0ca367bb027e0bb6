"""GuideLLM, AIPerf and inference-perf exports (older and newer layouts), and format detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources

from conftest import DATA, load


def test_guidellm_v03_requests_in_its_window() -> None:
    imported = load("guidellm_v03.json")
    (lv,) = imported.levels
    level = lv.level
    assert (level.mode, level.concurrency) == ("steady", 2) and level.duration_s == pytest.approx(2.0)
    assert (level.completed, level.failed, level.errors) == (3, 1, {"http_5xx": 1})
    assert level.cut_off_at_stop == 1 and len(lv.records) == 4       # the incomplete one is not a failure
    assert level.ttft_ms.p50 == pytest.approx(100.0, abs=1e-3)
    assert level.tpot_ms.p50 == pytest.approx(800 / 127, rel=1e-4)    # (end - first token) / (tokens - 1)
    assert level.peak_decoding == 2
    assert (imported.input_len, imported.output_len, imported.model) == (256, 128, "Qwen/Qwen2.5-7B-Instruct")


def test_guidellm_v05_records_and_a_sampled_benchmark() -> None:
    sync, rate = load("guidellm_v05.json").levels
    assert (sync.level.mode, sync.level.concurrency, len(sync.records)) == ("steady", 1, 2)
    assert sync.level.ttft_ms.mean == pytest.approx(50.0, abs=1e-3)
    # Two of 120 requests kept (--sample-requests): the level comes from GuideLLM's distributions.
    lv = rate.level
    assert not rate.records and (lv.mode, lv.rate, lv.completed) == ("rate", 4.0, 120)
    assert lv.achieved_concurrency == 3.4 and lv.output_throughput == 64.0 and lv.total_throughput == 576.0
    assert lv.tpot_ms.mean == 52.0                                    # its inter-token latency
    assert lv.e2e_ms.p99 == pytest.approx(1100.0)                     # request_latency, seconds
    assert lv.output_tokens == 1920 and lv.input_tokens == 15360


def test_guidellm_without_a_strategy_names_the_benchmark_line(tmp_path: Path) -> None:
    doc = json.loads((DATA / "guidellm_v05.json").read_text())
    del doc["benchmarks"][1]["config"]["strategy"]
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(doc, indent=2))
    starts = [i for i, ln in enumerate(f.read_text().splitlines(), 1) if ln == "    {"]   # the benchmarks' own
    line = starts[1]
    with pytest.raises(ConfigError, match=rf"benchmarks.json:{line}: missing field 'config.strategy.type_'"):
        import_sources([f])


def test_aiperf_artifact_directory_is_one_level_from_its_records() -> None:
    imported = load("aiperf_run")
    (lv,) = imported.levels
    level = lv.level
    assert (level.mode, level.concurrency) == ("burst", 2)            # from the aggregate's input_config
    assert (level.num_requests, level.completed, level.errors) == (4, 3, {"http_429": 1})   # warm-up left out
    assert len(lv.records) == 5 and sum(r.warmup for r in lv.records) == 1
    assert level.ttft_ms.max == pytest.approx(200.0)                  # 0.2 "sec" in one record
    assert level.itl_ms.mean == pytest.approx(100.0) and level.peak_decoding == 2
    assert imported.model == "Qwen/Qwen2.5-7B-Instruct"


def test_aiperf_aggregates_new_and_old_layout() -> None:
    (new,) = load("aiperf_run/profile_export_aiperf.json").levels
    assert not new.records and new.level.errors == {"http_429": 1}
    assert new.level.e2e_ms.p90 == 380.0 and new.level.tpot_ms.mean == 100.0
    (old,) = load("aiperf_records_layout.json").levels
    lv = old.level
    assert (lv.concurrency, lv.completed, lv.duration_s) == (32, 320, 30.77)
    assert lv.output_throughput == 2662.4 and lv.e2e_ms.p50 == 3050.6 and lv.ttft_ms.p99 == 380.0


def test_aiperf_records_alone_need_the_concurrency() -> None:
    with pytest.raises(ConfigError, match=r"missing field 'input_config\.loadgen\.concurrency'"):
        load("aiperf_run/profile_export.jsonl")
    (lv,) = load("aiperf_run/profile_export.jsonl", concurrency=2).levels
    assert lv.level.concurrency == 2 and lv.level.completed == 3


def test_inference_perf_stages_new_and_old_keys() -> None:
    imported = load("inference_perf")
    assert any("per_request_lifecycle_metrics.json" in w for w in imported.warnings)
    stage0, stage1 = (lv.level for lv in imported.levels)
    assert (stage0.mode, stage0.rate, stage0.completed, stage0.failed) == ("rate", 10.0, 597, 3)
    assert stage0.errors == {"http_5xx": 2, "http_4xx": 1}
    assert stage0.ttft_ms.p50 == pytest.approx(200.0) and stage0.e2e_ms.p99 == pytest.approx(8700.0)
    assert stage0.duration_s == 60.2 and stage0.output_tokens == 97610
    assert stage1.label == "stage 1" and stage1.e2e_ms.p50 == pytest.approx(3800.0)   # "p50", not "median"
    assert stage1.output_throughput == 3200.0 and stage1.e2e_ms.p99 is None


def test_inference_perf_per_request_report() -> None:
    (lv,) = load("inference_perf/per_request_lifecycle_metrics.json", concurrency=3).levels
    assert (lv.level.mode, lv.level.concurrency, lv.level.completed, lv.level.failed) == ("steady", 3, 2, 1)
    assert lv.level.errors == {"http_5xx": 1} and lv.level.ttft_ms.mean == pytest.approx(100.0)


@pytest.mark.parametrize(("name", "fmt"), [
    ("vllm_v04.json", "vllm"), ("vllm_bench_serve.json", "vllm"), ("vllm_detailed.jsonl", "vllm"),
    ("sglang_2024.jsonl", "sglang"), ("sglang.jsonl", "sglang"), ("guidellm_v03.json", "guidellm"),
    ("guidellm_v05.json", "guidellm"), ("aiperf_run", "aiperf"), ("aiperf_records_layout.json", "aiperf"),
    ("inference_perf", "inference-perf"), ("run_a.md", "table"), ("run_a.csv", "table"),
])
def test_the_format_is_detected_from_the_content(name: str, fmt: str) -> None:
    assert load(name, concurrency=2).formats == [fmt]


def test_unknown_json_asks_for_from(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text('\n{"hello": 1}')
    with pytest.raises(ConfigError, match=r"x.json:2: not a result file plateau import knows .* --from"):
        import_sources([f])
    with pytest.raises(ConfigError, match="unknown --from 'genai-perf'"):
        import_sources([f], "genai-perf")
