"""``plateau predict``: a calibrated twin swept in virtual time at other settings, with a band.

The model (``analysis.calibration.CalibratedModel``) becomes an ``EngineConfig``; the settings a user
asks about (the cap, the KV cache, the step budget) replace its own; the adaptive sweep runs in
virtual time exactly as against a server, with warm levels (``plateau sweep``'s default: the workers
joining a level spread over its cycle), so each predicted level is the desynchronised steady state a server
shows, not the lock step of identical requests started at once (fewer decoding, every prompt in one step).
The band comes from two more sweeps with every fitted
coefficient one standard error slower and one faster: the plateau a user should expect lies
between them when the fit's errors are the only ones (they are not when the engine does something
the step model lacks, which the calibration's residuals show). A second, empirical band comes from
the calibration's cross-validation: the plateau with every step as far off as the worst held-out TPOT
(throughput moves inversely with the step time), widened where the plateau's decoding batch reaches past
the calibrated ones by the calibration's extrapolation fold (its own error per doubling of the batch past
what it was fitted on, times the doublings). A prediction beyond what was measured says how far:
a decoding batch or a context (prompt plus half the answer) larger or smaller than any level's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import msgspec

from plateau_bench.analysis.calibration import EXTRAPOLATION, Lengths, Sweep, calibrate, shifted
from plateau_bench.analysis.plateau import plateau_and_knee
from plateau_bench.analysis.slo import Slo, level_meets
from plateau_bench.answers import CalibratedModel, EngineModel
from plateau_bench.answers import PredictedLevel as PredictedLevel  # re-exported: what a prediction is
from plateau_bench.answers import Prediction as Prediction
from plateau_bench.answers import Settings as Settings
from plateau_bench.errors import ConfigError
from plateau_bench.result import Knee, LevelResult, Plateau, SearchSettings, Verdict
from plateau_bench.sim.config import EngineConfig, Policy
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import kept_attempts, load_requests, load_result
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits


def engine_config(engine: EngineModel, settings: Settings = Settings()) -> EngineConfig:
    """The twin's engine for a calibrated model, with the asked settings (validated)."""
    policy: Policy = "prefill_first" if engine.policy == "prefill_first" else "mixed"
    base = EngineConfig(name="calibrated", model_name="calibrated",
                        step=StepModel(t0=engine.t0, a=engine.a, b=engine.b, c=engine.c, s=engine.s),
                        max_num_seqs=engine.max_num_seqs, max_num_batched_tokens=engine.max_num_batched_tokens,
                        kv_tokens=engine.kv_tokens, block_size=engine.block_size, max_model_len=engine.max_model_len,
                        policy=policy)
    config = base.with_overrides(max_num_seqs=settings.max_num_seqs, kv_tokens=settings.kv_tokens,
                                 max_num_batched_tokens=settings.max_num_batched_tokens)
    return msgspec.structs.replace(config, reserve_kv=True) if settings.reserve_kv else config


def model_line(model: CalibratedModel) -> str:
    """Which model a prediction used, in one line: its sweeps, its step time, its held-out error."""
    cv = model.cross_validation
    error = (f"; each level held out in turn: TPOT within {cv.median_abs_error:.1%} (median), worst "
             f"{cv.worst_error:+.1%}" if cv is not None and cv.median_abs_error is not None
             and cv.worst_error is not None else "; not cross-validated (too few levels)")
    rate = cv.per_doubling() if cv is not None else None
    if rate is not None:
        error += f"; past the calibrated batches, {rate:.1%} more per doubling"
    return (f"the twin calibrated on {', '.join(model.sources)}: {engine_config(model.engine).step.describe()}"
            f"{error}")


def scaled(model: CalibratedModel, factor: float) -> CalibratedModel:
    """The model with every step ``factor`` times as long (a band's edge: the worst held-out error applied to
    every step)."""
    e = model.engine
    engine = msgspec.structs.replace(e, t0=e.t0 * factor, a=e.a * factor, b=e.b * factor, c=e.c * factor,
                                     s=e.s * factor)
    return msgspec.structs.replace(model, engine=engine)


