"""``plateau diagnose DIR``: re-run the analysis on saved results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.diagnosis_common import mean_lengths
from plateau_bench.analysis.diagnosis_kv_room import KvRoom, stated_lengths
from plateau_bench.analysis.open_loop import rate_summary
from plateau_bench.analysis.plateau import plateau_and_knee
from plateau_bench.analysis.roofline_place import place_on_roofline
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.options import Json, wide_console
from plateau_bench.errors import ResultsError
from plateau_bench.report.terminal import cache_line, levels_view, summary_sentence, verdict_text
from plateau_bench.result import Knee, Plateau, ResultFile, SearchSettings, Verdict
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import load_result


class Diagnosis(msgspec.Struct, kw_only=True):
    """What ``plateau diagnose --json`` prints."""

    verdict: Verdict
    plateau: Plateau | None
    knee: Knee | None


def _twin_what_if(path: Path, verdict: Verdict, result: ResultFile) -> Verdict:
    from plateau_bench.aio import run as run_async
    from plateau_bench.sweep.predict import load_model, twin_what_if

    model = load_model(path)
    top = max((lv for lv in result.levels if lv.completed), key=lambda lv: lv.output_throughput, default=None)
    prompt, output = mean_lengths(top) if top is not None else (model.input_len, model.output_len)
    workload = WorkloadSpec(input_len=max(1, round(prompt)), output_len=max(1, round(output)))
    return run_async(twin_what_if(model, verdict, workload, str(path)))


@grouped
def diagnose_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A result directory written by sweep, run or sim.")],
    as_json: Json = False,
    hardware: r.RooflineFlags = r.NO_ROOFLINE,
    calibrated: Annotated[Path | None, typer.Option("--calibrated", help="Answer the cap what-if with the twin "
                                                    "calibrated on this (a model from plateau calibrate, or a "
                                                    "result directory: the run itself)")] = None,
) -> None:
    """Say why throughput stopped growing in a saved sweep, with evidence and what to try next."""
    ceiling = hardware.ceiling()
    result = load_result(run_dir)
    levels = result.levels
    if not levels:
        raise ResultsError(f"{run_dir} holds no finished level yet: nothing to diagnose")
    sweep = result.spec.sweep
    search = sweep.search if sweep is not None else SearchSettings()
    plateau, knee = plateau_and_knee(levels, search)
    open_loop = rate_summary(levels) if sweep is not None and sweep.mode == "rate" else None
    # The roofline's KV-cache size is weighed by the verdict itself (level summaries: a held batch against it);
    # its placement against the hardware comes last, after any twin what-if.
    verdict = diagnose(levels, engine=result.target.engine, plateau_gain=search.plateau_gain,
                       plateau=plateau, knee=knee, open_loop=open_loop,
                       kv_room=KvRoom.of_roofline(ceiling) if ceiling is not None else None,
                       lengths=stated_lengths(result))
    if calibrated is not None:
        verdict = _twin_what_if(calibrated, verdict, result)
    if ceiling is not None:
        verdict = place_on_roofline(levels, plateau, verdict, ceiling)
    if as_json:
        out = Diagnosis(verdict=verdict, plateau=plateau, knee=knee)
        typer.echo(msgspec.json.format(msgspec.json.encode(out), indent=2).decode())
        return
    console = wide_console()
    console.print(levels_view(levels, title=f"{run_dir}"))
    console.print(summary_sentence(levels, plateau, knee), highlight=False)
    cache = cache_line(result)
    if cache is not None:
        console.print(cache, highlight=False)
    console.print(verdict_text(verdict))


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose_cmd)
