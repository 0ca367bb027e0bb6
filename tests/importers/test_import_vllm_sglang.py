"""vLLM (benchmark_serving.py, vllm bench serve) and SGLang (bench_serving) results, old and new key variants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources

from conftest import DATA, load


def test_vllm_v04_summary_with_its_old_keys() -> None:
    imported = load("vllm_v04.json")
    (lv,) = [x.level for x in imported.levels]
    assert (lv.mode, lv.concurrency, lv.num_requests, lv.completed) == ("burst", 1000, 1000, 1000)
    assert lv.request_throughput == pytest.approx(8.897)               # "request_inthroughput"
    assert lv.total_throughput == pytest.approx(1764.6 + 1914.6, rel=1e-3)  # output + input tok/s
    assert (lv.ttft_ms.mean, lv.ttft_ms.p50, lv.ttft_ms.p99) == (30418.2, 27764.9, 79866.1)
    assert lv.e2e_ms.mean is None and lv.achieved_concurrency == 0.0   # no E2E in that version: no Little's law
    assert (imported.engine, imported.model) == ("vllm", "meta-llama/Llama-2-7b-hf")


def test_vllm_bench_serve_summary() -> None:
    (lv,) = [x.level for x in load("vllm_bench_serve.json").levels]
    assert (lv.concurrency, lv.num_requests, lv.completed, lv.failed) == (64, 512, 510, 2)
    assert (lv.peak_output_throughput, lv.peak_in_flight) == (3520.0, 64)
    assert lv.e2e_ms.mean == 5104.0 and lv.itl_ms.p99 == 35.0
    assert lv.achieved_concurrency == pytest.approx(510 * 5.104 / 41.02)
    assert lv.decoding_concurrency == pytest.approx(510 * (5.104 - 0.4125) / 41.02)
    assert lv.errors == {"unclassified": 2}


def test_vllm_detailed_lists_become_records() -> None:
    first, old = load("vllm_detailed.jsonl").levels
    assert len(first.records) == 4 and first.level.concurrency == 2
    lv = first.level
    assert (lv.completed, lv.failed, lv.errors) == (3, 1, {"http_5xx": 1})
    assert lv.ttft_ms.p50 == pytest.approx(100.0) and lv.tpot_ms.mean == pytest.approx(160 / 3)
    assert lv.peak_decoding == 2                       # the concurrency limit, read from the request times
    assert lv.send_lag_ms.max == pytest.approx(250.0)  # queue_times: waiting for a --max-concurrency slot
    assert lv.e2e_ms.max == pytest.approx(300.0)
    rec = first.records[2]
    assert rec.sent_ns == 250_000_000 and rec.scheduled_ns == 0 and rec.first_token_ns == 370_000_000
    assert rec.chunk_ns == [370_000_000, 430_000_000, 490_000_000, 550_000_000] and rec.chunk_tokens == [1, 1, 1, 1]
    # benchmark_serving.py before start_times: a burst without a limit sent everything at t=0.
    assert all(r.sent_ns == 0 for r in old.records) and old.level.peak_decoding == 3
    assert any("sent at t=0" in n for n in old.level.notes)
    assert old.level.send_lag_ms.count == 0 and any("send lag" in n for n in old.level.notes)


def test_vllm_lists_without_send_times_under_a_limit_fall_back_to_the_summary(tmp_path: Path) -> None:
    line = json.loads((DATA / "vllm_detailed.jsonl").read_text().splitlines()[0])
    for key in ("start_times", "latencies", "queue_times"):
        del line[key]
    f = tmp_path / "r.json"
    f.write_text(json.dumps(line))
    (lv,) = import_sources([f]).levels
    assert not lv.records and lv.level.output_throughput == 20.0
    assert any("summaries used" in n for n in lv.level.notes)


def test_vllm_zero_statistics_mean_not_measured(tmp_path: Path) -> None:
    doc = json.loads((DATA / "vllm_bench_serve.json").read_text())
    doc.update({"mean_ttft_ms": 0.0, "median_ttft_ms": 0.0, "std_ttft_ms": 0.0, "p99_ttft_ms": 0.0})
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    (lv,) = import_sources([f]).levels
    assert lv.level.ttft_ms.mean is None and lv.level.decoding_concurrency == 0.0


def test_sglang_2024_line() -> None:
    imported = load("sglang_2024.jsonl")
    (lv,) = [x.level for x in imported.levels]
    assert (lv.mode, lv.concurrency, lv.completed) == ("burst", 512, 512)   # request_rate: Infinity
    assert lv.ttft_ms.p50 == 15102.8 and lv.ttft_ms.mean is None and lv.itl_ms.p50 == 190.2
    assert lv.achieved_concurrency == pytest.approx(512 * 40.2137 / 55.31)
    assert any("num_prompts not saved" in n for n in lv.notes)
    assert imported.engine == "sglang" and imported.output_len is None     # random lengths (range ratio 0)


def test_sglang_new_lines_with_and_without_details() -> None:
    imported = load("sglang.jsonl")
    summary, detailed = imported.levels
    lv = summary.level
    assert lv.achieved_concurrency == 779.1                # SGLang's own "Concurrency"
    assert (lv.peak_output_throughput, lv.peak_in_flight, lv.total_throughput) == (3401.0, 1024, 3201.68)
    assert lv.e2e_ms.p99 == 80999.0 and lv.tpot_ms.mean == 300.2
    assert len(detailed.records) == 2 and detailed.level.peak_decoding == 2
    assert (imported.input_len, imported.output_len) == (128, 128)        # random_range_ratio 1: fixed lengths


@pytest.mark.parametrize(("text", "message"), [
    ('{"duration": 1.0, "completed": 1, "num_prompts": 1, "output_throughput": 1.0}\n'
     '{"completed": 1, "num_prompts": 1, "num_prompts_x": 2, "output_throughput": 1.0, "model_id": "m"}\n',
     "r.jsonl:2: missing field 'duration'"),
    ('{"duration": 1.0, "completed": 2, "model_id": "m", "ttfts": [0.1, 0.1], "itls": [[0.1]], '
     '"output_lens": [2, 2]}', "r.jsonl:1: field 'itls' has 1 entries, 'ttfts' has 2"),
    ('{"duration": "long", "completed": 2, "num_prompts": 2, "model_id": "m"}',
     "r.jsonl:1: field 'duration' is not a number ('long')"),
    ('{"duration": 1.0, "completed": 2, "model_id": "m"', "r.jsonl:1: not valid JSON"),
])
def test_malformed_results_say_file_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        import_sources([f], "vllm")
    assert message in str(err.value) and "\n" not in str(err.value)