def held_out_worst(model: CalibratedModel) -> float | None:
    """The calibration's worst held-out TPOT error as a fraction below 1 (None: none known, or 100 % or more):
    a level's, or a whole sweep's where several were given and that is worse. A prediction is for another
    setting or another moment, which is what leaving a sweep out tests: two sweeps of one setting minutes
    apart differ by the server's drift, which no level of either shows."""
    widest = model.cross_validation.widest() if model.cross_validation is not None else None
    return widest[1] if widest is not None and widest[1] < 1 else None


def held_out_basis(model: CalibratedModel) -> str:
    """What was held out for ``held_out_worst``: a "level", or a whole "sweep"."""
    widest = model.cross_validation.widest() if model.cross_validation is not None else None
    return widest[0] if widest is not None else "level"


def _plan(concurrencies: Sequence[int] | None, top: int, *, warm: bool = True) -> ConcurrencyPlan:
    from plateau_bench.analysis.plateau import SearchConfig

    return ConcurrencyPlan(mode="steady", concurrencies=tuple(concurrencies) if concurrencies else None,
                           search=SearchConfig(max_concurrency=top), limits=SweepLimits(max_level_s=600, warm=warm))


def lead_in(grid: Sequence[int]) -> tuple[int, ...]:
    """The concurrencies doubling from 1 below a grid's smallest. A warm level spreads the workers joining it
    over the request cycle the level before it showed; a grid's first level has none before it, so its
    workers would all start at once, and identical requests started together stay in lock step on the twin."""
    first, out = min(grid, default=1), []
    c = 1
    while c < first:
        out.append(c)
        c *= 2
    return tuple(out)


async def _sweep(config: EngineConfig, workload: WorkloadSpec, plan: ConcurrencyPlan) -> tuple[
        list[LevelResult], Plateau | None, Knee | None]:
    """The plan swept on the twin; a fixed grid is led in by ``lead_in``'s levels, which are not returned."""
    runner = VirtualLevelRunner(config, workload, steady_s=60)
    lead = lead_in(plan.concurrencies) if plan.concurrencies and plan.limits.warm else ()
    if not lead:
        _, result = await run_plan(runner, plan)
        return result.levels, result.plateau, result.knee
    _, result = await run_plan(runner, dataclasses.replace(plan, concurrencies=(*lead, *(plan.concurrencies or ()))))
    asked = [lv for lv in result.levels if lv.concurrency not in lead]
    plateau, knee = plateau_and_knee(asked, SearchSettings())
    return asked, plateau, knee


def _level(lv: LevelResult, slos: Sequence[Slo]) -> PredictedLevel:
    return PredictedLevel(concurrency=lv.concurrency or 0, output_throughput=lv.output_throughput,
                          decoding=lv.decoding_concurrency, ttft_p50_ms=lv.ttft_ms.p50, ttft_p99_ms=lv.ttft_ms.p99,
                          tpot_p50_ms=lv.tpot_ms.p50, tpot_p99_ms=lv.tpot_ms.p99, e2e_p99_ms=lv.e2e_ms.p99,
                          meets_slo=level_meets(lv, slos) if slos else None)


BAND_MAX_RELATIVE_ERROR = 0.5


def _no_band(model: CalibratedModel) -> str:
    """Why the prediction has no band, or "" when it has one. A coefficient whose standard error is half its
    value or more is not pinned by the fit: shifting it by that error simulates an engine many times faster
    (its steps near zero: a level of millions of steps) or slower, and says nothing more than the note does."""
    if not any(p.stderr for p in model.parameters):
        return "no band: the fit had no residual degrees of freedom"
    loose = [p for p in model.parameters if p.stderr and p.value > 0 and p.stderr >= BAND_MAX_RELATIVE_ERROR * p.value]
    if loose:
        named = ", ".join(f"{p.name} {p.value:.3g} ± {p.stderr:.3g}" for p in loose)
        return f"no band: the fit does not pin {named} (a standard error of half the value or more)"
    return ""


