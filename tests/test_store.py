"""Result directories: never silently replaced, attempts kept apart, a full disk is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.records import HealthSample
from plateau_bench.result import ResultFile
from plateau_bench.run_view import ReportRun
from plateau_bench.store import (
    ResultWriter,
    attempts_on_disk,
    cut_torn_line,
    kept_attempts,
    load_requests,
    load_result,
    load_runs,
)

from support.builders import level_result, request_record
from support.loading import Cli


def test_an_existing_result_directory_is_refused_unless_asked(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="run")):
        pass
    with pytest.raises(ConfigError, match=r"already holds results.*--resume.*--overwrite"):
        ResultWriter(tmp_path, ResultFile(kind="run"))
    with ResultWriter(tmp_path, ResultFile(kind="run"), existing="overwrite"):
        pass


def test_a_resume_after_a_torn_last_line_appends_on_a_line_of_its_own(tmp_path: Path) -> None:
    """A crash or a full disk mid-write leaves half a record; resuming cuts it rather than gluing the next
    record onto it (which made one level lose a readable record)."""
    with ResultWriter(tmp_path, ResultFile(kind="sweep")) as writer:
        writer.add_requests("C=2", [request_record(i, end_ns=10, output_tokens=1) for i in range(2)])
    requests = tmp_path / "requests.jsonl"
    whole = requests.read_bytes()
    requests.write_bytes(whole + whole.splitlines(keepends=True)[0][:25])   # half a third record
    with ResultWriter(tmp_path, ResultFile(kind="sweep"), existing="resume") as writer:
        writer.add_request("C=4", request_record(0, end_ns=10, output_tokens=1))
    assert requests.read_bytes().startswith(whole)
    assert [len(v) for v in load_requests(tmp_path).values()] == [2, 1]
    assert all(line.startswith(b"{") for line in requests.read_bytes().splitlines())


def test_cutting_a_torn_line_keeps_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    assert cut_torn_line(path) == 0   # no file yet
    path.write_bytes(b'{"a": 1}\n{"b"')
    assert cut_torn_line(path) == 4 and path.read_bytes() == b'{"a": 1}\n'
    assert cut_torn_line(path) == 0 and path.read_bytes() == b'{"a": 1}\n'
    path.write_bytes(b"x" * 200_000)   # no newline at all: nothing whole to keep
    assert cut_torn_line(path) == 200_000 and path.read_bytes() == b""


def test_only_the_kept_attempt_counts(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="sweep")) as writer:
        # attempt 1 was interrupted
        writer.add_requests("C=2", [request_record(i, end_ns=10, output_tokens=1) for i in range(3)], attempt=1)
        writer.add_requests("C=2", [request_record(i, end_ns=10, output_tokens=1) for i in range(2)], attempt=2)
        writer.add_level(level_result(2, attempt=2, num_requests=2))
    result = load_result(tmp_path)
    assert len(load_requests(tmp_path)["C=2"]) == 5
    assert len(load_requests(tmp_path, attempts=kept_attempts(result))["C=2"]) == 2
    assert attempts_on_disk(tmp_path) == {"C=2": 2}


def test_a_level_measured_again_replaces_the_earlier_attempt(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="sweep")) as writer:
        writer.add_level(level_result(2, level_failed=True))
        writer.add_level(level_result(2, attempt=2))
    (level,) = load_result(tmp_path).levels
    assert level.attempt == 2 and not level.level_failed


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to simulate a full disk")
def test_a_full_disk_is_one_line_and_finished_levels_are_kept(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    (out / "requests.jsonl").symlink_to("/dev/full")   # every write of request lines fails: ENOSPC
    done = cli("sim", "--concurrency", "4,8", "--out", str(out), "--overwrite")
    assert done.exit_code == 2
    assert "No space left on device" in done.output and "Traceback" not in done.output
    assert done.output.count("plateau: error") == 1
    saved = json.loads((out / "result.json").read_text())
    assert [lv["label"] for lv in saved["levels"]] == ["C=4"]


def _sweep_with_a_retried_level(out: Path) -> None:
    with ResultWriter(out, ResultFile(kind="sweep")) as writer:
        # attempt 1 was interrupted
        writer.add_requests("C=2", [request_record(i, end_ns=10, output_tokens=1) for i in range(3)], attempt=1)
        writer.add_telemetry("C=2", HealthSample(t_ns=1, cpu_pct=5.0, loop_lag_ms=0.1), attempt=1)
        writer.add_requests("C=2", [request_record(i, end_ns=10, output_tokens=1) for i in range(2)], attempt=2)
        writer.add_telemetry("C=2", HealthSample(t_ns=2, cpu_pct=6.0, loop_lag_ms=0.2), attempt=2)
        writer.add_level(level_result(2, attempt=2, num_requests=2))


def test_a_run_for_the_report_reads_the_kept_attempts_records_when_asked(tmp_path: Path) -> None:
    _sweep_with_a_retried_level(tmp_path / "tp4")
    (tmp_path / "tp4" / "requests.jsonl").rename(tmp_path / "moved.jsonl")
    (run,) = load_runs([tmp_path / "tp4" / "result.json"])   # a result.json names its directory
    assert run.name == "tp4" and run.levels[0].attempt == 2
    assert run.records().requests == {}   # read when asked, not when loaded
    (tmp_path / "moved.jsonl").rename(tmp_path / "tp4" / "requests.jsonl")
    records = run.records()
    assert len(records.level_requests("C=2")) == 2
    assert [sample["t_ns"] for sample in records.level_telemetry("C=2")] == [2]
    assert records.level_requests("C=9") == () and records.level_telemetry("C=9") == ()
    without = run.records(telemetry=False)
    assert len(without.level_requests("C=2")) == 2 and without.telemetry == {}


def test_runs_for_the_report_are_named_by_directory_with_a_suffix_on_collision(tmp_path: Path) -> None:
    for name in ("a/run", "b/run", "c/other"):
        _sweep_with_a_retried_level(tmp_path / name)
    runs = load_runs([tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c" / "other"])
    assert [r.name for r in runs] == ["run", "run (2)", "other"]
    assert len(runs[1].records().level_requests("C=2")) == 2   # a renamed run keeps its records
    with pytest.raises(ConfigError, match="no result directory given"):
        load_runs([])


def test_a_run_built_in_memory_has_no_records() -> None:
    run = ReportRun("r", Path("r"), ResultFile(kind="sweep"))
    assert run.records().requests == {} and run.records().telemetry == {}
