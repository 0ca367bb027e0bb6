"""The calibrated twin's answers in the terminal: the calibrated model (``plateau calibrate``), a predicted
sweep (``plateau predict``), a capacity plan (``plateau plan``) and a tune (``plateau tune``).

Each function renders the typed result it is handed (``plateau_bench.answers``) as one renderable;
the command prints it. Nothing here computes a figure.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from plateau_bench.answers import TERMS, CalibratedModel, CapacityPlan, Prediction, ReplicaTrial, TuneResult, TuneTrial
from plateau_bench.spec import WorkloadSpec

_UNITS = {"t0": ("ms per step", 1e3), "a": ("ms per decoding sequence", 1e3), "b": ("us per prompt token", 1e6),
          "c": ("ns per KV token read", 1e9), "s": ("ms per slot, per step", 1e3)}


def _table(title: str, columns: tuple[str, ...] | list[str], left: tuple[str, ...] = ()) -> Table:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def _notes(notes: list[str]) -> list[Text]:
    return [Text(f"  note: {note}") for note in notes]


def model_view(model: CalibratedModel) -> Group:
    """The fitted step-time coefficients, the scheduler's limits and the fit level by level."""
    e = model.engine
    steps = _table("Step time t = t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read + s*slots (slots: the "
                   "admission cap)", ("coefficient", "term", "value", "± std. error", "unit", "obtained", "note"),
                   left=("coefficient", "term", "unit", "obtained", "note"))
    for p in model.parameters:
        unit, scale = _UNITS.get(p.name, (p.unit, 1.0))
        err = f"{p.stderr * scale:.3g}" if p.stderr is not None else "-"
        steps.add_row(p.name, p.term or TERMS.get(p.name, ("",))[0], f"{p.value * scale:.4g}", err, unit,
                      "fitted" if p.identified else "fixed", p.note)
    fits = _table("Fit per level (relative residual: fitted / measured - 1; held out: predicted by the fit "
                  "without that level)",
                  ("run", "level", "cap", "batch", "metric", "measured ms", "fitted ms", "residual", "weight",
                   "held out"), left=("run", "level", "metric"))
    for lv in model.levels:
        held = "-" if lv.held_out_error is None else f"{lv.held_out_error:+.1%}"
        fits.add_row(lv.run, lv.label, f"{lv.slots:,}" if lv.slots else "-", f"{lv.batch:,.1f}", lv.metric.upper(),
                     f"{lv.measured_ms:,.2f}", f"{lv.fitted_ms:,.2f}", f"{lv.residual:+.1%}", f"{lv.weight:.2f}", held)
    limits = Text(f"cap {e.max_num_seqs:,} running requests ({model.cap_source}); KV cache {e.kv_tokens:,} tokens "
                  f"({model.kv_source}); policy {e.policy} ({model.policy_source})")
    return Group(Text(f"Calibrated from {', '.join(model.sources)}"), steps, limits, fits,
                 *_cross_validation(model), *_notes(model.notes))


def _cross_validation(model: CalibratedModel) -> list[Text]:
    cv = model.cross_validation
    if cv is None or cv.median_abs_error is None or cv.worst_error is None:
        return [Text("Cross-validated: no level can be left out and still fitted (too few decoding batches)")]
    lines = [Text(f"Cross-validated, each level left out in turn: TPOT predicted within {cv.median_abs_error:.1%} "
                  f"(median over {cv.folds} levels), worst {cv.worst_error:+.1%}")]
    if cv.sweep_median_abs_error is not None and cv.sweep_worst_error is not None:
        lines.append(Text(f"Each sweep left out in turn ({cv.sweep_folds} sweeps): within "
                          f"{cv.sweep_median_abs_error:.1%} (median), worst {cv.sweep_worst_error:+.1%}"))
    rate = cv.per_doubling()
    if rate is not None and cv.extrapolation_error is not None and cv.extrapolation_from_batch is not None:
        lines.append(Text(f"Extrapolated: fitted to decoding batches up to {cv.extrapolation_from_batch:,.1f}, the "
                          f"{cv.extrapolation_folds} wider level(s) predicted, worst {cv.extrapolation_error:+.1%} at "
                          f"{cv.extrapolation_ratio or 0:.1f}x that batch ({rate:.1%} per doubling: what a prediction "
                          "past the calibrated batches adds to its band)"))
    return lines


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:,.2f} s" if value >= 10_000 else f"{value:,.0f} ms"


