"""``plateau calibrate RUN_DIR... [--out model.json]`` and ``plateau predict MODEL_OR_RUN_DIR ...``.

The fit is ``analysis.calibration``; the prediction ``sweep.predict``; the tables ``report.answers``.
This module loads the sweeps (with their request records, for exact lengths), prints and saves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.calibration import calibrate
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands import answer_flags as a
from plateau_bench.commands import options as o
from plateau_bench.commands.engine_flags import AS_CALIBRATED, EngineSettings
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.load_flags import Grid
from plateau_bench.report.answers import model_view, prediction_view
from plateau_bench.report.html import check_writable, write_text
from plateau_bench.spec import parse_int_list
from plateau_bench.sweep.predict import load_model, load_sweep


def calibrate_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Sweeps of one deployment (several: e.g. two prompt "
                                                   "lengths, to separate the KV cost from the per-sequence one).")],
    out: Annotated[Path | None, typer.Option("--out", help="Save the model (JSON) for plateau predict.")] = None,
    as_json: o.Json = False,
) -> None:
    """Fit the simulated engine to measured sweeps: step-time coefficients, cap, KV cache, residuals."""
    if out is not None:
        check_writable(out)
    model = calibrate([load_sweep(d) for d in run_dirs])
    text = msgspec.json.format(msgspec.json.encode(model), indent=2).decode()
    if out is not None:
        write_text(out, text + "\n")
    if as_json:
        typer.echo(text)
        return
    o.wide_console().print(model_view(model))
    if out is not None:
        typer.echo(f"wrote {out}", err=True)


@grouped
def predict_cmd(
    model_path: a.ModelOrRun,
    engine: EngineSettings = AS_CALIBRATED,
    lengths: a.GivenLengths = a.AS_GIVEN,
    concurrency: Grid = None,
    slo: a.Slo = None,
    as_json: o.Json = False,
) -> None:
    """Predict a sweep at other settings with the calibrated twin (virtual time), with an uncertainty band."""
    from plateau_bench.sweep.predict import predict

    model = load_model(model_path)
    workload = lengths.workload(model)
    grid = parse_int_list(concurrency, "--concurrency") if concurrency else None
    slos = parse_slo(slo) if slo else []
    done = run_async(predict(model, workload, a.settings(engine), concurrencies=grid, slos=slos))
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(done), indent=2).decode())
        return
    o.wide_console().print(prediction_view(done, workload))


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
    app.command("predict")(predict_cmd)
