"""Result directories: never silently replaced, attempts kept apart, a full disk is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from plateau_bench.cli import app
from plateau_bench.errors import ConfigError
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.store import (
    ResultWriter,
    attempts_on_disk,
    kept_attempts,
    load_requests,
    load_result,
)


def _record(index: int) -> RequestRecord:
    return RequestRecord(index=index, scheduled_ns=0, sent_ns=0, end_ns=10, output_tokens=1)


def test_an_existing_result_directory_is_refused_unless_asked(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="run")):
        pass
    with pytest.raises(ConfigError, match=r"already holds results.*--resume.*--overwrite"):
        ResultWriter(tmp_path, ResultFile(kind="run"))
    with ResultWriter(tmp_path, ResultFile(kind="run"), existing="overwrite"):
        pass


def test_only_the_kept_attempt_counts(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="sweep")) as writer:
        writer.add_requests("C=2", [_record(0), _record(1), _record(2)], attempt=1)   # interrupted
        writer.add_requests("C=2", [_record(0), _record(1)], attempt=2)
        writer.add_level(LevelResult(label="C=2", mode="steady", concurrency=2, attempt=2, num_requests=2))
    result = load_result(tmp_path)
    assert len(load_requests(tmp_path)["C=2"]) == 5
    assert len(load_requests(tmp_path, attempts=kept_attempts(result))["C=2"]) == 2
    assert attempts_on_disk(tmp_path) == {"C=2": 2}


def test_a_level_measured_again_replaces_the_earlier_attempt(tmp_path: Path) -> None:
    with ResultWriter(tmp_path, ResultFile(kind="sweep")) as writer:
        writer.add_level(LevelResult(label="C=2", mode="steady", concurrency=2, level_failed=True))
        writer.add_level(LevelResult(label="C=2", mode="steady", concurrency=2, attempt=2))
    (level,) = load_result(tmp_path).levels
    assert level.attempt == 2 and not level.level_failed


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to simulate a full disk")
def test_a_full_disk_is_one_line_and_finished_levels_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    (out / "requests.jsonl").symlink_to("/dev/full")   # every write of request lines fails: ENOSPC
    done = CliRunner().invoke(app, ["sim", "--concurrency", "4,8", "--out", str(out), "--overwrite"])
    assert done.exit_code == 2
    assert "No space left on device" in done.output and "Traceback" not in done.output
    assert done.output.count("plateau: error") == 1
    saved = json.loads((out / "result.json").read_text())
    assert [lv["label"] for lv in saved["levels"]] == ["C=4"]
