from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.report.tables import HEADERS, render_table, to_markdown
from plateau_bench.result import Latency, LevelResult, ResultFile
from plateau_bench.run_view import ReportRun
from plateau_bench.store import load_report_run, load_runs

SweepFactory = Callable[..., Path]


def _level(label: str, mode: str, c: int, tps: float, ttft: float, tpot: float, e2e: float) -> LevelResult:
    return LevelResult(
        label=label, mode=mode, concurrency=c, num_requests=c, completed=c, output_throughput=tps,
        total_throughput=tps * 2, peak_output_throughput=tps * 1.5, achieved_concurrency=c * 0.98,
        decoding_concurrency=c * 0.9, ttft_ms=Latency(p50=ttft, p99=ttft * 2),
        tpot_ms=Latency(mean=tpot, p99=tpot * 1.25), e2e_ms=Latency(p50=e2e, p99=e2e * 1.5), wall_s=33.125,
    )


GOLDEN = """\
| level | mode | concurrency | ok | failed | hung | output_tok_s | total_tok_s | peak_output_tok_s | achieved_concurrency | decoding_concurrency | ttft_p50_ms | ttft_p99_ms | tpot_mean_ms | tpot_p99_ms | e2e_p50_ms | e2e_p99_ms | wall_s | server_queue_mean_ms | server_prefill_mean_ms | server_decode_mean_ms | outside_engine_ms | tokens_per_step | output_tok_per_j | j_per_output_tok | power_pct_of_limit | sm_clock_pct_of_max | ttft_mean_ms | itl_mean_ms | e2e_mean_ms |
|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
| c1 | steady | 1 | 1 | 0 | 0 | 71.0 | 142.0 | 106.5 | 1.0 | 0.9 | 40.0 | 80.0 | 14.00 | 17.50 | 7,200.0 | 10,800.0 | 33.1 | - | - | - | - | - | - | - | - | - | - | - | - |
| c256 | burst | 256 | 256 | 0 | 0 | 3,962.8 | 7,925.6 | 5,944.2 | 250.9 | 230.4 | 812.5 | 1,625.0 | 64.20 | 80.25 | 32,880.0 | 49,320.0 | 33.1 | - | - | - | - | - | - | - | - | - | - | - | - |
"""  # noqa: E501


def test_markdown_table_golden() -> None:
    run = ReportRun("tp8ep", Path("runs/tp8ep"), ResultFile(levels=[
        _level("c1", "steady", 1, 71.0, 40.0, 14.0, 7200.0),
        _level("c256", "burst", 256, 3962.8, 812.5, 64.2, 32880.0),
    ]))
    assert to_markdown([run]) == GOLDEN


def test_markdown_has_one_row_per_level_with_the_saved_throughput(make_sweep: SweepFactory) -> None:
    run = load_report_run(make_sweep("tp8ep", [1, 4, 16, 64, 128]))
    lines = render_table([run], "md").strip().splitlines()
    rows = lines[2:]
    assert len(rows) == 5
    for row, level in zip(rows, run.levels, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == level.label
        assert cells[HEADERS.index("output_tok_s")] == f"{level.output_throughput:,.1f}"


def test_several_runs_get_one_markdown_section_each(make_sweep: SweepFactory) -> None:
    runs = load_runs([make_sweep("tp4", [1, 4]), make_sweep("tp8ep", [1, 4, 16])])
    md = render_table(runs, "md")
    assert "## tp4\n" in md and "## tp8ep\n" in md
    assert md.count("| c16 |") == 1


def test_csv_and_json_carry_unrounded_figures(make_sweep: SweepFactory) -> None:
    runs = load_runs([make_sweep("tp4", [1, 4]), make_sweep("tp8ep", [1, 4, 16])])
    rows = list(csv.DictReader(io.StringIO(render_table(runs, "csv"))))
    assert [r["run"] for r in rows] == ["tp4", "tp4", "tp8ep", "tp8ep", "tp8ep"]
    saved = [lv.output_throughput for run in runs for lv in run.levels]
    assert [float(r["output_tok_s"]) for r in rows] == saved

    doc = json.loads(render_table(runs, "json"))
    assert [r["name"] for r in doc["runs"]] == ["tp4", "tp8ep"]
    assert doc["runs"][1]["levels"][2]["output_tok_s"] == runs[1].levels[2].output_throughput
    assert doc["runs"][1]["knee"]["concurrency"] == 64
    assert doc["runs"][1]["stop_reason"] == "throughput stopped rising"


def test_unknown_format_is_a_config_error(make_sweep: SweepFactory) -> None:
    with pytest.raises(ConfigError, match="unknown table format 'xml'"):
        render_table(load_runs([make_sweep("a", [1])]), "xml")


def test_missing_results_and_duplicate_names(tmp_path: Path, make_sweep: SweepFactory) -> None:
    with pytest.raises(ResultsError, match=r"result\.json not found"):
        load_runs([tmp_path / "empty"])
    with pytest.raises(ConfigError):
        load_runs([])
    d = make_sweep("same", [1])
    assert [r.name for r in load_runs([d, d])] == ["same", "same (2)"]
