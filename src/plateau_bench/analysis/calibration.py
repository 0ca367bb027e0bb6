"""Calibration: the twin's engine fitted to measured sweeps (``plateau calibrate``).

The twin's step takes ``t = t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read + s*slots``
(``slots``: the server's admission cap, which llama.cpp allocates whether the slots run or not). A measured
level shows its mean step from the client side: a request decoding in a batch of ``B`` sequences
waits one step per token, so the mean step is ``B`` over the output rate (Little's law; ``TPOT``
below, the per-request mean TPOT when a level has no rate). In a steady state
requests arrive at the request rate ``r`` (output tok/s over ``O``), so each step also prefills ``r * P * TPOT`` prompt
tokens, and the decoders read ``B * (P + O/2)`` KV tokens (prompt plus half the answer). One row
per level:

    TPOT = t0 + a*B + b*(r*P*TPOT) + c*(B*(P + O/2)) + s*N

(``N``: the sweep's admission cap) and, from the level with the fastest first token (usually the
lightest), one for the prompt's own step: ``TTFT = t0 + a*(B-1) + b*P + s*N``. A robust regression on
relative errors (every level counts alike; one that fits far worse than the rest is down-weighted and
named, ``analysis.calibration_fit``) gives the coefficients, their standard errors (when there are more
rows than unknowns) and the residual of every level.

What a sweep cannot identify is said, not guessed: with one context length ``c*B*(P+O/2)`` moves
with ``a*B``, so ``c`` is folded into ``a`` (fixed at 0) and the note says to sweep a second
prompt length (``plateau calibrate RUN_A RUN_B`` fits several sweeps of one deployment together);
with a single decoding batch nothing separates ``t0`` from ``a`` and the calibration is refused. The
per-slot cost ``s`` needs sweeps at two admission caps or more (``plateau calibrate parallel2/
parallel4/``): at one cap ``s*N`` is a constant the fixed cost absorbs, so ``s`` is fixed at 0 and the
note says so; a twin that predicts another cap then moves its step by nothing.
A coefficient the fit makes negative is fixed at 0 and the rest refitted.

How far to trust it is measured, not assumed: every level's mean TPOT is predicted by the same fit made
without that level (leave one level out) and, with several sweeps, without its whole sweep (leave one
sweep out); their median and worst errors are the calibration's error bar (``CrossValidation``). A fold
whose remaining levels cannot be fitted (a single decoding batch left) predicts nothing and is not
counted. Neither shows how the fit carries past its widest batch, which every prediction at a larger cap
asks of it: the extrapolation fold fits the levels up to half the widest decoding batch and predicts the
wider ones, and its worst error per doubling of the batch widens the band of a prediction reaching further.
The admission cap comes, sweep by sweep,
from the diagnosis (or the server's stated limit), the KV capacity from ``/metrics`` (or, client
alone, a lower bound: the most sequences seen decoding at once, at their full length), the policy
from the engine (SGLang schedules prefill first).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from plateau_bench.analysis.calibration_fit import DOWN_WEIGHTED, NAMES, StepFit, fit_step, relative_residuals
from plateau_bench.analysis.calibration_fit import Row as _Row
from plateau_bench.analysis.diagnosis_client import STALL_MS
from plateau_bench.analysis.diagnosis_common import mean_lengths
from plateau_bench.analysis.roofline_place import decode_batch
from plateau_bench.answers import TERMS, CrossValidation, LevelFit
from plateau_bench.answers import CalibratedModel as CalibratedModel  # re-exported: the fit's result
from plateau_bench.answers import EngineModel as EngineModel
from plateau_bench.answers import Parameter as Parameter
from plateau_bench.errors import ResultsError
from plateau_bench.result import LevelResult, ResultFile

EXTRAPOLATION = 1.25      # a batch this much wider than the widest fitted is extrapolated to
DEFAULT_BUDGET = 8192      # vLLM's step budget for online serving; a client cannot see it


def _stalled(lv: LevelResult) -> bool:
    """The load generator's event loop lagged so long that the level's token times are its own."""
    return (lv.client.loop_lag_ms_p99 or 0.0) >= STALL_MS


def _usable(lv: LevelResult) -> bool:
    """A level whose steps the model describes: successful, timed by a client that kept up (``_stalled``),
    and not recomputing preempted requests (the server's counter, when scraped), whose waste the step
    model has no term for."""
    return (not lv.level_failed and lv.completed > 0 and lv.tpot_ms.mean is not None and lv.tpot_ms.mean > 0
            and lv.failed <= 0.05 * max(lv.num_requests, 1) and not (lv.telemetry.preemptions_delta or 0) > 0
            and not _stalled(lv))


Lengths = dict[str, tuple[float, float]]   # level label -> mean prompt and output tokens of its requests


class Sweep(msgspec.Struct, frozen=True):
    """One measured sweep to calibrate from; ``lengths`` from its request records when saved (exact),
    else the level's window rates give them (``mean_lengths``: noisy at a few requests per window)."""

    name: str
    result: ResultFile
    lengths: Lengths = msgspec.field(default_factory=dict)

    def lengths_of(self, lv: LevelResult) -> tuple[float, float]:
        return self.lengths.get(lv.label) or mean_lengths(lv)


def _mean_step(lv: LevelResult, batch: float) -> float:
    """The level's mean step while decoding: its decoding batch over its output rate (Little's law over the
    window), which is what the throughput a prediction must reproduce says; the mean TPOT when there is no
    rate. The TPOT a client stamps also carries its own delays (a busy event loop stretches every gap), so
    it runs long on a loaded client; the window's token count does not."""
    if lv.output_throughput > 0 and lv.decoding_concurrency > 0:
        return lv.decoding_concurrency / lv.output_throughput
    return float(lv.tpot_ms.mean or 0.0) / 1e3


def _prefill_per_step(lv: LevelResult, prompt: float, output: float, tpot: float) -> float:
    """Prompt tokens an average decode step carries. Steady: arrivals at the request rate (from tokens: the
    window's completion count is coarse at long requests). Burst: the first wave prefills before anyone
    decodes; only the requests admitted later (beyond the most decoding at once) prefill among decodes."""
    if lv.mode == "burst":
        late = max(0, lv.num_requests - lv.peak_decoding)
        return late * prompt * tpot / lv.wall_s if lv.wall_s > 0 else 0.0
    if lv.telemetry.prompt_tokens_rate:                  # the server's own count of prompt tokens per second
        return lv.telemetry.prompt_tokens_rate * tpot
    if lv.input_tokens and lv.duration_s > 0:
        return lv.input_tokens / lv.duration_s * tpot     # prompts sent in the window, per second
    rate = lv.output_throughput / output if output > 0 else lv.request_throughput
    return rate * prompt * tpot


def _rows(sweep: Sweep, cap: int | None = None) -> list[_Row]:
    """The sweep's rows; ``cap``: its admission cap, the slots every step pays for (None: none showed)."""
    rows = []
    slots = float(cap or 0)
    run, levels = sweep.name, sweep.result.levels
    for lv in levels:
        found = decode_batch(lv)
        if not _usable(lv) or found is None:
            continue
        batch = found[0]
        prompt, output = sweep.lengths_of(lv)
        tpot = _mean_step(lv, batch)
        context = prompt + output / 2.0
        rows.append(_Row(run, lv.label, batch, (1.0, batch, _prefill_per_step(lv, prompt, output, tpot),
                                                batch * context, slots), tpot, "tpot", context))
    prompt_row = _prompt_row(sweep, slots)
    return [*rows, prompt_row] if prompt_row is not None else rows


def _prompt_row(sweep: Sweep, slots: float) -> _Row | None:
    """The prompt's own step, from the level with the fastest first token (one without a queue: waiting
    only adds): a first token cannot come sooner than the step that prefills its prompt alongside the
    others decoding then, so that TTFT bounds ``t0 + a*(B-1) + b*P`` from above. The lightest level
    alone is not enough: an idle server's first token can carry latency outside the engine
    (llama.cpp's server: 71 ms at one request at a time, 16 ms at two on the same 65-token prompt),
    which would read as a prefill cost per token several times too high and a twin that stalls its
    decoders on every prompt."""
    candidates = [(float(lv.ttft_ms.p50), found[0], lv) for lv in sweep.result.levels
                  if _usable(lv) and lv.ttft_ms.p50 and (found := decode_batch(lv)) is not None]
    if not candidates:
        return None
    ttft_ms, batch, light = min(candidates, key=lambda c: c[0])
    prompt, _ = sweep.lengths_of(light)
    return _Row(sweep.name, light.label, batch, (1.0, max(batch - 1.0, 0.0), prompt, 0.0, slots), ttft_ms / 1e3,
                "ttft", 0.0)


def _held_out(rows: list[_Row], target: _Row, *, whole_sweep: bool) -> float | None:
    """``target``'s step in ms as predicted by the fit without it (or without its sweep); None when the
    rest cannot be fitted."""
    rest = [r for r in rows if (r.run != target.run if whole_sweep else r is not target)]
    try:
        coef = fit_step(rest).coef
    except ResultsError:
        return None
    return float(np.dot(coef, target.x)) * 1e3


def _cross_validate(rows: list[_Row]) -> tuple[list[LevelFit], CrossValidation]:
    """Every TPOT row predicted without itself and, with several sweeps, without its sweep."""
    several = len({r.run for r in rows}) > 1
    fits = []
    for row in rows:
        tpot = row.metric == "tpot"
        fits.append(LevelFit(run=row.run, label=row.label, batch=row.batch, measured_ms=row.y * 1e3,
                             fitted_ms=0.0, metric=row.metric, context=row.context, slots=int(row.x[4]) or None,
                             held_out_ms=_held_out(rows, row, whole_sweep=False) if tpot else None,
                             held_out_sweep_ms=_held_out(rows, row, whole_sweep=True) if tpot and several else None))
    by_level = [f.held_out_error for f in fits if f.held_out_error is not None]
    by_sweep = [f.held_out_sweep_error for f in fits if f.held_out_sweep_error is not None]
    cv = CrossValidation(
        folds=len(by_level), median_abs_error=_median_abs(by_level), worst_error=_worst(by_level),
        sweep_folds=len({f.run for f in fits if f.held_out_sweep_error is not None}),
        sweep_median_abs_error=_median_abs(by_sweep), sweep_worst_error=_worst(by_sweep))
    fold = _extrapolation_fold(rows)
    if fold is not None:
        folds, reach, ratio, error = fold
        cv = msgspec.structs.replace(cv, extrapolation_folds=folds, extrapolation_from_batch=reach,
                                     extrapolation_ratio=ratio, extrapolation_error=error)
    return fits, cv


FOLD_SPAN = 2.0   # the extrapolation fold fits the levels up to the widest decoding batch over this


def _extrapolation_fold(rows: list[_Row]) -> tuple[int, float, float, float] | None:
    """How the fit errs beyond its own batches, which leaving one level out cannot show (the levels either side
    of the one left out pin it): fitted to the levels whose decoding batch is at most half the widest, it
    predicts the wider ones. A level counts at EXTRAPOLATION times the fold's widest batch or more (closer in, it
    is interpolation). The one erring most per doubling of the batch is kept: a prediction reaching further
    than the calibration did widens its band by that rate (``CrossValidation.beyond``). Nothing when the
    narrower levels cannot be fitted (one decoding batch among them)."""
    tpot = [r for r in rows if r.metric == "tpot"]
    cut = max((r.batch for r in tpot), default=0.0) / FOLD_SPAN
    inside = [r for r in rows if r.batch <= cut]
    try:
        coef = fit_step(inside).coef
    except ResultsError:
        return None
    reach = max(r.batch for r in inside if r.metric == "tpot")
    # never empty: the widest level is at least twice the fold's widest batch
    beyond = [(float(np.dot(coef, r.x)) / r.y - 1.0, r.batch / reach) for r in tpot if r.batch >= EXTRAPOLATION * reach]
    error, ratio = max(beyond, key=lambda held: abs(held[0]) / np.log2(held[1]))
    return len(beyond), reach, ratio, error


def _median_abs(errors: list[float]) -> float | None:
    return float(np.median(np.abs(errors))) if errors else None


def _worst(errors: list[float]) -> float | None:
    return max(errors, key=abs) if errors else None


def _cap(results: Sequence[ResultFile]) -> tuple[int | None, str]:
    from plateau_bench.analysis.diagnosis import diagnose
    from plateau_bench.analysis.plateau import plateau_and_knee
    from plateau_bench.result import SearchSettings

    for result in results:
        v = result.verdict
        if v is None or not v.estimated_cap:   # a run or sim without a sweep's verdict: diagnose its levels
            plateau, knee = plateau_and_knee(result.levels, SearchSettings())
            v = diagnose(result.levels, engine=result.target.engine, plateau=plateau, knee=knee)
        if v.estimated_cap and "admission_cap" in (v.constraint, v.secondary):
            return v.estimated_cap, "diagnosis"
    stated = [lv.telemetry.cap for r in results for lv in r.levels if lv.telemetry.cap]
    return (int(max(stated)), "server") if stated else (None, "none")


def _kv(sweeps: Sequence[Sweep]) -> tuple[int, str]:
    stated = [lv.telemetry.kv_capacity_tokens for s in sweeps for lv in s.result.levels
              if lv.telemetry.kv_capacity_tokens]
    if stated:
        return int(max(stated)), "server"
    seen = [lv.peak_decoding * sum(s.lengths_of(lv)) for s in sweeps for lv in s.result.levels if _usable(lv)]
    return max(int(max(seen, default=0.0)), 16), "client lower bound"


def _parameters(fit: StepFit) -> list[Parameter]:
    out = []
    for j, name in enumerate(NAMES):
        fixed = name in fit.fixed
        err = None if fit.errors is None or fixed or np.isnan(fit.errors[j]) else float(fit.errors[j])
        term, unit = TERMS[name]
        out.append(Parameter(name=name, value=float(fit.coef[j]), stderr=err, identified=not fixed,
                             note=fit.fixed.get(name, ""), term=term, unit=unit, source="fixed" if fixed else "fitted"))
    return out


def _policy(results: Sequence[ResultFile]) -> tuple[str, str]:
    engines = {r.target.engine for r in results if r.target.engine}
    if engines == {"sglang"}:
        return "prefill_first", "engine: SGLang schedules prefill first"
    if engines:
        return "mixed", f"engine: {', '.join(sorted(engines))} mixes decodes and chunked prefill in one step"
    return "mixed", "engine unknown: assumed to mix decodes and chunked prefill (vLLM's way)"


def _sweep_caps(sweeps: Sequence[Sweep]) -> tuple[list[int | None], int | None, str]:
    """Every sweep's admission cap (the slots its steps pay for), and the model's: the first diagnosed, else
    the largest a server stated."""
    found = [_cap([sweep.result]) for sweep in sweeps]
    diagnosed = next(((cap, source) for cap, source in found if source == "diagnosis"), None)
    stated = [cap for cap, source in found if source == "server" and cap]
    cap, source = diagnosed or ((max(stated), "server") if stated else (None, "none"))
    return [cap for cap, _ in found], cap, source


def _fit(sweeps: Sequence[Sweep], rows: list[_Row]) -> tuple[StepFit, list[str]]:
    """The fit, and the levels left out because the load generator stalled there."""
    stalled = [f"{s.name} {lv.label}" if len(sweeps) > 1 else lv.label
               for s in sweeps for lv in s.result.levels if _stalled(lv)]
    try:
        return fit_step(rows), stalled
    except ResultsError as exc:
        if not stalled:
            raise
        raise ResultsError(f"calibration refused: the load generator stalled (event-loop lag p99 >= {STALL_MS:.0f} "
                           f"ms) at {', '.join(stalled)}, so those levels time the client, not the server; run it "
                           f"on cores the server does not use (what is left cannot be fitted: {exc})") from None


def _fit_notes(fit: StepFit, rows: list[_Row], caps: list[int | None], cap: int) -> list[str]:
    """What the fit itself says: the levels it down-weighted and, at several caps, which one the twin runs."""
    notes = []
    several = len({r.run for r in rows}) > 1
    residuals = relative_residuals(rows, fit.coef)
    low = [f"{f'{r.run} ' if several else ''}{r.label} ({r.metric.upper()}, residual {res:+.0%}, weight {w:.2f})"
           for r, res, w in zip(rows, residuals, fit.weights, strict=True) if w < DOWN_WEIGHTED]
    if low:
        notes.append(f"down-weighted by the robust fit (weight < {DOWN_WEIGHTED:g}: far off the rest, so they pull "
                     f"it little): {', '.join(low)}")
    shown = sorted({c for c in caps if c})
    if len(shown) > 1 and "s" not in fit.fixed:
        notes.append(f"admission caps {', '.join(map(str, shown))} in the sweeps give the per-slot cost; the twin "
                     f"runs at {cap} (set --max-num-seqs for another)")
    return notes


def _limit_notes(results: Sequence[ResultFile], cap: int | None, cap_used: int, kv_source: str,
                 kv_tokens: int) -> list[str]:
    notes = []
    if cap is None:
        notes.append(f"no admission cap showed: the twin admits up to {cap_used} (set --max-num-seqs to what the "
                     "server runs with)")
    if kv_source != "server":
        scraped = any(lv.telemetry.engine or lv.telemetry.running_max is not None for r in results for lv in r.levels)
        why = ("the server's /metrics does not state it" if scraped else "enable /metrics for the server's figure")
        notes.append(f"KV capacity {kv_tokens:,} tokens is a lower bound (the most sequences seen decoding at "
                     f"once, at their full length): {why}")
    return notes


def calibrate(sweeps: Sequence[Sweep]) -> CalibratedModel:
    """The twin fitted to one or more sweeps of one deployment (``ResultsError`` when it cannot be)."""
    caps, cap, cap_source = _sweep_caps(sweeps)
    rows = [row for sweep, sweep_cap in zip(sweeps, caps, strict=True) for row in _rows(sweep, sweep_cap)]
    fit, stalled = _fit(sweeps, rows)
    coef = fit.coef
    results = [sweep.result for sweep in sweeps]
    kv_tokens, kv_source = _kv(sweeps)
    policy, policy_source = _policy(results)
    cap_used = cap if cap is not None else max(256, int(2 * max((r.batch for r in rows), default=1.0)))
    notes = _limit_notes(results, cap, cap_used, kv_source, kv_tokens)
    if stalled:
        notes.append(f"left out: {', '.join(stalled)}, where the load generator stalled (event-loop lag p99 >= "
                     f"{STALL_MS:.0f} ms) and timed itself, not the server")
    notes.append(f"step budget {DEFAULT_BUDGET:,} tokens assumed (a client cannot see it; set "
                 "--max-num-batched-tokens)")
    notes += _fit_notes(fit, rows, caps, cap_used)
    held_out, cross_validation = _cross_validate(rows)
    levels = [msgspec.structs.replace(level, fitted_ms=float(np.dot(coef, r.x)) * 1e3, weight=round(float(w), 4))
              for level, r, w in zip(held_out, rows, fit.weights, strict=True)]
    tpot_rows = [r for r in rows if r.metric == "tpot"]
    engine = EngineModel(t0=float(coef[0]), a=float(coef[1]), b=float(coef[2]), c=float(coef[3]), s=float(coef[4]),
                         max_num_seqs=cap_used, max_num_batched_tokens=max(DEFAULT_BUDGET, cap_used),
                         kv_tokens=kv_tokens, policy=policy)
    lengths = [s.lengths_of(lv) for s in sweeps for lv in s.result.levels if _usable(lv)]
    prompts, outputs = [p for p, _ in lengths], [o for _, o in lengths]
    return CalibratedModel(
        engine=engine, parameters=_parameters(fit), levels=levels, sources=[s.name for s in sweeps],
        cap_source=cap_source, kv_source=kv_source, policy_source=policy_source,
        input_len=float(np.mean(prompts)) if prompts else 0.0, output_len=float(np.mean(outputs)) if outputs else 0.0,
        notes=[*notes, f"{len(tpot_rows)} level(s) fitted"], cross_validation=cross_validation,
        engines=sorted({r.target.engine for r in results if r.target.engine}))


def shifted(model: CalibratedModel, sigmas: float) -> EngineModel:
    """The engine with every identified coefficient moved by ``sigmas`` standard errors (slower when > 0),
    for a prediction's band; coefficients stay >= 0 and t0 > 0."""
    values = {}
    for p in model.parameters:
        step = (p.stderr or 0.0) * sigmas
        values[p.name] = max(p.value + step, 0.0 if p.name != "t0" else p.value * 0.05)
    return msgspec.structs.replace(model.engine, **values)
