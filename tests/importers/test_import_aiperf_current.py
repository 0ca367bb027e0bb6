"""AIPerf 0.13.0 as it writes its results (tests/importers/data/aiperf_0_13, see its README): a concurrency
sweep against a server capped at 5 running requests, and two trials of one level against a server that
answers 429. The directories as written, each kind of file alone, and the verdict the levels give."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.errors import ConfigError, PlateauError
from plateau_bench.importers import import_sources

from conftest import DATA, load
from support.loading import plateau

SWEEP = "aiperf_0_13/sweep"
TRIALS = "aiperf_0_13/trials"
CAP = 5


def _verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str], *sources: str,
             flags: tuple[str, ...] = ()) -> dict[str, object]:
    out = tmp_path / "imported"
    code, _, err = plateau(["import", *(str(DATA / s) for s in sources), *flags, "--out", str(out)], capsys)
    assert code == 0, err
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict: dict[str, object] = json.loads(text)["verdict"]
    return verdict


def test_the_sweep_directory_is_one_level_per_concurrency_from_its_records() -> None:
    imported = load(SWEEP)
    assert [lv.level.label for lv in imported.levels] == ["C=2", "C=4", "C=8", "C=16"]
    for lv, c in zip(imported.levels, (2, 4, 8, 16), strict=True):
        level = lv.level
        assert (level.mode, level.concurrency, level.num_requests, level.completed, level.failed) == \
            ("burst", c, 16, 16, 0)
        assert len(lv.records) == 18 and sum(r.warmup for r in lv.records) == 2   # --warmup-request-count 2
        assert level.peak_decoding == min(c, CAP) and level.peak_in_flight == c
    assert (imported.model, imported.input_len, imported.output_len) == ("tiny", 32, 32)


def test_the_server_s_token_counts_are_kept_and_aiperf_s_own_noted() -> None:
    (lv, *_) = load(SWEEP).levels
    assert {r.output_tokens for r in lv.records if r.ok} == {32}                 # usage_completion_tokens
    assert any("AIPerf's tokenizer counted" in n for n in lv.level.notes)         # its osl: 106 a request


def _skipped(warnings: list[str]) -> dict[str, int]:
    """``skipped A, B, C and 6 more: why`` lines as {why: number of files}."""
    out = {}
    for line in warnings:
        names, why = line.removeprefix("skipped ").split(": ", 1)
        listed, _, more = names.partition(" and ")
        out[why] = len(listed.split(", ")) + (int(more.split()[0]) if more else 0)
    return out


def test_every_companion_file_is_skipped_with_its_reason() -> None:
    skipped = {why.split(" (")[0].split(":")[0]: n for why, n in _skipped(load(SWEEP).warnings).items()}
    assert skipped == {
        "the CSV twin of the JSON results next to it": 9,           # per run, per-value aggregate, sweep
        "the request inputs": 4, "AIPerf's time-sliced metrics": 8, "AIPerf's scrape of the server's /metrics, "
        "not client measurements": 8, "AIPerf's phase manifest": 4, "AIPerf's console text": 4,
        "AIPerf's raw request/response log": 4, "AIPerf's run configuration": 4, "not a file plateau import reads": 5,
        "AIPerf's per-phase copies of the run's exports": 4,
        "AIPerf's summaries over runs whose own files are read": 5,  # 4 per-value aggregates and the sweep's
    }


def test_per_request_data_gives_the_exact_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = _verdict(tmp_path, capsys, SWEEP)
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", CAP), verdict


@pytest.mark.parametrize("source", [f"{SWEEP}/sweep_aggregate/profile_export_aiperf_sweep.json",
                                    f"{SWEEP}/sweep_aggregate/profile_export_aiperf_sweep.csv",
                                    f"{SWEEP}/sweep_aggregate", f"{SWEEP}/aggregate"])
def test_the_summaries_alone_give_the_cap_within_10_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            source: str) -> None:
    imported = load(source)
    assert [lv.level.label for lv in imported.levels] == ["C=2", "C=4", "C=8", "C=16"]
    assert all(not lv.records and lv.level.completed == 16 for lv in imported.levels)
    verdict = _verdict(tmp_path, capsys, source)
    cap = verdict["estimated_cap"]
    assert verdict["constraint"] == "admission_cap" and isinstance(cap, int) and abs(cap - CAP) <= 0.1 * CAP, verdict


def test_a_rate_sweep_s_aggregate_is_one_rate_level_per_value() -> None:
    imported = load("aiperf_0_13/rate_sweep_aggregate")
    assert [(lv.level.label, lv.level.mode, lv.level.rate) for lv in imported.levels] == \
        [("rate=4", "rate", 4.0), ("rate=8", "rate", 8.0)]
    assert _skipped(imported.warnings) == {"the CSV twin of the JSON results next to it": 1}   # its first column: rate


@pytest.mark.parametrize("name", ["profile_export.jsonl", "profile_export_aiperf.json", "profile_export_aiperf.csv"])
def test_each_profile_export_alone_is_the_level(name: str) -> None:
    (lv,) = load(f"{SWEEP}/concurrency_8/{name}").levels
    assert (lv.level.label, lv.level.completed, lv.level.output_tokens) == ("C=8", 16, 512)
    assert bool(lv.records) == name.endswith(".jsonl")        # the records take the load from run_config.json


@pytest.mark.parametrize(("name", "what"), [
    ("profile_export_console.txt", "console text"), ("run_config.json", "run configuration"),
    ("inputs.json", "request inputs"), ("server_metrics_export.json", "AIPerf 0.13.0 server metrics export"),
    ("server_metrics_export.csv", "/metrics"), ("profile_export_raw.jsonl", "raw request/response log"),
    ("profile_export_aiperf_timeslices.json", "AIPerf time-sliced metrics"),
    ("profile_export_aiperf_timeslices.csv", "time-sliced"), ("phase_manifest.json", "phase manifest"),
    ("phases/warmup/profile_export_aiperf.json", "AIPerf 0.13.0 profile export (schema 1.4) of the warm-up phase"),
    ("phases/warmup/profile_export_aiperf.csv", "of the warm-up phase"),
])
def test_a_file_without_results_says_what_it_is_in_one_line(name: str, what: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(f"{SWEEP}/concurrency_8/{name}")
    message = str(caught.value)
    assert what in message and "\n" not in message, message


def test_records_without_their_configuration_name_the_schema_1_field(tmp_path: Path) -> None:
    shutil.copy(DATA / SWEEP / "concurrency_8" / "profile_export.jsonl", tmp_path)
    with pytest.raises(ConfigError, match=r"missing field 'input_config\.phases\[profiling\]\.concurrency'"):
        import_sources([tmp_path / "profile_export.jsonl"])
    (lv,) = load(f"{SWEEP}/concurrency_8/profile_export.jsonl", concurrency=8).levels
    assert lv.level.concurrency == 8


def test_trials_are_one_level_each_with_their_failures() -> None:
    imported = load(TRIALS)
    first, second = (lv.level for lv in imported.levels)
    assert (first.label, first.completed, first.failed, first.errors) == ("C=8", 6, 6, {"http_429": 6})
    assert (second.label, second.completed, second.failed, second.errors) == ("C=8 #2", 9, 3, {"http_429": 3})
    assert any("profile_export_aiperf_aggregate.json" in w for w in imported.warnings)


def test_the_trials_confidence_aggregate_needs_the_load_it_does_not_record() -> None:
    source = f"{TRIALS}/aggregate/profile_export_aiperf_aggregate.json"
    with pytest.raises(ConfigError, match=r"AIPerf 0\.13\.0 confidence aggregate over 2 runs.*--concurrency"):
        load(source)
    (lv,) = load(source, concurrency=8).levels
    assert (lv.level.concurrency, lv.level.completed, lv.level.failed) == (8, 8, 4)    # means 7.5 and 4.5


# One value changed anywhere in a file (the shared fuzz test's idea, on the current layout): a level with
# figures a measurement can have, or one line saying what is wrong.
FUZZED = [f"{SWEEP}/concurrency_8/profile_export_aiperf.json", f"{SWEEP}/concurrency_8/profile_export.jsonl",
          f"{SWEEP}/sweep_aggregate/profile_export_aiperf_sweep.json",
          f"{SWEEP}/aggregate/concurrency_8/profile_export_aiperf_aggregate.json"]
_numbers = st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True),
                     st.sampled_from([0, -1, 1e300, 2**63]))
_values = st.one_of(_numbers, st.text(max_size=8), st.none(), st.booleans(), st.lists(_numbers, max_size=2),
                    st.dictionaries(st.text(max_size=4), _numbers, max_size=2))


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _paths(v, (*at, k))] or [at]
    if isinstance(node, list):
        return [p for i, v in enumerate(node[:3]) for p in _paths(v, (*at, i))] or [at]
    return [at]


def _set(node: Any, at: tuple[Any, ...], value: Any) -> Any:
    if not at:
        return value
    node[at[0]] = _set(node[at[0]], at[1:], value)
    return node


@pytest.mark.parametrize("name", FUZZED)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_one_changed_value_imports_or_is_one_line(name: str, data: st.DataObject, tmp_path: Path) -> None:
    source = DATA / name
    if (source.parent / "run_config.json").exists():      # the records take their load from it
        shutil.copy(source.parent / "run_config.json", tmp_path)
    lines = source.read_text().splitlines()
    docs = [json.loads(line) for line in lines] if name.endswith(".jsonl") else [json.loads(source.read_text())]
    k = data.draw(st.integers(0, len(docs) - 1))
    docs[k] = _set(docs[k], data.draw(st.sampled_from(_paths(docs[k]))), data.draw(_values))
    target = tmp_path / source.name
    target.write_text("\n".join(json.dumps(d) for d in docs) if name.endswith(".jsonl") else json.dumps(docs[0]))
    try:
        imported = import_sources([target])
    except PlateauError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    for lv in (item.level for item in imported.levels):
        assert lv.concurrency is None or lv.concurrency >= 1
        assert lv.completed >= 0 and lv.failed >= 0
        assert all(math.isfinite(x) and x >= 0 for x in (lv.output_throughput, lv.duration_s, lv.request_throughput))
