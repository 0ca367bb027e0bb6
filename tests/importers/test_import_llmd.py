"""llm-d Benchmark Reports 0.2: plateau -> llm-d -> plateau keeps every metric both carry, every export is
valid against llm-d's published schema, and reports written by llm-d's own tooling import."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest
import yaml

from plateau_bench.analysis.metrics import compute_level
from plateau_bench.errors import ConfigError, ErrorClass
from plateau_bench.importers import import_sources
from plateau_bench.importers.llmd import duration_s
from plateau_bench.importers.llmd_export import llmd_yaml, to_llmd_report
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, ServerTelemetry, TargetRecord

DATA = Path(__file__).parent / "data" / "llm_d"
MS = 1_000_000
# Every figure a level and a Benchmark Report both carry.
CARRIED = ("concurrency", "mode", "num_requests", "completed", "failed", "output_throughput", "total_throughput",
           "request_throughput", "duration_s")
LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
TELEMETRY = ("running_mean", "running_min", "running_max", "waiting_mean", "waiting_min", "waiting_max",
             "kv_usage_mean", "kv_usage_min", "kv_usage_max")


def _level(concurrency: int, slots: int = 3) -> LevelResult:
    """A burst of 2 x concurrency requests over ``slots`` server slots, one failure, with server telemetry."""
    records = []
    for i in range(2 * concurrency):
        wave = i // slots
        sent = i * MS
        first = sent + (30 + 200 * wave) * MS
        chunks = [first + k * (20 + i) * MS for k in range(16)]
        records.append(RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, first_token_ns=first, chunk_ns=chunks,
                                     chunk_tokens=[1] * 16, end_ns=chunks[-1] + MS, prompt_tokens=64,
                                     output_tokens=16))
    records[-1] = msgspec.structs.replace(records[-1], output_tokens=0, first_token_ns=None, chunk_ns=[],
                                          chunk_tokens=[], error=ErrorClass.HTTP_5XX,
                                          http_status=503)
    level = compute_level(records, label=f"C={concurrency}", mode="burst", concurrency=concurrency)
    running = float(min(concurrency, slots))
    level.telemetry = ServerTelemetry(running_mean=running - 0.4, running_min=0.0, running_max=running,
                                      waiting_mean=max(0, concurrency - slots), waiting_min=0.0,
                                      waiting_max=float(concurrency), kv_usage_mean=0.21, kv_usage_min=0.0,
                                      kv_usage_max=0.4)
    level.started_at = "2026-11-05T18:00:42+00:00"
    return level


def _result() -> ResultFile:
    return ResultFile(kind="sweep", created="2026-11-05T18:00:00+00:00",
                      target=TargetRecord(engine="vllm", model="tiny"), levels=[_level(c) for c in (1, 2, 4, 8)])


def test_every_exported_report_is_valid_against_llm_d_s_published_schema() -> None:
    schema = json.loads((DATA / "br_v0_2_json_schema.json").read_text())
    docs = list(yaml.safe_load_all(llmd_yaml(_result())))
    assert len(docs) == 4
    for doc in docs:
        jsonschema.validate(json.loads(json.dumps(doc, default=str)), schema)


def test_a_level_without_server_figures_or_latencies_writes_none_of_them_as_zero() -> None:
    bare = LevelResult(label="C=4", mode="burst", concurrency=4, num_requests=10, completed=10,
                       output_throughput=100.0, duration_s=2.0)
    doc = to_llmd_report(bare, 0, ResultFile(kind="run"))
    assert "observability" not in doc["results"]
    aggregate = doc["results"]["request_performance"]["aggregate"]
    assert aggregate["latency"] == {}
    assert set(aggregate["throughput"]) == {"output_token_rate"}


@pytest.mark.parametrize("as_json", [False, True])
def test_plateau_to_llm_d_to_plateau_keeps_every_metric_both_carry(tmp_path: Path, as_json: bool) -> None:
    native = _result()
    path = tmp_path / ("reports.json" if as_json else "reports.yaml")
    if as_json:   # llm-d's tooling writes JSON too (one report per file); several documents, one per line
        text = "\n".join(json.dumps(d, default=str) for d in yaml.safe_load_all(llmd_yaml(native)))
        path.write_text(text)
    else:
        path.write_text(llmd_yaml(native))
    back = import_sources([path])
    assert back.formats == ["llm-d"] and back.model is None
    assert [lv.level.label for lv in back.levels] == [lv.label for lv in native.levels]
    for before, after in zip(native.levels, (lv.level for lv in back.levels), strict=True):
        for key in CARRIED:
            a, b = getattr(before, key), getattr(after, key)
            assert b == (pytest.approx(a, rel=1e-5) if isinstance(a, float) else a), (before.label, key)
        for key in LATENCIES:
            a, b = getattr(before, key), getattr(after, key)
            for stat in ("mean", "p50", "p90", "p99", "max"):
                assert getattr(b, stat) == pytest.approx(getattr(a, stat), rel=1e-6), (before.label, key, stat)
        for key in TELEMETRY:
            assert getattr(after.telemetry, key) == pytest.approx(getattr(before.telemetry, key)), key


def test_the_published_example_report_imports_with_its_load_and_server_figures() -> None:
    imported = import_sources([DATA / "br_v0_2_example.yaml"])
    (only,) = imported.levels
    level = only.level
    assert imported.formats == ["llm-d"] and imported.model == "Qwen/Qwen3-0.6B"
    assert level.mode == "rate" and level.rate == 10 and level.concurrency is None   # concurrency: .inf
    assert level.num_requests == 500 and level.failed == 0
    assert level.duration_s == pytest.approx(49.97206788184121)
    assert level.ttft_ms.mean == pytest.approx(36.8578234128654)   # stated in s
    # Two components report running requests (an engine and a router): only their means are summed.
    assert level.telemetry.running_mean == pytest.approx(24.6 + 12.3)
    assert level.telemetry.running_max is None
    assert level.telemetry.kv_usage_mean == pytest.approx(0.425)   # percent -> fraction


def test_a_directory_keeps_reports_and_skips_other_yaml(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("load:\n  type: constant\n  stages: [{rate: 1, duration: 5}]\n")
    (tmp_path / "benchmark_report_0.yaml").write_text(llmd_yaml(_result()))
    imported = import_sources([tmp_path])
    assert len(imported.levels) == 4
    assert any("config.yaml" in w and "not an llm-d Benchmark Report" in w for w in imported.warnings)


@pytest.mark.parametrize(("text", "message"), [
    ("version: '0.9'\nrun: {uid: a}\nresults: {request_performance: {}}\n", "version '0.9'"),
    ("version: '0.2'\nrun: {uid: a}\nresults: {observability: {}}\n", "results.request_performance.aggregate"),
    ("version: '0.2'\nrun: {uid: a}\nresults:\n  request_performance:\n    aggregate:\n      latency:\n"
     "        time_to_first_token: {units: tokens/s, mean: 1}\n", "not a time"),
    ("version: '0.2'\nrun: [unclosed\n", "not valid YAML"),
])
def test_a_broken_report_fails_in_one_line_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "report.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        import_sources([path], fmt="llm-d")
    assert message in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize(("text", "seconds"), [("PT49.5S", 49.5), ("PT1M30S", 90.0), ("PT1H", 3600.0),
                                               ("P1DT1S", 86401.0)])
def test_iso_8601_durations_are_read(text: str, seconds: float) -> None:
    assert duration_s({"time": {"duration": text}}) == pytest.approx(seconds)