async def predict(model: CalibratedModel, workload: WorkloadSpec, settings: Settings = Settings(), *,
                  concurrencies: Sequence[int] | None = None, slos: Sequence[Slo] = (),
                  band: bool = True) -> Prediction:
    """The predicted sweep at ``settings`` (plateau, knee, latency percentiles, SLO capacity) with a band."""
    config = engine_config(model.engine, settings)
    top = max(4096, 4 * config.max_num_seqs)
    plan = _plan(concurrencies, top)
    levels, plateau, knee = await _sweep(config, workload, plan)
    low = high = None
    note = _no_band(model)
    if band and not note and plateau is not None:
        low, high = await _standard_error_band(model, settings, workload, levels, plateau, top)
    predicted = [_level(lv, slos) for lv in sorted(levels, key=lambda lv: lv.concurrency or 0)]
    held_out_low, held_out_high, beyond = _held_out_band(model, plateau, levels)
    meeting = [p for p in predicted if p.meets_slo]
    best = max(meeting, key=lambda p: p.concurrency) if meeting else None
    return Prediction(engine=msgspec.structs.replace(model.engine, max_num_seqs=config.max_num_seqs,
                                                     kv_tokens=config.kv_tokens,
                                                     max_num_batched_tokens=config.max_num_batched_tokens),
                      levels=predicted, plateau=plateau, knee=knee, plateau_low=low, plateau_high=high,
                      slo_max_concurrency=best.concurrency if best else None,
                      slo_throughput=best.output_throughput if best else None, band_note=note,
                      notes=[*_notes(model, settings), *_extrapolation(model, levels, workload),
                             *_cap_reach(model, config.max_num_seqs)],
                      held_out_low=held_out_low, held_out_high=held_out_high, held_out_beyond=beyond,
                      held_out_basis=held_out_basis(model), model=model_line(model))


async def _standard_error_band(model: CalibratedModel, settings: Settings, workload: WorkloadSpec,
                               levels: Sequence[LevelResult], plateau: Plateau, top: int) -> tuple[float | None,
                                                                                                   float | None]:
    """The plateau with every coefficient one standard error slower, then faster. Each edge is swept on the
    central sweep's grid beside the central model on that same grid, and taken as a ratio to it: an adaptive
    sweep's windows read a level a few per cent apart from a fixed grid's, more than a tight band's width, and
    the band must hold the prediction it is around. The grids run cold: identical requests started together
    make each level deterministic, so the ratio is the coefficients' effect alone, where warm windows would
    add their own scatter (a per cent or two, more than a tight band) and cost several times the time."""
    grid = _plan(sorted({lv.concurrency for lv in levels if lv.concurrency}), top, warm=False)
    _, same_grid, _ = await _sweep(engine_config(model.engine, settings), workload, grid)
    if same_grid is None or same_grid.throughput <= 0:
        return None, None
    edges = []
    for sigmas in (1.0, -1.0):
        _, edge, _ = await _sweep(engine_config(shifted(model, sigmas), settings), workload, grid)
        edges.append(None if edge is None else plateau.throughput * edge.throughput / same_grid.throughput)
    return edges[0], edges[1]


def _held_out_band(model: CalibratedModel, plateau: Plateau | None,
                   levels: Sequence[LevelResult]) -> tuple[float | None, float | None, float]:
    """The plateau with every step as far off as the worst held-out TPOT, that error widened where the plateau's
    decoding batch reaches past the calibrated ones (``beyond_calibrated``); and that widening. Past 100 % there
    is no upper edge (None): a step could be that much faster."""
    worst = held_out_worst(model)
    if plateau is None or worst is None:
        return None, None, 0.0
    on_plateau = plateau.levels or (plateau.concurrency,)
    beyond = beyond_calibrated(model, max((lv.decoding_concurrency for lv in levels if lv.concurrency in on_plateau),
                                          default=0.0))
    error = worst + beyond
    return plateau.throughput / (1 + error), plateau.throughput / (1 - error) if error < 1 else None, beyond


def beyond_calibrated(model: CalibratedModel, batch: float) -> float:
    """What a prediction decoding ``batch`` sequences adds to the held-out error for reaching past the widest
    calibrated batch: the extrapolation fold's error per doubling, times the doublings (0 within)."""
    reach = _batch_reach(model, batch)
    return model.cross_validation.beyond(reach[1] / reach[0]) if reach and model.cross_validation else 0.0


