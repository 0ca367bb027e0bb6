"""``plateau import`` as a user runs it, then ``plateau diagnose`` on what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.store import load_requests, load_result

from conftest import DATA
from support.loading import plateau


def _import(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Path:
    out = tmp_path / "imported"
    code, _, err = plateau(["import", *args, "--out", str(out)], capsys)
    assert code == 0, err
    return out


def _verdict(out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict: dict[str, object] = json.loads(text)["verdict"]
    return verdict


@pytest.mark.parametrize(("table", "flags"), [("run_a.md", ["--output-len", "512"]),
                                              ("run_b.md", ["--input-len", "128", "--output-len", "128"])])
def test_a_table_alone_never_gives_a_high_confidence_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             table: str, flags: list[str]) -> None:
    out = _import(tmp_path, capsys, str(DATA / table), *flags)
    result = load_result(out)
    assert result.kind == "import" and result.target.kind == "import" and result.verdict is None
    assert not load_requests(out)
    assert _verdict(out, capsys)["confidence"] != "high"


def test_run_a_table_diagnoses_the_256_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _import(tmp_path, capsys, str(DATA / "run_a.md"), "--output-len", "512")
    verdict = _verdict(out, capsys)
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", 256)
    assert verdict["confidence"] in ("low", "medium")
    assert any("waves" in str(e) for e in verdict["evidence"])  # type: ignore[attr-defined]


def test_run_b_table_diagnoses_the_1024_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _import(tmp_path, capsys, str(DATA / "run_b.md"), "--input-len", "128", "--output-len", "128")
    verdict = _verdict(out, capsys)
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", 1024)
    assert verdict["confidence"] in ("low", "medium")
    assert any("1,254" in str(e) for e in verdict["evidence"])  # type: ignore[attr-defined]


def test_per_request_sources_write_their_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _import(tmp_path, capsys, str(DATA / "vllm_detailed.jsonl"), str(DATA / "vllm_bench_serve.json"))
    result = load_result(out)
    assert [lv.label for lv in result.levels] == ["C=2", "C=3", "C=64"]
    assert {k: len(v) for k, v in load_requests(out).items()} == {"C=2": 4, "C=3": 3}
    assert result.target.model == "Qwen/Qwen2.5-7B-Instruct" and result.spec.prompt_tokens_source == "imported (vllm)"
    assert result.spec.prompt_accuracy["output_len"] == "unknown (the default is shown)"
    assert _verdict(out, capsys)["constraint"]


def test_import_json_summary_and_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ip"
    code, text, err = plateau(["import", str(DATA / "inference_perf"), "--out", str(out), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(text)
    assert doc["formats"] == ["inference-perf"] and doc["levels"] == ["rate=10", "stage 1"]
    assert doc["with_records"] == [] and "skipped" in doc["warnings"][0]


def test_errors_are_one_line_with_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "partial.jsonl"
    bad.write_text('{"duration": 2.0, "completed": 4, "num_prompts": 4, "model_id": "m"}\n{"completed": 4}\n')
    code, _, err = plateau(["import", str(bad), "--from", "vllm", "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and err.strip() == f"plateau: error: {bad}:2: missing field 'duration'"
    out = _import(tmp_path, capsys, str(DATA / "run_a.md"))
    code, _, err = plateau(["import", str(DATA / "run_a.md"), "--out", str(out)], capsys)
    assert code == 2 and "already holds results" in err
    code, _, err = plateau(["import", str(DATA / "run_a.md"), "--out", str(out), "--overwrite", "--mode", "open"],
                           capsys)
    assert code == 2 and "unknown --mode 'open'" in err
