"""GuideLLM 0.8's files, as the real tool wrote them (``data/guidellm_0_8``), imported and diagnosed.

The sample: GuideLLM 0.8.1 (``guidellm run``, report metadata v2) against ``plateau serve-sim --max-num-seqs 3
--speed 0.5`` (preset tiny), ``--profile kind=concurrent --override profile.streams 2,4,8 --constraint
kind=max_requests,count=16 --data kind=synthetic_text,prompt_tokens=64,output_tokens=64``, one worker process,
``--output`` json, csv, html and yaml, its console saved as ``guidellm.log``. Kept as written but for the HTML
page's stylesheet and script bodies (its data block is whole) and the YAML report, which is GuideLLM's
``yaml.dump`` of the JSON one and is made from it here (``_yaml_twin``).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources
from plateau_bench.importers.guidellm import TOKEN_CHUNKS

from conftest import DATA, load
from support.loading import plateau

SAMPLE = DATA / "guidellm_0_8"
LEVELS = ["C=2", "C=4", "C=8"]
CAP = 3


def _doc() -> dict[str, object]:
    doc: dict[str, object] = json.loads((SAMPLE / "benchmarks.json").read_text())
    return doc


@functools.cache
def _yaml_text() -> str:
    # GuideLLM's yaml.dump with the C emitter where PyYAML has it (the same text, seconds sooner).
    return yaml.dump(_doc(), Dumper=getattr(yaml, "CDumper", yaml.Dumper))


def _yaml_twin(directory: Path) -> Path:
    """``benchmarks.yaml`` as GuideLLM writes it (``yaml.dump`` of the report) in ``directory``."""
    path = directory / "benchmarks.yaml"
    path.write_text(_yaml_text())
    return path


def _verdict(paths: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = tmp_path / "imported"
    code, _, err = plateau(["import", *map(str, paths), "--out", str(out)], capsys)
    assert code == 0, err
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict: dict[str, object] = json.loads(text)["verdict"]
    return verdict


def test_the_directory_reads_the_report_and_skips_the_rest() -> None:
    imported = load("guidellm_0_8")
    assert imported.formats == ["guidellm"] and [lv.level.label for lv in imported.levels] == LEVELS
    assert [(lv.level.mode, lv.level.concurrency, lv.level.completed, len(lv.records)) for lv in imported.levels] \
        == [("steady", c, 16, 16) for c in (2, 4, 8)]
    assert (imported.model, imported.input_len, imported.output_len) == ("tiny", 64, 64)
    skipped = {Path(w.split(": ", 1)[0].removeprefix("skipped ")).name: w for w in imported.warnings}
    assert set(skipped) == {"benchmarks.csv", "benchmarks.html", "guidellm.log"}
    assert "CSV twin" in skipped["benchmarks.csv"] and "HTML report" in skipped["benchmarks.html"]
    assert "console output" in skipped["guidellm.log"]


def test_the_directory_names_the_admission_cap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    verdict = _verdict([SAMPLE], tmp_path, capsys)
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", CAP), verdict


def test_a_request_decodes_until_its_last_token_not_the_stream_end() -> None:
    # GuideLLM stamps request_end after the usage chunk and [DONE]: ended there, requests overlap the ones
    # admitted in their place and the busiest instant reads above the cap.
    imported = load("guidellm_0_8/benchmarks.json")
    assert [lv.level.peak_decoding for lv in imported.levels] == [2, CAP, CAP]
    bench = _doc()["benchmarks"][0]  # type: ignore[index]
    first = bench["requests"]["successful"][0]
    record = imported.levels[0].records[0]
    timings = first["info"]["timings"]
    assert record.chunk_ns[-1] < record.end_ns
    assert (record.end_ns - record.chunk_ns[-1]) / 1e9 == pytest.approx(
        timings["request_end"] - timings["last_token_iteration"], abs=1e-6)
    assert sum(record.chunk_tokens) == record.output_tokens == 64 and len(record.chunk_ns) == TOKEN_CHUNKS
    gaps = [(b - a) / 1e6 / k for a, b, k in zip(record.chunk_ns, record.chunk_ns[1:], record.chunk_tokens[1:],
                                                  strict=False)]
    assert gaps == pytest.approx([first["inter_token_latency_ms"]] * len(gaps), rel=1e-4)  # GuideLLM's own ITL


def test_the_csv_alone_gives_the_same_levels_from_summaries() -> None:
    records = load("guidellm_0_8/benchmarks.json").levels
    summaries = load("guidellm_0_8/benchmarks.csv")
    assert summaries.formats == ["guidellm"] and [lv.level.label for lv in summaries.levels] == LEVELS
    assert (summaries.model, summaries.input_len, summaries.output_len) == ("tiny", 64, 64)
    for full, summary in zip(records, summaries.levels, strict=True):
        s, r = summary.level, full.level
        assert not summary.records and (s.completed, s.failed) == (r.completed, r.failed) == (16, 0)
        for field in ("output_throughput", "achieved_concurrency", "decoding_concurrency", "duration_s"):
            assert getattr(s, field) == pytest.approx(getattr(r, field), rel=0.1), field
        assert s.e2e_ms.mean == pytest.approx(r.e2e_ms.mean, rel=0.01)
        assert s.tpot_ms.mean == pytest.approx(r.itl_ms.mean, rel=0.01)   # GuideLLM's ITL: its last-token TPOT


def test_the_csv_alone_names_the_cap_within_ten_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Summaries only: the decoding batch by Little's law on tokens (output tok/s x TPOT) holds at the cap.
    verdict = _verdict([SAMPLE / "benchmarks.csv"], tmp_path, capsys)
    assert verdict["constraint"] == "admission_cap", verdict
    assert abs(float(verdict["estimated_cap"]) - CAP) <= 0.1 * CAP, verdict   # type: ignore[arg-type]


@pytest.mark.slow   # PyYAML reads the half-megabyte report in seconds
def test_the_yaml_report_reads_as_the_json_one(tmp_path: Path) -> None:
    alone = import_sources([_yaml_twin(tmp_path)])
    json_levels = load("guidellm_0_8/benchmarks.json").levels
    assert [lv.level.label for lv in alone.levels] == LEVELS
    assert [lv.records for lv in alone.levels] == [lv.records for lv in json_levels]
    beside = tmp_path / "run"
    shutil.copytree(SAMPLE, beside)
    _yaml_twin(beside)
    imported = import_sources([beside])
    assert [lv.level.label for lv in imported.levels] == LEVELS          # read once, from the JSON
    assert any("benchmarks.yaml: the YAML twin" in w for w in imported.warnings)


@pytest.mark.parametrize(("name", "says"), [
    ("benchmarks.html", "GuideLLM 0.8.1's HTML report page, not results"),
    ("guidellm.log", "GuideLLM's console output or log"),
])
def test_a_companion_named_alone_says_what_it_is_in_one_line(name: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        import_sources([SAMPLE / name])
    message = str(err.value)
    assert "\n" not in message and says in message and "import the benchmarks.json" in message


def test_a_broken_report_names_the_field_and_the_guidellm_version(tmp_path: Path) -> None:
    doc = _doc()
    del doc["benchmarks"][1]["config"]["strategy"]  # type: ignore[index]
    bad = tmp_path / "benchmarks.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"missing field 'config.strategy.type_'.*GuideLLM 0\.8\.1's report "
                                          r"\(metadata v2\)"):
        import_sources([bad])
    doc["benchmarks"] = []
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=r"no benchmarks in it.*GuideLLM 0\.8\.1"):
        import_sources([bad])


def test_a_broken_csv_names_the_column_and_the_guidellm_version(tmp_path: Path) -> None:
    rows = list(csv.reader(io.StringIO((SAMPLE / "benchmarks.csv").read_text())))
    rows[4][rows[1].index("Strategy")] = "burst@8"
    bad = tmp_path / "benchmarks.csv"
    with bad.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    with pytest.raises(ConfigError, match=r"benchmarks.csv:5: strategy 'burst@8' is not one GuideLLM writes.*"
                                          r"GuideLLM 0\.8\.1's benchmarks\.csv"):
        import_sources([bad])


def test_sampled_requests_fall_back_to_guidellm_s_summaries(tmp_path: Path) -> None:
    doc = _doc()
    bench = doc["benchmarks"][2]  # type: ignore[index]
    bench["config"]["sample_size"] = 4
    bench["requests"]["successful"] = bench["requests"]["successful"][:4]
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    levels = import_sources([path]).levels
    assert [bool(lv.records) for lv in levels] == [True, True, False]
    level = levels[2].level
    assert (level.label, level.completed) == ("C=8", 16) and any("sampled" in n for n in level.notes)


def test_a_trace_strategy_is_an_open_loop_level(tmp_path: Path) -> None:
    doc = _doc()
    doc["benchmarks"] = doc["benchmarks"][:1]  # type: ignore[index]
    doc["benchmarks"][0]["config"]["strategy"] = {"type_": "trace", "worker_count": 1,  # type: ignore[index]
                                                  "max_concurrency": None, "time_scale": 1.0}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    (level,) = import_sources([path]).levels
    assert (level.level.label, level.level.mode, level.level.rate) == ("trace", "rate", None)


def test_the_older_one_row_csv_header_reads_too(tmp_path: Path) -> None:
    # GuideLLM v0.1-v0.3 wrote one header row: "Name" for the strategy, then "<Status> <metric> <statistic>".
    stats = "[min, 0.1, 1, 5, 10, 25, 75, 90, 95, 99, max]"
    metrics = {"Requests per second": 4.0, "Request concurrency": 3.5, "Request latency": 0.9,
               "Prompt token count": 256, "Output token count": 128, "Time to first token ms": 100.0,
               "Inter token latency ms": 6.3, "Output tokens per second": 512.0, "Tokens per second": 1536.0}
    header = ["Type", "Run Id", "Id", "Name", "Start Time", "End Time", "Duration", "Successful Requests"]
    row = ["generative_benchmark", "r", "b", "concurrent@4", "2025-06-05 12:00:00", "2025-06-05 12:00:30", "30.0",
           "120"]
    for name, value in metrics.items():
        header += [f"Successful {name} {s}" for s in ("mean", "median", "std dev", stats)]
        row += [str(value), str(value), "0.0", json.dumps([value] * 11)]
    header += ["Errored Requests"]
    row += ["2"]
    path = tmp_path / "benchmarks.csv"
    path.write_text(",".join(f'"{h}"' for h in header) + "\n" + ",".join(f'"{c}"' for c in row) + "\n")
    (lv,) = import_sources([path]).levels
    level = lv.level
    assert (level.label, level.mode, level.completed, level.failed) == ("C=4", "steady", 120, 2)
    assert (level.output_throughput, level.achieved_concurrency, level.e2e_ms.mean, level.tpot_ms.p99) == \
        (512.0, 3.5, 900.0, 6.3)
    assert level.output_tokens == 120 * 128