def _batch_reach(model: CalibratedModel, batch: float) -> tuple[float, float] | None:
    """The widest decoding batch calibrated, and ``batch`` (None: either unknown)."""
    most = max((lv.batch for lv in model.levels if lv.metric == "tpot"), default=0.0)
    return (most, batch) if most > 0 and batch > 0 else None


def _extrapolation(model: CalibratedModel, levels: Sequence[LevelResult], workload: WorkloadSpec) -> list[str]:
    """How far the prediction reaches beyond the calibration's decoding batches and contexts."""
    measured = [lv for lv in model.levels if lv.metric == "tpot"]
    reach = _batch_reach(model, max((lv.decoding_concurrency for lv in levels), default=0.0))
    if not measured or reach is None:
        return []
    out = []
    most, deepest = reach
    if deepest > EXTRAPOLATION * most:
        out.append(f"extrapolates: decoding batches up to ~{deepest:,.0f}, {deepest / most:.1f}x the largest "
                   f"calibrated ({most:,.0f}); the step model's per-sequence cost is assumed to hold there")
    contexts = [lv.context for lv in measured if lv.context > 0]
    context = workload.input_len + workload.output_len / 2
    if contexts and not min(contexts) / EXTRAPOLATION <= context <= EXTRAPOLATION * max(contexts):
        out.append(f"extrapolates: a context of ~{context:,.0f} tokens against {min(contexts):,.0f}-"
                   f"{max(contexts):,.0f} calibrated; the KV read cost (c) carries it"
                   + ("" if model.parameter("c").identified else ", and c was not identified (folded into a)"))
    return out


def _cap_reach(model: CalibratedModel, cap: int) -> list[str]:
    """How far the cap predicted at lies from the calibrated ones, and what carries the step there."""
    caps = sorted({lv.slots for lv in model.levels if lv.slots})
    if not caps or caps[0] / EXTRAPOLATION <= cap <= EXTRAPOLATION * caps[-1]:
        return []
    slot = next((p for p in model.parameters if p.name == "s"), None)
    span = f"{caps[0]}" if len(caps) == 1 else f"{caps[0]}-{caps[-1]}"
    carried = (f"the per-slot cost s ({slot.value * 1e3:,.3g} ms per slot, per step) carries it"
               if slot is not None and slot.identified else
               "s, a cost per allocated slot, was not identified (calibrate at two caps): a server that pays per "
               "slot (llama.cpp's --parallel) runs slower there than predicted")
    streams = ("; llama.cpp keeps a KV stream per slot and a step's attention spans the slots between its batch's "
               "lowest and highest, nearly all of them under load, so its step changes with --parallel otherwise than "
               "this linear cost, by more than the band allows: measure the cap asked (plateau tune does)"
               if "llamacpp" in model.engines else "")
    return [f"extrapolates: a cap of {cap:,} against {span} calibrated; {carried}{streams}"]


def _notes(model: CalibratedModel, settings: Settings) -> list[str]:
    out = []
    if settings.kv_tokens is None and model.kv_source != "server":
        out.append(f"the KV cache is a lower bound ({model.engine.kv_tokens:,} tokens, the most seen in use): a "
                   "prediction past it is pessimistic; give --kv-tokens (the server's start-up log states it)")
    if settings.max_num_seqs is None and model.cap_source == "none":
        out.append(f"no cap showed in the calibration: the twin admits {model.engine.max_num_seqs:,}; give "
                   "--max-num-seqs")
    if settings.reserve_kv:
        out.append("admission by the whole request (--reserve-kv): a request runs only when its prompt and "
                   "answer fit in the KV cache beside the running ones', and none is preempted")
    return out


def _best(done: Prediction) -> PredictedLevel:
    return max(done.levels, key=lambda lv: lv.output_throughput)