def prediction_view(done: Prediction, workload: WorkloadSpec) -> Group:
    """The predicted levels, plateau (with its band), knee, notes and the largest level within the SLO."""
    e = done.engine
    with_slo = any(lv.meets_slo is not None for lv in done.levels)
    columns = ["C", "out tok/s", "decoding", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99"]
    table = _table(f"Predicted (cap {e.max_num_seqs:,}, KV {e.kv_tokens:,} tokens, budget "
                   f"{e.max_num_batched_tokens:,}; {workload.input_len} in / {workload.output_len} out)",
                   columns + (["SLO"] if with_slo else []))
    for lv in done.levels:
        row = [f"{lv.concurrency:,}", f"{lv.output_throughput:,.0f}", f"{lv.decoding:,.0f}", _ms(lv.ttft_p50_ms),
               _ms(lv.ttft_p99_ms), _ms(lv.tpot_p50_ms), _ms(lv.tpot_p99_ms), _ms(lv.e2e_p99_ms)]
        row += [] if lv.meets_slo is None else ["meets" if lv.meets_slo else "violates"]
        table.add_row(*row)
    parts: list[RenderableType] = [table]
    if done.plateau is not None:
        band = (f" (band {done.plateau_low:,.0f} to {done.plateau_high:,.0f} tok/s from the fit's standard errors)"
                if done.plateau_low is not None and done.plateau_high is not None else f" ({done.band_note})")
        parts.append(Text(f"Predicted plateau ~{done.plateau.throughput:,.0f} tok/s from "
                          f"C={done.plateau.concurrency}{band}"))
        if done.held_out_low is not None:
            parts.append(Text(_held_out_line(done)))
    if done.knee is not None:
        parts.append(Text(f"Predicted knee C~{done.knee.concurrency:,.0f}"))
    if done.model:
        parts.append(Text(f"Model: {done.model}"))
    parts += _notes(done.notes)
    if with_slo:
        within = (f"C={done.slo_max_concurrency:,} ({done.slo_throughput:,.0f} tok/s)"
                  if done.slo_max_concurrency else "no level")
        parts.append(Text(f"Within the SLO: {within}"))
    return Group(*parts)


SHOWN = 0.0005   # a widening that rounds to 0.0 % is not worth a clause


def _held_out_line(done: Prediction) -> str:
    """The empirical band: the worst held-out step error, widened for a batch past the calibrated ones."""
    beyond = (f", plus {done.held_out_beyond:.1%} for a decoding batch past the calibrated ones (the extrapolation "
              "fold's error per doubling, times the doublings)" if done.held_out_beyond >= SHOWN else "")
    high = f"{done.held_out_high:,.0f} tok/s" if done.held_out_high is not None else "no upper bound"
    return (f"  with every step as far off as the worst {done.held_out_basis} held out of the calibration{beyond}: "
            f"{done.held_out_low:,.0f} to {high}")


def _verdict(trial: ReplicaTrial) -> str:
    return "meets" if trial.meets else ("falls behind" if not trial.keeps_up else "violates")


def plan_view(plan: CapacityPlan, workload: WorkloadSpec) -> Group:
    """Each replica count tried at the rate, and the fewest meeting the SLO with their cost."""
    table = _table(f"{plan.rate:g} req/s of {workload.input_len} in / {workload.output_len} out, "
                   f"{plan.balancer.replace('_', ' ')}: {', '.join(plan.slos)}",
                   ("replicas", "req/s done", "out tok/s", "TTFT p99", "TPOT p99", "E2E p99", "goodput req/s", "SLO"))
    for t in plan.trials:
        table.add_row(f"{t.replicas:,}", f"{t.request_rate:,.2f}", f"{t.output_throughput:,.0f}", _ms(t.ttft_p99_ms),
                      _ms(t.tpot_p99_ms), _ms(t.e2e_p99_ms),
                      f"{t.goodput_rps:,.2f}" if t.goodput_rps is not None else "-", _verdict(t))
    model = [Text(f"Model: {plan.model}")] if plan.model else []
    if plan.replicas is None:
        tried = max((t.replicas for t in plan.trials), default=0)
        return Group(table, Text(f"No replica count up to {tried:,} meets the SLO at this rate."), *model)
    cost = ""
    if plan.cost_per_hour is not None:
        per_million = (f", {plan.cost_per_million_tokens:,.3f} per million output tokens"
                       if plan.cost_per_million_tokens is not None else "")
        cost = f"; {plan.cost_per_hour:,.2f} per hour{per_million}"
    needs = f"Needs {plan.replicas:,} replica(s) = {plan.gpus or 0:,} GPU(s){cost}{_replica_band(plan)}"
    return Group(table, Text(needs), *model)


def _replica_band(plan: CapacityPlan) -> str:
    if plan.replicas_low is None and plan.replicas_high is None:
        return " (no band: the calibration has no held-out error)" if plan.model else ""
    high = f"{plan.replicas_high:,}" if plan.replicas_high is not None else "more than the maximum"
    beyond = (f", plus {plan.held_out_beyond:.1%} for a batch past the calibrated ones" if plan.held_out_beyond >= SHOWN
              else "")
    return (f"; {plan.replicas_low if plan.replicas_low is not None else '-'} to {high} with every step as far off "
            f"as the worst {plan.held_out_basis} held out of the calibration{beyond}")


def _setting(setting: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


def _predicted(trial: TuneTrial) -> str:
    """The prediction and, where the calibration's held-out error widens it, the top of its band."""
    p, high = trial.predicted_tok_s, trial.predicted_high
    if p is None:
        return "-"
    return f"{p:,.0f} (up to {high:,.0f})" if high is not None and high > p * 1.005 else f"{p:,.0f}"


def tune_view(done: TuneResult, grid: int) -> Group:
    """Predicted against measured for every setting measured, and the recommendation (``grid``: the
    settings a brute-force grid would start a server for)."""
    left = ("setting", "measured because", "predicted from")
    table = _table(f"plateau tune: {done.objective}" + (f" ({', '.join(done.slos)})" if done.slos else ""),
                   (*left, "predicted tok/s", "measured tok/s", "prediction error"), left=left)
    for t in done.trials:
        err = t.error
        basis = " + ".join("/".join(str(v) for v in s.values()) for s in t.predicted_from) or "-"
        table.add_row(_setting(t.setting), t.why, basis,
                      _predicted(t), f"{t.measured_tok_s:,.0f}" if t.measured_tok_s is not None else "-",
                      f"{err:+.1%}" if err is not None else "-")
    parts: list[RenderableType] = [table, *_notes(done.calibration_notes)]
    if done.recommendation is None:
        parts.append(Text("No setting was measured successfully."))
    else:
        parts.append(Text(f"Recommended: {_setting(done.recommendation)} ({done.recommended_tok_s or 0:,.0f} tok/s "
                          f"measured); {done.restarts} server start(s) against {grid} for the grid"))
    return Group(*parts)
