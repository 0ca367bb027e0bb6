"""Figures no benchmark can measure are refused at import in one line naming file, level or request,
and field; before, they were imported with exit 0 and diagnosed ("Plateau: ~100 tok/s from C=-4")."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.importers.checks import check_records

from conftest import DATA
from support.builders import request_record
from support.loading import plateau


def _table(tmp_path: Path, row: int, column: str, value: str) -> Path:
    rows = list(csv.reader((DATA / "run_a.csv").read_text().splitlines()))
    rows[row][rows[0].index(column)] = value
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return path


@pytest.mark.parametrize(("column", "value", "message"), [
    ("concurrency", "-4", "bad.csv:2: level C=-4: concurrency is -4: it must be at least 1"),
    ("concurrency", "0", "bad.csv:2: level C=0: concurrency is 0: it must be at least 1"),
    ("duration [s]", "1e300", "bad.csv:2: level C=256: wall_s is 1e+300: it must be a finite number >= 0"),
    ("duration [s]", "-33", "bad.csv:2: level C=256: wall_s is -33: it must be a finite number >= 0"),
    ("ok", "300", "bad.csv:2: level C=256: completed is 300: more than the 256 requests sent"),
    ("E2E p99 (ms)", "-1", "bad.csv:2: level C=256: e2e p99 is -1: a latency must be a finite number of ms >= 0"),
    ("output tokens/s", "1e30", "bad.csv:2: level C=256: output_throughput is 1e+30: it must be a finite number"),
])
def test_an_impossible_table_cell_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str,
                                              value: str, message: str) -> None:
    code, _, err = plateau(["import", str(_table(tmp_path, 1, column, value)), "--mode", "burst", "--out",
                            str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out" / "result.json").exists()


def test_a_negative_ttft_in_per_request_records_is_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads((DATA / "vllm_detailed.jsonl").read_text().splitlines()[0])
    data["ttfts"][1] = -0.5
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    code, _, err = plateau(["import", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "bench.json:1: field 'ttfts' entry 1 is -0.5: it must be a finite number >= 0" in err


def test_a_concurrency_given_for_a_source_must_be_positive(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["import", str(DATA / "vllm_detailed.jsonl"), "--concurrency", "-4", "--out",
                            str(tmp_path / "out")], capsys)
    assert code == 2 and err == "plateau: error: --concurrency must be >= 1 (got -4)\n"


@pytest.mark.parametrize(("fields", "message"), [
    ({"sent_ns": 10, "end_ns": 5}, "request 0: its times are out of order"),
    ({"sent_ns": 10, "end_ns": 50, "first_token_ns": 5}, "request 0: its times are out of order"),
    ({"sent_ns": 10, "end_ns": 50, "first_token_ns": 60}, "request 0: its times are out of order"),
    ({"sent_ns": 0, "end_ns": 50, "output_tokens": -1}, "request 0: a negative token count"),
])
def test_records_whose_times_go_backwards_are_refused(fields: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^tool: file:3: {message}"):
        check_records([request_record(**fields)], "tool: file:3", concurrency=4)
    check_records([request_record(sent_ns=0, end_ns=50, first_token_ns=20, output_tokens=3)], "tool", concurrency=4)