async def twin_what_if(model: CalibratedModel, verdict: Verdict, workload: WorkloadSpec, source: str) -> Verdict:
    """The cap what-if from the calibrated twin instead of the TPOT slope: the twin with the cap doubled, at
    twice and four times the cap, with the wider of the prediction's two bands; unchanged when the verdict
    names no cap. When the KV cache is known only as a lower bound the answer is a range: that cache, and one
    large enough for the doubled cap."""
    cap = verdict.estimated_cap
    if not cap or "admission_cap" not in (verdict.constraint, verdict.secondary):
        return verdict
    grid, doubled = (2 * cap, 4 * cap), Settings(max_num_seqs=2 * cap)
    model_name = f"calibrated twin ({source})"
    if model.kv_source == "server":
        done = await predict(model, workload, doubled, concurrencies=grid)
        best = _best(done)
        low, high = _wider_band(done)
        band = (f" (band {low:,.0f} to {high:,.0f})" if low is not None and high is not None
                else f" (at least {low:,.0f}: its held-out error, widened for the batch, passes 100 %)"
                if low is not None else "")
        text = (f"the calibrated twin with the cap at {2 * cap} gives ~{best.output_throughput:,.0f} tok/s{band}, "
                f"decoding ~{best.decoding:,.0f} at TPOT p50 {best.tpot_p50_ms or 0:,.0f} ms")
        return msgspec.structs.replace(verdict, predicted_throughput_doubled_cap=best.output_throughput,
                                       what_if_batch=best.decoding, what_if=[text, *verdict.what_if],
                                       what_if_model=model_name, what_if_low=low, what_if_high=high)
    seen = _best(await predict(model, workload, doubled, concurrencies=grid, band=False))
    room = 2 * cap * (workload.input_len + workload.output_len)
    roomy_kv = Settings(max_num_seqs=2 * cap, kv_tokens=max(room, model.engine.kv_tokens))
    roomy = _best(await predict(model, workload, roomy_kv, concurrencies=grid, band=False))
    text = (f"the calibrated twin with the cap at {2 * cap} gives between ~{seen.output_throughput:,.0f} tok/s (if "
            f"the KV cache holds no more than the {model.engine.kv_tokens:,} tokens seen in use) and "
            f"~{roomy.output_throughput:,.0f} tok/s (if it holds {2 * cap} sequences, decoding ~{roomy.decoding:,.0f} "
            f"at TPOT p50 {roomy.tpot_p50_ms or 0:,.0f} ms); /metrics would say which")
    return msgspec.structs.replace(verdict, what_if=[text, *verdict.what_if], what_if_model=model_name,
                                   predicted_throughput_doubled_cap=None, what_if_batch=None, what_if_low=None,
                                   what_if_high=None)


def _wider_band(done: Prediction) -> tuple[float | None, float | None]:
    """The wider of a prediction's two bands, edge by edge: the fit's standard errors and its held-out error
    (widened where the batch reaches past the calibrated ones). No upper edge where the held-out one has none."""
    lows = [x for x in (done.plateau_low, done.held_out_low) if x is not None]
    highs = [x for x in (done.plateau_high, done.held_out_high) if x is not None]
    unbounded = done.held_out_low is not None and done.held_out_high is None
    return (min(lows) if lows else None), (None if unbounded or not highs else max(highs))


def _lengths(run_dir: Path, attempts: dict[str, int]) -> Lengths:
    out: Lengths = {}
    for label, records in load_requests(run_dir, attempts=attempts).items():
        ok = [r for r in records if r.error is None and not r.warmup]
        if ok:
            out[label] = (sum(r.prompt_tokens for r in ok) / len(ok), sum(r.output_tokens for r in ok) / len(ok))
    return out


def load_sweep(run_dir: Path) -> Sweep:
    result = load_result(run_dir)
    directory = run_dir if run_dir.is_dir() else run_dir.parent
    return Sweep(str(run_dir), result, _lengths(directory, kept_attempts(result)))


def load_model(path: Path) -> CalibratedModel:
    """A model saved by ``plateau calibrate --out``, or a result directory calibrated on the spot."""
    if path.is_dir():
        return calibrate([load_sweep(path)])
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return msgspec.json.decode(data, type=CalibratedModel)
    except msgspec.ValidationError:
        return calibrate([load_sweep(path)])     # a result.json
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: not JSON ({exc})") from None
