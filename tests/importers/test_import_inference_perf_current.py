"""inference-perf 0.7's reports as the tool wrote them (data/inference_perf_0_7, see its README): a run of four
concurrency stages against a server whose admission cap was 3, and a run of two rate stages."""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.errors import ConfigError, PlateauError
from plateau_bench.importers import import_sources

from conftest import DATA, load
from support.loading import plateau

RUN = DATA / "inference_perf_0_7"
STAGES = [(1, 3), (2, 4), (4, 8), (8, 16)]   # (concurrency, requests) of each stage, as its config says
PER_REQUEST = "per_request_lifecycle_metrics.json"


def _copy(tmp_path: Path, *names: str) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    for name in names:
        shutil.copy(RUN / name, out / name)
    return out


def _entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((RUN / PER_REQUEST).read_text())
    return entries


def test_the_reports_directory_makes_one_level_per_stage_from_its_requests() -> None:
    imported = load("inference_perf_0_7")
    assert imported.formats == ["inference-perf"]
    assert [(lv.level.concurrency, lv.level.num_requests, len(lv.records)) for lv in imported.levels] == \
        [(c, n, n) for c, n in STAGES]
    assert all(lv.level.mode == "steady" and lv.level.failed == 0 for lv in imported.levels)
    assert [lv.level.peak_decoding for lv in imported.levels] == [1, 2, 3, 3]
    # the server's counts (16 a request), not the client's re-tokenized text (45-62)
    assert (imported.input_len, imported.output_len) == (64, 16)
    assert all(r.output_tokens == 16 for lv in imported.levels for r in lv.records)
    assert all(lv.level.goodput_rps and lv.level.goodput_rps > 0 for lv in imported.levels)
    assert any("goodput by inference-perf's SLOs" in n for n in imported.levels[0].level.notes)


def test_every_file_that_is_not_a_level_is_skipped_with_its_reason() -> None:
    warnings = [w for w in load("inference_perf_0_7").warnings if w.startswith("skipped ")]
    # One warning per reason, naming every file it applies to: file name -> the warning that names it.
    skipped = {name.rsplit("/", 1)[-1]: w for w in warnings
               for name in w.removeprefix("skipped ").split(": ")[0].split(", ")}
    assert set(skipped) == {"stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json",
                            "stage_2_lifecycle_metrics.json", "stage_3_lifecycle_metrics.json",
                            "summary_lifecycle_metrics.json", "config.yaml", "validation.json", "console.txt",
                            "README", *(f"inference-perf.partial.stage_{i}.yaml" for i in range(4))}
    assert "read together with per_request_lifecycle_metrics.json" in skipped["stage_2_lifecycle_metrics.json"]
    assert "configuration" in skipped["config.yaml"] and "console output" in skipped["console.txt"]
    assert "checks of its own reports" in skipped["validation.json"]


def test_the_verdict_names_the_servers_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "imported"
    code, _, err = plateau(["import", str(RUN), "--out", str(out)], capsys)
    assert code == 0, err
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict = json.loads(text)["verdict"]
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", 3), verdict


def test_the_per_request_file_alone_takes_its_stages_from_the_reports_beside_it() -> None:
    imported = load(f"inference_perf_0_7/{PER_REQUEST}")
    assert [(lv.level.concurrency, lv.level.num_requests) for lv in imported.levels] == STAGES
    assert all("settings from stage_" in " ".join(lv.level.notes) for lv in imported.levels)


def test_without_stage_reports_the_pauses_between_stages_split_them(tmp_path: Path) -> None:
    (lv1, lv2, lv4, lv8) = import_sources([_copy(tmp_path, PER_REQUEST) / PER_REQUEST]).levels
    assert [(lv.level.concurrency, lv.level.num_requests) for lv in (lv1, lv2, lv4, lv8)] == STAGES
    assert "concurrency 8 inferred" in " ".join(lv8.level.notes)
    assert (lv4.level.peak_decoding, lv8.level.peak_decoding) == (3, 3)


