"""``plateau calibrate RUN_DIR... [--out model.json]`` and ``plateau predict MODEL_OR_RUN_DIR ...``.

The fit is ``analysis.calibration``; the prediction ``sweep.predict``. This module loads the sweeps
(with their request records, for exact lengths), prints and saves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.calibration import CalibratedModel, calibrate
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ResultsError
from plateau_bench.report.html import check_writable, write_text
from plateau_bench.spec import WorkloadSpec, parse_int_list
from plateau_bench.sweep.predict import load_model, load_sweep

_UNITS = {"t0": ("ms per step", 1e3), "a": ("ms per decoding sequence", 1e3), "b": ("us per prompt token", 1e6),
          "c": ("ns per KV token read", 1e9)}


def print_model(console: Console, model: CalibratedModel) -> None:
    e = model.engine
    console.print(f"Calibrated from {', '.join(model.sources)}", highlight=False)
    table = Table(title="Step time t = t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read")
    for col in ("coefficient", "value", "± std. error", "unit", "note"):
        table.add_column(col, justify="left" if col in ("coefficient", "unit", "note") else "right")
    for p in model.parameters:
        unit, scale = _UNITS[p.name]
        err = f"{p.stderr * scale:.3g}" if p.stderr is not None else "-"
        table.add_row(p.name, f"{p.value * scale:.4g}", err, unit, p.note)
    console.print(table)
    console.print(f"cap {e.max_num_seqs:,} running requests ({model.cap_source}); KV cache {e.kv_tokens:,} tokens "
                  f"({model.kv_source}); policy {e.policy} ({model.policy_source})", highlight=False)
    fits = Table(title="Fit per level (relative residual: fitted / measured - 1)")
    for col in ("run", "level", "batch", "metric", "measured ms", "fitted ms", "residual"):
        fits.add_column(col, justify="left" if col in ("run", "level", "metric") else "right")
    for lv in model.levels:
        fits.add_row(lv.run, lv.label, f"{lv.batch:,.1f}", lv.metric.upper(), f"{lv.measured_ms:,.2f}",
                     f"{lv.fitted_ms:,.2f}", f"{lv.residual:+.1%}")
    console.print(fits)
    for note in model.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)


def calibrate_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Sweeps of one deployment (several: e.g. two prompt "
                                                   "lengths, to separate the KV cost from the per-sequence one).")],
    out: Annotated[Path | None, typer.Option("--out", help="Save the model (JSON) for plateau predict.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the model as JSON only.")] = False,
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
    print_model(wide_console(), model)
    if out is not None:
        typer.echo(f"wrote {out}", err=True)


def _fmt(value: float | None, scale: float = 1.0, unit: str = "ms") -> str:
    if value is None:
        return "-"
    return f"{value * scale / 1e3:,.2f} s" if unit == "ms" and value >= 10_000 else f"{value * scale:,.0f} {unit}"


def predict_cmd(  # long: one option per line
    model_path: Annotated[Path, typer.Argument(help="A model from plateau calibrate --out, or a result directory "
                                               "(calibrated on the spot).")],
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs", help="The admission cap to predict "
                                                     "(vLLM --max-num-seqs, SGLang --max-running-requests).")] = None,
    kv_tokens: Annotated[int | None, typer.Option("--kv-tokens", help="KV-cache capacity in tokens.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens",
                                                               help="Per-step token budget.")] = None,
    input_len: Annotated[int | None, typer.Option("--input-len", help="Prompt tokens (default: the "
                                                  "calibration's).")] = None,
    output_len: Annotated[int | None, typer.Option("--output-len", help="Output tokens (default: the "
                                                   "calibration's).")] = None,
    concurrency: Annotated[str | None, typer.Option("--concurrency", "-c", help="A fixed grid (default: the "
                                                    "adaptive search).")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="e.g. ttft_p99=2s,tpot_p99=100ms: the largest "
                                            "predicted level meeting it.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the prediction as JSON only.")] = False,
) -> None:
    """Predict a sweep at other settings with the calibrated twin (virtual time), with an uncertainty band."""
    from plateau_bench.sweep.predict import Settings, predict

    model = load_model(model_path)
    workload = WorkloadSpec(input_len=input_len or max(1, round(model.input_len)),
                            output_len=output_len or max(1, round(model.output_len)))
    workload.validate()
    settings = Settings(max_num_seqs=max_num_seqs, kv_tokens=kv_tokens, max_num_batched_tokens=max_num_batched_tokens)
    grid = parse_int_list(concurrency, "--concurrency") if concurrency else None
    slos = parse_slo(slo) if slo else []
    done = run_async(predict(model, workload, settings, concurrencies=grid, slos=slos))
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(done), indent=2).decode())
        return
    print_prediction(wide_console(), done, workload)


def print_prediction(console: Console, done: object, workload: WorkloadSpec) -> None:
    from plateau_bench.sweep.predict import Prediction

    if not isinstance(done, Prediction):
        raise ResultsError("nothing predicted")
    e = done.engine
    table = Table(title=f"Predicted (cap {e.max_num_seqs:,}, KV {e.kv_tokens:,} tokens, budget "
                        f"{e.max_num_batched_tokens:,}; {workload.input_len} in / {workload.output_len} out)")
    columns = ["C", "out tok/s", "decoding", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99"]
    columns += ["SLO"] if any(lv.meets_slo is not None for lv in done.levels) else []
    for col in columns:
        table.add_column(col, justify="right")
    for lv in done.levels:
        row = [f"{lv.concurrency:,}", f"{lv.output_throughput:,.0f}", f"{lv.decoding:,.0f}", _fmt(lv.ttft_p50_ms),
               _fmt(lv.ttft_p99_ms), _fmt(lv.tpot_p50_ms), _fmt(lv.tpot_p99_ms), _fmt(lv.e2e_p99_ms)]
        row += [] if lv.meets_slo is None else ["meets" if lv.meets_slo else "violates"]
        table.add_row(*row)
    console.print(table)
    if done.plateau is not None:
        band = (f" (band {done.plateau_low:,.0f} to {done.plateau_high:,.0f} tok/s from the fit's standard errors)"
                if done.plateau_low is not None and done.plateau_high is not None else f" ({done.band_note})")
        console.print(f"Predicted plateau ~{done.plateau.throughput:,.0f} tok/s from C={done.plateau.concurrency}"
                      f"{band}", highlight=False)
    if done.knee is not None:
        console.print(f"Predicted knee C~{done.knee.concurrency:,.0f}", highlight=False)
    for note in done.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    if any(lv.meets_slo is not None for lv in done.levels):
        within = (f"C={done.slo_max_concurrency:,} ({done.slo_throughput:,.0f} tok/s)"
                  if done.slo_max_concurrency else "no level")
        console.print(f"Within the SLO: {within}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
    app.command("predict")(predict_cmd)
