"""The files SGLang 0.5.x (``sglang.benchmark.serving``, ``steady_state_serving``) and vLLM 0.32
(``vllm bench serve``, ``vllm bench sweep serve``, the Rust ``vllm-bench`` client) write today.

The samples under data/sglang_current/ and data/vllm_current/ are what the tools wrote against
``serve-sim --max-num-seqs 5`` (their READMEs say how; the Rust client's are written from its source)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources

from conftest import DATA, load
from support.loading import plateau

SIM_CAP = 5   # serve-sim's --max-num-seqs when the samples were written


def _verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str], *sources: Path) -> dict[str, Any]:
    out = tmp_path / "imported"
    code, _, err = plateau(["import", *map(str, sources), "--out", str(out)], capsys)
    assert code == 0, err
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict: dict[str, Any] = json.loads(text)["verdict"]
    return verdict


def _line(name: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((DATA / name).read_text().splitlines()[0])
    return value


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "r.jsonl") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc) + "\n")
    return f


# -- SGLang 0.5.x ----------------------------------------------------------------------------------
def test_sglang_detailed_lines_rebuild_their_closed_loop_and_give_the_exact_cap(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    imported = load("sglang_current")   # its README has no result suffix: not read
    levels = {lv.level.concurrency: lv for lv in imported.levels}
    assert sorted(levels) == [2, 10, 20] and imported.formats == ["sglang"]
    for c, lv in levels.items():
        assert (lv.level.mode, lv.level.completed, lv.level.failed, len(lv.records)) == ("burst", 3 * c, 0, 3 * c)
        assert any("rebuilt from its closed loop" in n for n in lv.level.notes)
        assert lv.level.peak_in_flight == c          # the client's own limit, from the rebuilt sends
    assert [levels[c].level.peak_decoding for c in (2, 10, 20)] == [2, SIM_CAP, SIM_CAP]
    assert (imported.engine, imported.input_len, imported.output_len) == ("sglang", 64, 48)
    verdict = _verdict(tmp_path, capsys, DATA / "sglang_current")
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", SIM_CAP)


def test_sglang_rust_client_lines_keep_their_summaries_under_a_limit(tmp_path: Path) -> None:
    levels = {lv.level.concurrency: lv for lv in load("sglang_current_rust").levels}
    assert sorted(levels) == [2, 10, 20]
    for c, lv in levels.items():   # its tasks reach the limit in no fixed order: no send times to rebuild
        assert (lv.level.completed, lv.records) == (3 * c, [])
        assert any("SGLang's Rust client" in n and "summaries used" in n for n in lv.level.notes)
        assert lv.level.output_throughput == pytest.approx(_line(f"sglang_current_rust/rust_c{c}.jsonl")
                                                           ["output_throughput"], rel=0.1)
    doc = _line("sglang_current_rust/rust_c2.jsonl")
    del doc["duration"]
    with pytest.raises(ConfigError, match=r"SGLang's Rust client \(sglang.benchmark.rust_client, 0.5.x\)"):
        import_sources([_write(tmp_path, doc)], "sglang")


def test_sglang_steady_state_report_and_goodput() -> None:
    run, window = load("sglang_current_steady").levels
    lv = run.level
    assert (lv.mode, lv.concurrency, lv.completed, lv.num_requests) == ("burst", 10, 40, 40)
    assert lv.goodput_rps == pytest.approx(40.61, rel=1e-3)
    assert any("goodput (--goodput ttft:200 tpot:20 ms)" in n for n in lv.notes)
    assert lv.peak_in_flight == 10                   # per-second count of 40, capped at --max-concurrency
    w = window.level
    assert (w.mode, w.concurrency, w.completed, w.peak_in_flight) == ("steady", 10, 11, 10)
    assert w.duration_s == pytest.approx(0.2401, rel=1e-3) and w.achieved_concurrency == pytest.approx(9.974, rel=1e-3)
    assert w.output_throughput == pytest.approx(1985.9, rel=1e-3) and "steady window" in w.label


def test_sglang_summary_without_details_is_read_within_its_own_figures(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c20.jsonl")
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        del doc[key]
    (lv,) = import_sources([_write(tmp_path, doc)]).levels
    assert not lv.records and lv.level.concurrency == 20
    assert lv.level.output_throughput == pytest.approx(doc["output_throughput"], rel=0.1)
    assert lv.level.ttft_ms.p50 == pytest.approx(doc["median_ttft_ms"], rel=0.1)


def test_sglang_lists_whose_replay_does_not_fit_keep_the_summaries(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c10.jsonl")
    doc["duration"] *= 2      # half the run unaccounted for: not a plain closed loop
    (lv,) = import_sources([_write(tmp_path, doc)]).levels
    assert not lv.records and any("summaries used" in n for n in lv.level.notes)


def test_sglang_trace_replay_is_an_open_loop_level(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c10.jsonl")
    doc.update({"request_rate": "trace", "dataset_name": "mooncake"})
    (lv,) = import_sources([_write(tmp_path, doc)]).levels
    assert lv.level.mode == "rate" and not lv.records and any("trace replay" in n for n in lv.level.notes)


def test_sglang_server_info_states_the_cap_and_kv_cache(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c10.jsonl")
    doc["server_info"] = {"max_total_num_tokens": 81920, "internal_states": [
        {"effective_max_running_requests_per_dp": 3}, {"effective_max_running_requests_per_dp": 3}]}
    (lv,) = import_sources([_write(tmp_path, doc)]).levels
    assert (lv.level.telemetry.cap, lv.level.telemetry.kv_capacity_tokens) == (6.0, 81920.0)


def test_sglang_line_it_cannot_read_names_the_client_version_and_the_field(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c2.jsonl")
    del doc["duration"]
    with pytest.raises(ConfigError) as err:
        import_sources([_write(tmp_path, doc)], "sglang")
    message = str(err.value)
    assert "missing field 'duration'" in message and "sglang.benchmark.serving (0.5.x)" in message
    assert "\n" not in message


def test_a_result_missing_what_every_generation_writes_says_what_it_resembles(tmp_path: Path) -> None:
    doc = _line("sglang_current/sglang_c2.jsonl")
    del doc["duration"], doc["completed"]
    with pytest.raises(ConfigError) as err:
        import_sources([_write(tmp_path, doc)])
    message = str(err.value)
    assert "looks like SGLang sglang.benchmark.serving (0.5.x) but has no 'duration' or 'completed'" in message
    assert "\n" not in message


# -- vLLM 0.32 ------------------------------------------------------------------------------------
def test_vllm_bench_serve_032_detailed_files_give_the_exact_cap(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    imported = load("vllm_current")
    levels = {lv.level.concurrency: lv for lv in imported.levels}
    assert sorted(levels) == [2, 10, 20] and (imported.engine, imported.model) == ("vllm", "tiny")
    for c, lv in levels.items():
        assert (lv.level.completed, lv.level.failed, len(lv.records)) == (3 * c, 0, 3 * c)
    assert [levels[c].level.peak_decoding for c in (2, 10, 20)] == [2, SIM_CAP, SIM_CAP]
    assert levels[10].level.goodput_rps == pytest.approx(41.06, rel=1e-3) and levels[2].level.goodput_rps is None
    verdict = _verdict(tmp_path, capsys, DATA / "vllm_current")
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", SIM_CAP)


def test_vllm_sweep_experiment_reads_its_runs_and_skips_what_repeats_them() -> None:
    imported = load("vllm_current_sweep/exp")
    assert sorted(lv.level.concurrency or 0 for lv in imported.levels) == [2, 10, 20]
    assert all(lv.level.completed == 3 * (lv.level.concurrency or 0) and not lv.records for lv in imported.levels)
    skipped = " ".join(imported.warnings)
    assert skipped.count("summary.json") == 3 and skipped.count("warmup.json") == 3 and "summary.csv" in skipped
    combo = "vllm_current_sweep/exp/BENCH--max_concurrency=10-num_prompts=30"
    (one,) = load(combo).levels
    assert (one.level.concurrency, one.level.completed) == (10, 30)
    run = json.loads((DATA / combo / "run=0.json").read_text())
    assert one.level.output_throughput == pytest.approx(run["output_throughput"], rel=0.1)
    assert one.level.ttft_ms.p50 == pytest.approx(run["median_ttft_ms"], rel=0.1)


def test_vllm_rust_client_steady_state_window_and_multi_turn_turns() -> None:
    multi, single = load("vllm_current_rust").levels
    lv = multi.level
    assert (lv.mode, lv.concurrency, lv.completed, lv.failed, lv.errors) == ("burst", 4, 23, 1, {"http_5xx": 1})
    assert [t.turn for t in lv.turns] == [0, 1, 2] and [t.requests for t in lv.turns] == [8, 8, 7]
    assert lv.turns[2].ttft_ms.p50 == 44.0 and lv.turns[1].prompt_tokens_mean == pytest.approx(1664 / 8)
    assert lv.ttft_ms.p99 == 64.0 and any("8 conversations of 3 turns, 4 at once" in n for n in lv.notes)
    assert (single.level.concurrency, len(single.records), single.level.peak_decoding) == (10, 30, SIM_CAP)
    assert any(n.startswith("steady-state window (vllm-bench): 0.61 s") for n in single.level.notes)


def test_vllm_result_it_cannot_read_names_the_client(tmp_path: Path) -> None:
    doc = json.loads((DATA / "vllm_current_rust/vllm-bench-multi-turn.json").read_text())
    del doc["multi_turn_concurrency"]
    with pytest.raises(ConfigError) as err:
        import_sources([_write(tmp_path, doc, "r.json")])
    message = str(err.value)
    assert "missing field 'multi_turn_concurrency'" in message and "vLLM's Rust client vllm-bench" in message