def test_stated_stage_ids_group_the_requests_in_any_order(tmp_path: Path) -> None:
    entries = sorted(_entries(), key=lambda e: e["start_time"])
    ids = [stage for stage, (_, n) in enumerate(STAGES) for _ in range(n)]
    tagged = [{**e, "stage_id": sid} for e, sid in zip(entries, ids, strict=True)]
    random.Random(7).shuffle(tagged)
    f = tmp_path / PER_REQUEST
    f.write_text(json.dumps(tagged))
    levels = import_sources([f]).levels
    assert [lv.level.num_requests for lv in levels] == [n for _, n in STAGES]
    assert all("by the stage id its requests state" in lv.level.notes[1] for lv in levels)
    tagged[0].pop("stage_id")
    f.write_text(json.dumps(tagged))
    with pytest.raises(ConfigError, match=r"states no stage id while others do"):
        import_sources([f])


def test_the_stage_reports_alone_are_summary_levels(tmp_path: Path) -> None:
    run = _copy(tmp_path, *(f"stage_{i}_lifecycle_metrics.json" for i in range(4)), "summary_lifecycle_metrics.json")
    imported = import_sources([run])
    assert [(lv.level.concurrency, lv.level.completed, lv.records) for lv in imported.levels] == \
        [(c, n, []) for c, n in STAGES]
    c4 = imported.levels[2].level
    assert c4.output_tokens == 8 * 16                    # the server's count
    assert c4.goodput_rps == pytest.approx(3.2008, rel=1e-3)
    notes = " ".join(c4.notes)
    assert "counts the client's re-tokenized text" in notes and "TPOT and ITL per server token" in notes
    # TPOT per server token: output tok/s counts the server's tokens, so tok/s x TPOT is the decoding batch.
    ok = json.loads((run / "stage_2_lifecycle_metrics.json").read_text())["successes"]
    per_client_token_ms = ok["latency"]["time_per_output_token"]["mean"] * 1000
    ratio = ok["output_len"]["mean"] / ok["output_tokens"]["mean"]
    assert ratio > 1.05 and c4.tpot_ms.mean == pytest.approx(per_client_token_ms * ratio)
    assert any("summary_lifecycle_metrics.json" in w for w in imported.warnings)


def test_rate_stages_become_rate_levels() -> None:
    imported = load("inference_perf_0_7_rate")
    assert [(lv.level.mode, lv.level.rate, lv.level.num_requests, len(lv.records)) for lv in imported.levels] == \
        [("rate", 1.0, 3, 3), ("rate", 3.0, 6, 6)]


