"""``plateau report DIR... [--html FILE] [--png DIR] [--format md|csv|json|vllm-json|llm-d [--output FILE]]``.

Presents saved results: an offline HTML report, PNG images of the main plots, or the level tables
for a pull request, a spreadsheet or a script. Without any of these it prints the level table of
each run in the terminal. Several result directories are overlaid, named by directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.diagnosis_kv_room import stated_lengths
from plateau_bench.analysis.roofline_place import place_on_roofline
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.importers import vllm_json_lines
from plateau_bench.importers.llmd_export import llmd_yaml
from plateau_bench.report.html import check_writable, render_html, write_text
from plateau_bench.report.plots import write_pngs
from plateau_bench.report.tables import FORMATS, render_table
from plateau_bench.report.terminal import levels_view, verdict_text
from plateau_bench.roofline import Roofline
from plateau_bench.run_view import ReportRun
from plateau_bench.store import load_runs


def _vllm_json(runs: list[ReportRun]) -> str:
    """Each run's levels in vLLM's bench result keys, with per-request lists where records were saved."""
    return "".join(vllm_json_lines(run.result, run.records(telemetry=False).requests) for run in runs)


def _llmd(runs: list[ReportRun]) -> str:
    """Each level of each run as an llm-d Benchmark Report, one YAML document per level."""
    return "---\n".join(text for run in runs if (text := llmd_yaml(run.result)))


_EXPORTS = {"vllm-json": _vllm_json, "llm-d": _llmd}


def _place(run: ReportRun, rf: Roofline) -> None:
    """The run's verdict placed on the roofline (diagnosed afresh when the file has none)."""
    result = run.result
    if result.verdict is None:
        result.verdict = diagnose(result.levels, engine=result.target.engine, plateau=result.plateau,
                                  knee=result.knee, roofline=rf, lengths=stated_lengths(result))
    else:
        result.verdict = place_on_roofline(result.levels, result.plateau, result.verdict, rf)


@grouped
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Result directories (several are overlaid).")],
    html_out: Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report "
                                                  "(opens offline).")] = None,
    png_dir: Annotated[Path | None, typer.Option("--png", help="Write throughput, latency and frontier "
                                                 "plots as PNG into this directory.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Print the level tables as md, csv or json, "
                                            "the levels as vLLM bench result objects (vllm-json, one "
                                            "per line), or as llm-d Benchmark Reports 0.2 (llm-d, one "
                                            "YAML document per level); plateau import reads both back.")
                   ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the --format tables to "
                                                "this file instead of stdout.")] = None,
    hardware: r.RooflineFlags = r.NO_ROOFLINE,
) -> None:
    """Report saved results: HTML with plots, PNG images, or md/csv/json tables."""
    ceiling = hardware.ceiling()
    if fmt is not None and fmt not in (*FORMATS, *_EXPORTS):
        raise ConfigError(f"unknown --format {fmt!r}: choose one of {', '.join((*FORMATS, *_EXPORTS))}")
    if output is not None and fmt is None:
        raise ConfigError("--output writes the --format tables: give --format md, csv or json too")
    # Refuse an unwritable destination before spending time on loading and drawing.
    if html_out is not None:
        check_writable(html_out)
    if output is not None:
        check_writable(output)
    runs = load_runs(run_dirs)
    if ceiling is not None:
        for run in runs:
            _place(run, ceiling)
    if html_out is not None:
        path = write_text(html_out, render_html(runs))
        typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)", err=True)
    if png_dir is not None:
        for path in write_pngs(runs, png_dir):
            typer.echo(f"wrote {path}", err=True)
    if fmt is not None:
        text = _EXPORTS[fmt](runs) if fmt in _EXPORTS else render_table(runs, fmt)
        if output is not None:
            write_text(output, text)
            typer.echo(f"wrote {output}", err=True)
        else:
            typer.echo(text, nl=False)
    if html_out is None and png_dir is None and fmt is None:
        console = wide_console()
        for run in runs:
            console.print(levels_view(run.levels, title=str(run.path)))
            if ceiling is not None and run.result.verdict is not None:
                console.print(verdict_text(run.result.verdict))


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
