"""The exported level tables (``report.tables``) carry the server's time split and the GPUs' energy figures;
a level without them exports unknowns (``-``, an empty cell, null), never 0."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from plateau_bench.report.tables import HEADERS, render_table
from plateau_bench.result import GpuMetrics, LevelResult, ResultFile, ServerPhase, ServerTimeSplit
from plateau_bench.run_view import ReportRun
from plateau_bench.store import ResultWriter, load_report_run

from support.builders import level_result

ADDED = ["server_queue_mean_ms", "server_prefill_mean_ms", "server_decode_mean_ms", "outside_engine_ms",
         "tokens_per_step", "output_tok_per_j", "j_per_output_tok", "power_pct_of_limit", "sm_clock_pct_of_max"]
# What the level below holds, as each format writes it.
JSON_VALUES = {"server_queue_mean_ms": 627.25, "server_prefill_mean_ms": 7.5, "server_decode_mean_ms": 5012.0,
               "outside_engine_ms": 39.25, "tokens_per_step": 9.6, "output_tok_per_j": 2.4,
               "j_per_output_tok": 0.416667, "power_pct_of_limit": 57.0, "sm_clock_pct_of_max": 93.5}
MD_VALUES = ["627.2", "7.5", "5,012.0", "39.2", "9.6", "2.400", "0.4167", "57.0", "93.5"]


def _measured() -> LevelResult:
    level = level_result(64, 3000.0, label="c64")
    level.time_split = ServerTimeSplit(
        engine="vllm", queue_ms=ServerPhase(observations=80, mean=627.25, p99=1400.0),
        prefill_ms=ServerPhase(observations=80, mean=7.5, p99=20.0),
        decode_ms=ServerPhase(observations=80, mean=5012.0, p99=7680.0, p99_above=True),
        step_tokens=ServerPhase(observations=900, mean=9.6, p99=16.0),
        client_ttft_mean_ms=674.0, outside_engine_ms=39.25)
    level.gpu_metrics = GpuMetrics(gpus=8, nodes=1, power_w_mean=400.0, power_limit_w=700.0, power_share=0.57,
                                   sm_clock_mhz=1841.0, sm_clock_max_mhz=1980.0, sm_clock_share=0.935,
                                   energy_j=12_500.0, energy_source="counter", joules_per_output_token=0.416667,
                                   output_tokens_per_joule=2.4)
    return level


def _bare() -> LevelResult:
    """No split, no GPU figures: what a run against a server without histograms or GPU telemetry saves."""
    return level_result(8, 900.0, label="c8")


def _partial() -> LevelResult:
    """The histograms published but too few requests for a mean; GPUs seen but no energy measured."""
    level = level_result(1, 70.0, label="c1")
    level.time_split = ServerTimeSplit(engine="vllm", queue_ms=ServerPhase(observations=2),
                                       prefill_ms=ServerPhase(observations=2), client_ttft_mean_ms=40.0)
    level.gpu_metrics = GpuMetrics(gpus=1, power_w_mean=120.0)
    return level


def _run(*levels: LevelResult) -> ReportRun:
    return ReportRun("tp8ep", Path("runs/tp8ep"), ResultFile(levels=list(levels)))


def _md_rows(text: str) -> dict[str, dict[str, str]]:
    head, _, *rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.strip().splitlines()]
    return {cells[0]: dict(zip(head, cells, strict=True)) for cells in rows}


def test_the_added_columns_come_after_every_existing_one() -> None:
    after = HEADERS.index("wall_s") + 1
    assert HEADERS[after:after + len(ADDED)] == ADDED
    assert HEADERS[:3] == ["level", "mode", "concurrency"]
    assert HEADERS[after + len(ADDED):] == ["ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms"]   # added after these


def test_markdown_carries_the_figures_and_dashes_for_unknowns() -> None:
    rows = _md_rows(render_table([_run(_measured(), _bare(), _partial())], "md"))
    assert [rows["c64"][name] for name in ADDED] == MD_VALUES
    assert [rows["c8"][name] for name in ADDED] == ["-"] * len(ADDED)
    assert [rows["c1"][name] for name in ADDED] == ["-"] * len(ADDED)


def test_csv_carries_the_figures_and_empty_cells_for_unknowns() -> None:
    rows = {r["level"]: r for r in csv.DictReader(io.StringIO(render_table([_run(_measured(), _bare(),
                                                                                 _partial())], "csv")))}
    assert {name: float(rows["c64"][name]) for name in ADDED} == JSON_VALUES
    for label in ("c8", "c1"):
        assert [rows[label][name] for name in ADDED] == [""] * len(ADDED)


def test_json_carries_the_figures_unrounded_and_null_for_unknowns() -> None:
    levels = {lv["level"]: lv for lv in json.loads(render_table([_run(_measured(), _bare(), _partial())],
                                                                  "json"))["runs"][0]["levels"]}
    assert {name: levels["c64"][name] for name in ADDED} == JSON_VALUES
    for label in ("c8", "c1"):
        assert {name: levels[label][name] for name in ADDED} == dict.fromkeys(ADDED)


def test_a_saved_result_exports_them(tmp_path: Path) -> None:
    with ResultWriter(tmp_path / "run", ResultFile(kind="sweep")) as writer:
        writer.add_level(_measured())
        writer.add_level(_bare())
    run = load_report_run(tmp_path / "run")
    levels = json.loads(render_table([run], "json"))["runs"][0]["levels"]
    assert [{name: lv[name] for name in ADDED} for lv in levels] == [JSON_VALUES, dict.fromkeys(ADDED)]