@pytest.mark.parametrize(("name", "what"), [
    ("config.yaml", "an inference-perf configuration"),
    ("validation.json", r"inference-perf's checks of its own reports \(validation.json, 0.7 or later\)"),
    ("console.txt", "inference-perf's console output"),
])
def test_a_file_that_holds_no_results_is_refused_in_one_line(name: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as caught:
        import_sources([RUN / name])
    assert "\n" not in str(caught.value) and "per_request_lifecycle_metrics.json" in str(caught.value)


def test_a_stage_s_benchmark_report_alone_imports_as_llm_d_with_its_stage_s_figures() -> None:
    report = import_sources([RUN / "inference-perf.partial.stage_2.yaml"])
    lifecycle = import_sources([RUN / "stage_2_lifecycle_metrics.json"])
    (level,), (stage,) = (lv.level for lv in report.levels), (lv.level for lv in lifecycle.levels)
    assert report.formats == ["llm-d"] and level.label == "stage 2"
    assert level.num_requests == stage.num_requests
    assert level.ttft_ms.mean == pytest.approx(stage.ttft_ms.mean, rel=1e-9)


@pytest.mark.parametrize(("drop", "message"), [
    (("successes", "count"), r"\(0.7 or later, by its keys\): missing field 'successes.count'"),
    (("successes",), r"\(0.6 or later, by its keys\): missing field 'successes'"),
])
def test_a_stage_report_without_its_counts_names_the_version_and_the_field(drop: tuple[str, ...], message: str,
                                                                          tmp_path: Path) -> None:
    report = json.loads((RUN / "stage_1_lifecycle_metrics.json").read_text())
    parent = report["successes"] if len(drop) == 2 else report
    del parent[drop[-1]]
    f = tmp_path / "stage_1_lifecycle_metrics.json"
    f.write_text(json.dumps(report))
    with pytest.raises(ConfigError, match=r"stage_1_lifecycle_metrics.json:1: an inference-perf lifecycle report "
                                          + message):
        import_sources([f])


def test_a_request_without_its_end_names_the_version_and_the_entry(tmp_path: Path) -> None:
    entries = _entries()
    del entries[5]["end_time"]
    f = tmp_path / PER_REQUEST
    f.write_text(json.dumps(entries))
    with pytest.raises(ConfigError, match=r"per-request report \(0.7 or later, by its keys\): entry 5 has no "
                                          r"number 'end_time'"):
        import_sources([f])


def _entry(start: float, first: float, step: float, tokens: int) -> dict[str, Any]:
    times = [first + i * step for i in range(tokens)]
    return {"start_time": start, "end_time": times[-1] + 0.0005, "request": "{}", "response": "",
            "info": {"request_metrics": {"text": {"input_tokens": 8}},
                     "response_metrics": {"output_tokens": tokens, "chunk_times": times,
                                          "server_usage": {"prompt_tokens": 8, "completion_tokens": tokens}}},
            "error": None}


def test_a_moments_overlap_of_two_processes_stamps_is_not_a_larger_batch(tmp_path: Path) -> None:
    """One slot: the second request's first token (stamped by another worker process) reads 0.1 ms before
    the first one's last; a step is 10 ms."""
    f = tmp_path / PER_REQUEST
    f.write_text(json.dumps([_entry(0.0, 0.01, 0.01, 10), _entry(0.05, 0.0999, 0.01, 10)]))
    (lv,) = import_sources([f]).levels
    assert lv.level.peak_decoding == 1
    assert any(n.startswith("peak decoding 1: ") for n in lv.level.notes)


numbers = st.one_of(st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 1e300, -0.0, 2**63]))
values = st.one_of(numbers, st.text(max_size=12), st.none(), st.booleans(), st.lists(numbers, max_size=3),
                   st.dictionaries(st.text(max_size=4), numbers, max_size=2))


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node[:3]) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


@pytest.mark.parametrize("name", [PER_REQUEST, "stage_2_lifecycle_metrics.json"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_changed_value_imports_or_is_one_line(name: str, data: st.DataObject, tmp_path: Path) -> None:
    """A file of the run with one value changed (with its stage reports beside it): levels with figures a
    measurement can have, or one line."""
    run = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    shutil.copytree(RUN, run)
    doc = json.loads((run / name).read_text())
    path = data.draw(st.sampled_from(_leaves(doc)))
    (run / name).write_text(json.dumps(_replace(doc, path, data.draw(values))))
    try:
        imported = import_sources([run / name])
    except PlateauError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    for lv in (item.level for item in imported.levels):
        assert lv.concurrency is None or lv.concurrency >= 1
        assert lv.completed >= 0 and lv.failed >= 0 and lv.peak_decoding >= 0
        assert all(math.isfinite(x) and x >= 0 for x in (lv.output_throughput, lv.duration_s, lv.wall_s))


def _as_0_5(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as inference-perf 0.5 wrote it: the response's figures under ``info.response_info``."""
    info = entry["info"]
    return {**entry, "info": {"input_tokens": info["request_metrics"]["text"]["input_tokens"],
                              "response_info": info["response_metrics"], "extra_info": {}, "lora_adapter": None}}


def test_release_0_5_entries_import_the_same(tmp_path: Path) -> None:
    run = _copy(tmp_path, *(f"stage_{i}_lifecycle_metrics.json" for i in range(4)))
    (run / PER_REQUEST).write_text(json.dumps([_as_0_5(e) for e in _entries()]))
    now, then = load("inference_perf_0_7").levels, import_sources([run]).levels
    assert [(lv.level.concurrency, lv.level.peak_decoding, lv.level.output_tokens) for lv in then] == \
        [(lv.level.concurrency, lv.level.peak_decoding, lv.level.output_tokens) for lv in now]
    broken = [_as_0_5(e) for e in _entries()]
    del broken[2]["start_time"]
    (run / PER_REQUEST).write_text(json.dumps(broken))
    with pytest.raises(ConfigError, match=r"per-request report \(0.5, by its keys\): entry 2 has no number"):
        import_sources([run / PER_REQUEST])
