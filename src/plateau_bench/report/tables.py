"""Level tables for export (Markdown, CSV, JSON).

The tables render ``ReportRun``s (``run_view``; loaded by ``store.load_runs`` in the command): they only
select and format figures from the levels; nothing is read or recomputed here.

Markdown is for pull requests and chats (one table per run), CSV for spreadsheets (one row per
level, a ``run`` column when several runs are given), JSON for scripts (numbers unrounded).

After the client's figures come the server's own account of the level (``LevelResult.time_split``: mean
queue, prefill and decode time, the TTFT spent outside the engine, tokens per engine step) and its GPUs'
(``LevelResult.gpu_metrics``: output tokens per joule, joules per output token, power over the power
limit and SM clock over its maximum, in per cent), then the mean TTFT, ITL and E2E (a level summary may
state means and no percentile). A figure the level lacks is unknown, never 0: ``-`` in Markdown, an empty
cell in CSV, null in JSON; that includes the figures a level summary did not state, whose saved value is a
placeholder 0 (``analysis.unmeasured``).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from plateau_bench.analysis.unmeasured import known
from plateau_bench.errors import ConfigError
from plateau_bench.result import GpuMetrics, LevelResult, ServerPhase
from plateau_bench.run_view import ReportRun

FORMATS = ("md", "csv", "json")


def x_value(level: LevelResult) -> float | None:
    """Where a level sits on a concurrency axis: requested C, else (open loop) achieved concurrency."""
    if level.concurrency is not None and level.concurrency > 0:
        return float(level.concurrency)
    return level.achieved_concurrency if level.achieved_concurrency > 0 else None


# -- columns -----------------------------------------------------------------------------------
# (header, value getter, markdown decimals or None for text)
Column = tuple[str, Callable[[LevelResult], Any], int | None]

COLUMNS: list[Column] = [
    ("level", lambda lv: lv.label, None),
    ("mode", lambda lv: lv.mode, None),
    ("concurrency", lambda lv: lv.concurrency, 0),
    ("ok", lambda lv: known(lv, "completed"), 0),
    ("failed", lambda lv: known(lv, "failed"), 0),
    ("hung", lambda lv: known(lv, "hung"), 0),
    ("output_tok_s", lambda lv: known(lv, "output_throughput"), 1),
    ("total_tok_s", lambda lv: known(lv, "total_throughput"), 1),
    ("peak_output_tok_s", lambda lv: known(lv, "peak_output_throughput"), 1),
    ("achieved_concurrency", lambda lv: known(lv, "achieved_concurrency"), 1),
    ("decoding_concurrency", lambda lv: known(lv, "decoding_concurrency"), 1),
    ("ttft_p50_ms", lambda lv: lv.ttft_ms.p50, 1),
    ("ttft_p99_ms", lambda lv: lv.ttft_ms.p99, 1),
    ("tpot_mean_ms", lambda lv: lv.tpot_ms.mean, 2),
    ("tpot_p99_ms", lambda lv: lv.tpot_ms.p99, 2),
    ("e2e_p50_ms", lambda lv: lv.e2e_ms.p50, 1),
    ("e2e_p99_ms", lambda lv: lv.e2e_ms.p99, 1),
    ("wall_s", lambda lv: known(lv, "wall_s"), 1),
]


def _phase_mean(name: str) -> Callable[[LevelResult], float | None]:
    """The mean of one phase of the server's time split; None when unpublished or too few requests."""
    def get(level: LevelResult) -> float | None:
        phase: ServerPhase | None = getattr(level.time_split, name, None)
        return None if phase is None else phase.mean
    return get


def _gpu(name: str, *, percent: bool = False) -> Callable[[LevelResult], float | None]:
    """One GPU figure of the level (a 0..1 share as per cent with ``percent``); None when not measured."""
    def get(level: LevelResult) -> float | None:
        m: GpuMetrics | None = level.gpu_metrics
        v: float | None = None if m is None else getattr(m, name)
        if v is None or not percent:
            return v
        return round(v * 100.0, 6)   # 0.57 x 100 is 56.99999999999999 in binary floating point
    return get


# The server's own evidence, after the client's figures (added columns: the ones above keep their order).
COLUMNS += [
    ("server_queue_mean_ms", _phase_mean("queue_ms"), 1),
    ("server_prefill_mean_ms", _phase_mean("prefill_ms"), 1),
    ("server_decode_mean_ms", _phase_mean("decode_ms"), 1),
    ("outside_engine_ms", lambda lv: None if lv.time_split is None else lv.time_split.outside_engine_ms, 1),
    ("tokens_per_step", _phase_mean("step_tokens"), 1),
    ("output_tok_per_j", _gpu("output_tokens_per_joule"), 3),
    ("j_per_output_tok", _gpu("joules_per_output_token"), 4),
    ("power_pct_of_limit", _gpu("power_share", percent=True), 1),
    ("sm_clock_pct_of_max", _gpu("sm_clock_share", percent=True), 1),
]
# The means, for sources that state means and no percentile (level summaries): added after the rest.
COLUMNS += [
    ("ttft_mean_ms", lambda lv: lv.ttft_ms.mean, 1),
    ("itl_mean_ms", lambda lv: lv.itl_ms.mean, 2),
    ("e2e_mean_ms", lambda lv: lv.e2e_ms.mean, 1),
]

HEADERS = [c[0] for c in COLUMNS]


def level_row(level: LevelResult) -> dict[str, Any]:
    """One level as a flat row of raw values (None where the metric is missing)."""
    return {name: get(level) for name, get, _ in COLUMNS}


def format_cell(value: Any, decimals: int | None) -> str:
    if value is None:
        return "-"
    if decimals is None or not isinstance(value, int | float):
        return str(value)
    return f"{value:,.{decimals}f}"


def _markdown_table(levels: Sequence[LevelResult]) -> str:
    header = "| " + " | ".join(HEADERS) + " |"
    align = "|" + "|".join(":---" if d is None else "---:" for _, _, d in COLUMNS) + "|"
    rows = [
        "| " + " | ".join(format_cell(get(lv), d) for _, get, d in COLUMNS) + " |" for lv in levels
    ]
    return "\n".join([header, align, *rows])


def to_markdown(runs: Sequence[ReportRun]) -> str:
    if len(runs) == 1:
        return _markdown_table(runs[0].levels) + "\n"
    return "\n".join(f"## {run.name}\n\n{_markdown_table(run.levels)}\n" for run in runs)


def to_csv(runs: Sequence[ReportRun]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["run", *HEADERS])
    for run in runs:
        for lv in run.levels:
            writer.writerow([run.name, *("" if v is None else v for v in level_row(lv).values())])
    return buf.getvalue()


def to_json(runs: Sequence[ReportRun]) -> str:
    doc = {
        "runs": [
            {
                "name": run.name,
                "path": str(run.path),
                "kind": run.result.kind,
                "plateau": msgspec.to_builtins(run.result.plateau),
                "knee": msgspec.to_builtins(run.result.knee),
                "stop_reason": run.result.stop_reason,
                "levels": [level_row(lv) for lv in run.levels],
            }
            for run in runs
        ]
    }
    return json.dumps(doc, indent=2) + "\n"


def render_table(runs: Sequence[ReportRun], fmt: str) -> str:
    """The level tables of ``runs`` in ``fmt`` (one of ``FORMATS``)."""
    renderers = {"md": to_markdown, "csv": to_csv, "json": to_json}
    if fmt not in renderers:
        raise ConfigError(f"unknown table format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return renderers[fmt](runs)

