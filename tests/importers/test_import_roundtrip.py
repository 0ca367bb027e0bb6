"""Native -> vllm-json -> import keeps every metric vLLM's result format carries."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from plateau_bench.analysis.metrics import compute_level
from plateau_bench.errors import ErrorClass
from plateau_bench.importers import import_sources, to_vllm_json, vllm_json_lines
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, TargetRecord
from plateau_bench.store import ResultWriter, kept_attempts, load_requests, load_result

from conftest import load

MS = 1_000_000
CARRIED = ("num_requests", "completed", "failed", "output_tokens", "input_tokens", "duration_s", "wall_s",
           "output_throughput", "total_throughput", "peak_output_throughput", "request_throughput",
           "achieved_concurrency", "decoding_concurrency", "peak_in_flight", "peak_decoding", "errors")
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "send_lag_ms")


def _records() -> list[RequestRecord]:
    """A burst of 8 over 4 slots: chunked streams, one stream without chunk times, two failures."""
    out = []
    for i in range(6):
        sent = (i // 4) * 900 * MS + i * MS
        first = sent + (80 + 15 * i) * MS
        chunks = [first + k * (40 + i) * MS for k in range(12)]
        out.append(RequestRecord(index=i, scheduled_ns=i * MS, sent_ns=sent, first_token_ns=first, chunk_ns=chunks,
                                 chunk_tokens=[1] * 12, end_ns=chunks[-1] + 2 * MS, prompt_tokens=100 + i,
                                 output_tokens=12))
    out.append(RequestRecord(index=6, scheduled_ns=6 * MS, sent_ns=906 * MS, first_token_ns=1000 * MS,
                             end_ns=1500 * MS, prompt_tokens=90, output_tokens=11))
    out.append(RequestRecord(index=7, scheduled_ns=7 * MS, sent_ns=907 * MS, end_ns=950 * MS, prompt_tokens=90,
                             error=ErrorClass.HTTP_5XX, error_detail="HTTP 503: Service Unavailable", http_status=503))
    out.append(RequestRecord(index=8, scheduled_ns=8 * MS, sent_ns=908 * MS, first_token_ns=990 * MS,
                             chunk_ns=[990 * MS], chunk_tokens=[1], end_ns=1800 * MS, prompt_tokens=90,
                             output_tokens=1, error=ErrorClass.TIMEOUT, error_detail="timed out after 0.9 s"))
    return out


def _same(native: LevelResult, back: LevelResult) -> None:
    for key in CARRIED:
        a, b = getattr(native, key), getattr(back, key)
        assert b == (pytest.approx(a, rel=1e-6) if isinstance(a, float) else a), key
    for key in LATENCIES:
        a, b = msgspec.structs.asdict(getattr(native, key)), msgspec.structs.asdict(getattr(back, key))
        assert b == pytest.approx(a, rel=1e-6), key


def test_native_to_vllm_json_to_import_keeps_every_metric(tmp_path: Path) -> None:
    records = _records()
    native = compute_level(records, label="C=4", mode="burst", concurrency=4)
    run = tmp_path / "native"
    with ResultWriter(run, ResultFile(kind="run", target=TargetRecord(engine="vllm", model="m"))) as writer:
        writer.add_requests("C=4", records)
        writer.add_level(native)
    result = load_result(run)
    text = vllm_json_lines(result, load_requests(run, attempts=kept_attempts(result)))
    exported = tmp_path / "vllm.jsonl"
    exported.write_text(text)
    doc = json.loads(text)
    assert doc["max_concurrency"] == 4 and doc["num_prompts"] == 9 and doc["backend"] == "vllm"
    assert "std_ttft_ms" not in doc and len(doc["ttfts"]) == 9
    imported = import_sources([exported])
    (lv,) = imported.levels
    assert imported.formats == ["vllm"] and imported.engine == "vllm" and len(lv.records) == 9
    _same(native, lv.level)
    assert lv.level.errors == {"http_5xx": 1, "timeout": 1}


def test_a_summary_level_exports_what_it_has_and_nothing_else(tmp_path: Path) -> None:
    levels = [lv.level for lv in load("run_a.md", output_len=512).levels]
    docs = [to_vllm_json(lv) for lv in levels]
    assert all("max_output_tokens_per_s" not in d and "mean_ttft_ms" not in d for d in docs)
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in docs))
    back = {lv.level.concurrency: lv.level for lv in import_sources([f]).levels}
    for lv in levels:
        again = back[lv.concurrency]
        for key in ("num_requests", "completed", "output_tokens", "duration_s", "wall_s", "output_throughput",
                    "request_throughput", "achieved_concurrency"):
            assert getattr(again, key) == pytest.approx(getattr(lv, key)), key
        assert again.e2e_ms.mean == pytest.approx(lv.e2e_ms.mean) and again.e2e_ms.p99 == lv.e2e_ms.p99
