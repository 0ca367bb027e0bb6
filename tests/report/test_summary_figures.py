"""Level summaries on display: a figure known only as a mean shows as the mean, said as such; a figure the
summary did not state shows as unknown, never as 0.0 (terminal table, md/csv/json export, HTML)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from plateau_bench.report.html import render_html
from plateau_bench.report.tables import render_table
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.run_view import ReportRun
from plateau_bench.store import load_runs

from support.loading import Cli

# A table of means as summary tools print them: no request counts, no percentiles, no concurrency measured.
MEANS = """\
concurrency,mean TTFT (ms),mean TPOT (ms),output tok/s
8,212,20.0,400
16,215,21.0,760
32,2100,22.2,1440
"""
# Figures this table does not state: each must read as unknown wherever it is shown.
UNSTATED = ["ok", "failed", "hung", "total_tok_s", "peak_output_tok_s", "achieved_concurrency",
            "decoding_concurrency", "wall_s"]
ZERO = re.compile(r"(?<![\d.,])0\.0+(?![\d])")   # a 0.0 standing alone, not the end of 400.0


def imported(cli: Cli, tmp_path: Path, text: str = MEANS) -> Path:
    table = tmp_path / "means.csv"
    table.write_text(text)
    out = tmp_path / "run"
    done = cli("import", str(table), "--out", str(out), "--mode", "steady")
    assert done.exit_code == 0, done.output
    return out


def md_rows(text: str) -> dict[str, dict[str, str]]:
    head, _, *rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.strip().splitlines()]
    return {cells[0]: dict(zip(head, cells, strict=True)) for cells in rows}


def test_the_saved_levels_name_what_the_summary_did_not_measure(cli: Cli, tmp_path: Path) -> None:
    levels = json.loads((imported(cli, tmp_path) / "result.json").read_text())["levels"]
    for lv in levels:
        assert {"decoding_concurrency", "achieved_concurrency", "peak_decoding", "completed"} <= set(lv["unmeasured"])
        assert "output_throughput" not in lv["unmeasured"] and lv["output_throughput"] > 0


def test_the_terminal_table_shows_the_mean_and_unknowns_as_unknown(cli: Cli, tmp_path: Path) -> None:
    done = cli("report", str(imported(cli, tmp_path)), env={"COLUMNS": "220"})
    assert done.exit_code == 0, done.output
    rows = [line for line in done.output.splitlines() if re.match(r"\s*C=\d+\s", line)]
    assert len(rows) == 3, done.output
    assert "212ms (mean)" in rows[0] and "20ms (mean)" in rows[0] and "2.10s (mean)" in rows[2], done.output
    for row in rows:
        assert row.count("(mean)") == 2, row                   # TTFT and TPOT: the means, not "-/-"
        assert not ZERO.search(row), row                        # achieved and decoding C: unknown, not 0.0
        assert row.split()[-2:] == ["-", "-"], row


def test_markdown_csv_and_json_show_the_means_and_no_zero_for_unknowns(cli: Cli, tmp_path: Path) -> None:
    runs = load_runs([imported(cli, tmp_path)])
    md = md_rows(render_table(runs, "md"))
    assert md["C=8"]["ttft_mean_ms"] == "212.0" and md["C=8"]["tpot_mean_ms"] == "20.00"
    assert md["C=8"]["ttft_p50_ms"] == "-" and md["C=8"]["output_tok_s"] == "400.0"
    for row in md.values():
        assert all(row[name] == "-" for name in UNSTATED), row
    csv_rows = [line.split(",") for line in render_table(runs, "csv").splitlines()]
    header = csv_rows[0]
    for cells in csv_rows[1:]:
        assert all(cells[header.index(name)] == "" for name in UNSTATED), cells
        assert float(cells[header.index("ttft_mean_ms")]) > 0
    levels = json.loads(render_table(runs, "json"))["runs"][0]["levels"]
    assert all(lv[name] is None for lv in levels for name in UNSTATED), levels
    assert [lv["ttft_mean_ms"] for lv in levels] == [212.0, 215.0, 2100.0]


def test_the_html_table_shows_the_mean_said_as_such_and_no_zero_for_unknowns(cli: Cli, tmp_path: Path) -> None:
    page = render_html(load_runs([imported(cli, tmp_path)]))
    table = page[page.index("<h2>Levels</h2>"):page.index("<h2>Levels over time</h2>")]
    assert "<td>212.0 (mean)</td>" in table and "<td>2,100.0 (mean)</td>" in table
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    assert cells and not any(ZERO.fullmatch(c) for c in cells), cells
    assert "mean (only the mean known)" in page   # the latency plot draws the means, and says so


def test_a_figure_the_summary_derives_is_shown(cli: Cli, tmp_path: Path) -> None:
    # Counts, duration, mean E2E and TTFT give the decoding concurrency by Little's law: known, so shown.
    run = imported(cli, tmp_path, "concurrency,ok,duration (s),mean TTFT (ms),mean E2E (ms),output tok/s\n"
                                  "8,600,60,200,5200,400\n16,900,60,800,6100,760\n")
    md = md_rows(render_table(load_runs([run]), "md"))
    assert md["C=8"]["decoding_concurrency"] == "50.0" and md["C=8"]["ok"] == "600", md
    assert md["C=8"]["peak_output_tok_s"] == "-" and md["C=8"]["ttft_p50_ms"] == "-"


def test_a_measured_zero_is_still_shown_as_zero() -> None:
    # A level that was measured (per-request times) and served nothing: its 0.0 tok/s is a figure, not a gap.
    failed = LevelResult(label="C=8", mode="steady", concurrency=8, num_requests=8, failed=8, level_failed=True,
                         wall_s=4.0)
    run = ReportRun("run", Path("run"), ResultFile(levels=[failed]))
    row = md_rows(render_table([run], "md"))["C=8"]
    assert row["output_tok_s"] == "0.0" and row["decoding_concurrency"] == "0.0" and row["ok"] == "0"
