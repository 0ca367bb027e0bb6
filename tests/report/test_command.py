"""``plateau report`` end to end through the CLI entry point."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from support.loading import plateau

SweepFactory = Callable[..., Path]


@pytest.mark.slow
def test_html_png_and_tables(make_sweep: SweepFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = make_sweep("tp4", [1, 4]), make_sweep("tp8ep", [1, 4, 16])
    assert plateau(["report", str(a), str(b), "--html", str(tmp_path / "out" / "both.html"),
                    "--png", str(tmp_path / "plots")], capsys)[0] == 0
    assert (tmp_path / "out" / "both.html").read_text().count("<svg") == 3 + 2 + 3
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["frontier.png", "latency.png",
                                                                      "throughput.png"]

    code, out, _ = plateau(["report", str(b), "--format", "json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert [lv["level"] for lv in doc["runs"][0]["levels"]] == ["c1", "c4", "c16"]

    assert plateau(["report", str(b), "--format", "csv", "--output", str(tmp_path / "t.csv")], capsys)[0] == 0
    assert (tmp_path / "t.csv").read_text().count("\n") == 1 + 3


def test_without_an_output_flag_prints_the_level_table(make_sweep: SweepFactory,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["report", str(make_sweep("tp8ep", [1, 4]))], capsys)
    assert code == 0
    assert "tp8ep" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--format", "xml"], "unknown --format 'xml': choose one of md, csv, json, vllm-json, llm-d"),
    (["--output", "x.md"], "--output writes the --format tables: give --format md, csv or json too"),
])
def test_bad_flags_are_one_line(make_sweep: SweepFactory, capsys: pytest.CaptureFixture[str],
                                extra: list[str], message: str) -> None:
    code, _, err = plateau(["report", str(make_sweep("a", [1])), *extra], capsys)
    assert code == 2
    assert err.strip() == f"plateau: error: {message}"


def test_missing_results_and_unwritable_output_are_one_line(make_sweep: SweepFactory, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["report", str(tmp_path / "nope"), "--html", str(tmp_path / "r.html")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "no results in" in err
    assert not (tmp_path / "r.html").exists()

    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = plateau(["report", str(make_sweep("a", [1])), "--html", str(blocker / "r.html")], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "cannot write" in err
