"""``plateau tune``: measure one setting, calibrate, predict the rest, measure only the promising ones.

1. The server is started from the template with the first setting (``driver.server_process``) and
   swept (the adaptive sweep, as ``plateau sweep`` runs it); then stopped.
2. The sweep calibrates the twin (``analysis.calibration``). For every other setting of the grid the
   twin predicts the plateau (and, with ``--slo``, the throughput of the largest load meeting it)
   when the parameters are ones the engine models: admission caps (``max_num_seqs``,
   ``max_running_requests``, ``parallel``, ...) and step budgets (``max_num_batched_tokens``,
   ``chunked_prefill_size``). A parameter it does not model is measured at every value.
3. The best predicted setting not yet measured is measured on a fresh server, then the twin is
   calibrated again on every sweep measured so far and the rest predicted anew: a server whose step
   time the first sweep could not foresee (llama.cpp's grows with its slot count, not only with the
   batch) corrects the model before the next restart. At most ``candidates`` such rounds; they end
   sooner when no setting left could beat the best measured one even at the top of its band: the
   prediction over one minus the larger of the calibration's held-out error (a sweep predicted without
   itself, else a level; widened, for a setting whose decoding batch reaches past the calibrated ones, by
   the extrapolation fold's error per doubling) and the largest error the predictions have shown so far. A
   tune does not stop on the model's word where the model's own cross-validation says it is not that good. The
   recommendation is the best measured setting. Predicted and measured figures are kept side by side
   (each prediction with the sweeps it was calibrated on, and the top of its band), with the restarts
   spent and what a brute-force grid would have spent (``--brute-force`` measures it all too, for a
   check, predicted by the last calibration).
"""

from __future__ import annotations

import dataclasses
import itertools
import shlex
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from plateau_bench.analysis.calibration import calibrate
from plateau_bench.analysis.slo import Slo
from plateau_bench.answers import CalibratedModel
from plateau_bench.answers import TuneParam as TuneParam  # re-exported: what a tune is
from plateau_bench.answers import TuneResult as TuneResult
from plateau_bench.answers import TuneTrial as TuneTrial
from plateau_bench.errors import ConfigError, PlateauError
from plateau_bench.redaction import redact_command
from plateau_bench.result import ResultFile
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.plan import ConcurrencyPlan


def parse_param(text: str) -> TuneParam:
    """``name=lo..hi`` (lo, the powers of two between, hi) or ``name=a,b,c``."""
    name, sep, spec = text.partition("=")
    if not sep or not name.strip() or not spec.strip():
        raise ConfigError(f"--param {text!r}: write name=lo..hi or name=a,b,c")
    try:
        if ".." in spec:
            lo, hi = (int(v) for v in spec.split("..", 1))
            if not 1 <= lo <= hi:
                raise ValueError
            grid = {lo, hi, *(1 << k for k in range(hi.bit_length() + 1) if lo <= 1 << k <= hi)}
            values = sorted(grid)
        else:
            values = sorted({int(v) for v in spec.split(",") if v.strip()})
            if not values or values[0] < 1:
                raise ValueError
    except ValueError:
        raise ConfigError(f"--param {text!r}: the values must be positive integers (name=lo..hi or "
                          "name=a,b,c)") from None
    return TuneParam(name.strip(), values)


def render(template: str, setting: dict[str, int], port: int) -> list[str]:
    """The server's argv for one setting (ConfigError naming a placeholder the template lacks or misspells)."""
    try:
        return shlex.split(template.format(port=port, **setting))
    except KeyError as exc:
        raise ConfigError(f"--serve names {{{exc.args[0]}}}, which no --param gives (placeholders: "
                          f"{', '.join(['port', *setting])})") from None
    except (ValueError, IndexError) as exc:
        raise ConfigError(f"--serve: not a command template ({exc})") from None


def check_template(template: str, params: Sequence[TuneParam], url_given: bool) -> None:
    for p in params:
        if "{" + p.name + "}" not in template:
            raise ConfigError(f"--serve does not contain {{{p.name}}}: the value of --param {p.name} would never "
                              "reach the server")
    if "{port}" not in template and not url_given:
        raise ConfigError("--serve does not contain {port}: add it (plateau tune picks a free port) or give --url")


def parse_start(items: Sequence[str], params: Sequence[TuneParam]) -> dict[str, int]:
    """``--start name=value ...``: the setting measured first (default: each grid's second value)."""
    chosen = {}
    for item in items:
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise ConfigError(f"--start {item!r}: write name=value (a positive integer)")
        chosen[name.strip()] = int(value)
    return {p.name: chosen.get(p.name, p.values[min(1, len(p.values) - 1)]) for p in params}


def settings(params: Sequence[TuneParam]) -> list[dict[str, int]]:
    return [dict(zip([p.name for p in params], combo, strict=True))
            for combo in itertools.product(*(p.values for p in params))]


def plan_for(plan: ConcurrencyPlan, setting: dict[str, int], params: Sequence[TuneParam],
             start: dict[str, int]) -> ConcurrencyPlan:
    """The sweep of one setting. The start's climbs from the search's own start: its light levels are the
    calibration's view of the fixed step cost. Another setting with a cap is scored by its plateau, which
    lies at or above the cap's quarter unless the server saturates sooner, so its adaptive search starts
    there (two doublings below the cap): a climb from C=1 spends levels the score does not use, and an
    engine whose small batches cost as much as larger ones (llama.cpp on a CPU) can look flat long
    before the cap. With an SLO the largest load meeting it may lie anywhere: the full climb."""
    caps = [setting[p.name] for p in params if p.knob == "cap"]
    if setting == start or not caps or plan.concurrencies is not None or plan.limits.slos:
        return plan
    first = min(max(1, min(caps) // 4), plan.search.max_concurrency)
    search = msgspec.structs.replace(plan.search, start=max(plan.search.start, first))
    return dataclasses.replace(plan, search=search)


def objective_value(result: ResultFile, use_slo: bool) -> float | None:
    """What a measured sweep scores: its plateau, or with an SLO the largest level meeting it."""
    if use_slo:
        return result.slo.throughput if result.slo is not None else None
    if result.plateau is not None:
        return result.plateau.throughput
    ok = [lv.output_throughput for lv in result.levels if lv.completed]
    return max(ok) if ok else None


class Forecast(NamedTuple):
    """A setting's predicted objective and the largest error the calibration's cross-validation allows it."""

    tok_s: float
    held_out: float = 0.0   # |relative error| of the worst held-out prediction (0: none known)

    @property
    def high(self) -> float:
        """The most the setting may measure if the prediction is as far off as the worst held-out one."""
        return self.tok_s / (1.0 - self.held_out)


Measure = Callable[[dict[str, int], Path], Awaitable[tuple[ResultFile, float | None]]]
Predict = Callable[[dict[str, int]], Awaitable[Forecast | None]]


def _key(setting: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(setting.items()))


def _name(setting: dict[str, int]) -> str:
    return "run-" + "-".join(f"{k}-{v}" for k, v in setting.items())


def held_out_error(model: CalibratedModel) -> float:
    """The worst held-out error of a calibration, as a fraction (at most 0.9): leave one sweep out where
    there were several sweeps (another setting is what a tune predicts), else leave one level out."""
    cv = model.cross_validation
    worst = cv.worst(across_sweeps=True) if cv is not None else None
    return min(0.9, worst) if worst is not None else 0.0


async def predictor(run_dirs: Sequence[Path], params: Sequence[TuneParam], workload: WorkloadSpec,
                    slos: Sequence[Slo], notes: list[str]) -> Predict:
    """Predictions from the twin calibrated on the sweeps measured so far."""
    from plateau_bench.sweep.predict import Settings, load_sweep, predict

    model = calibrate([load_sweep(d) for d in run_dirs])
    notes += model.notes
    held_out = held_out_error(model)
    largest = max(v for p in params if p.knob == "cap" for v in p.values) if any(p.knob == "cap" for p in params) \
        else model.engine.max_num_seqs
    kv = None
    if model.kv_source != "server":
        kv = max(model.engine.kv_tokens, 2 * largest * (workload.input_len + workload.output_len))
        notes.append(f"KV cache unknown: predicted as if it held {kv:,} tokens (every candidate's sequences); "
                     "the measurements say whether it does")

    async def predicted(setting: dict[str, int]) -> Forecast | None:
        knobs = {p.knob: setting[p.name] for p in params}
        done = await predict(model, workload, Settings(max_num_seqs=knobs.get("cap"), kv_tokens=kv,
                                                       max_num_batched_tokens=knobs.get("budget")),
                             slos=slos, band=False)
        if slos:
            value = done.slo_throughput
        else:
            value = done.plateau.throughput if done.plateau else max(
                (lv.output_throughput for lv in done.levels), default=None)
        # a setting whose batch reaches past the calibrated ones carries the extrapolation fold's widening
        return None if value is None else Forecast(value, min(0.9, held_out + done.held_out_beyond))
    return predicted


Calibrate = Callable[[Sequence[Path]], Awaitable[Predict]]


class _Search:
    """The trials of one tune and the model of the moment (see the module docstring)."""

    def __init__(self, grid: list[dict[str, int]], measure: Measure, out_dir: Path, calibrate_on: Calibrate,
                 use_slo: bool) -> None:
        self.grid = grid
        self.measure = measure
        self.use_slo = use_slo
        self.out_dir = out_dir
        self.calibrate_on = calibrate_on
        self.trials: dict[tuple[tuple[str, int], ...], TuneTrial] = {}
        self.predictions: dict[tuple[tuple[str, int], ...], Forecast | None] = {}
        self.basis: list[dict[str, int]] = []     # the settings the current predictions were calibrated on

    async def measured(self, setting: dict[str, int], why: str) -> TuneTrial:
        run_dir = self.out_dir / _name(setting)
        trial = TuneTrial(setting=setting, why=why, run_dir=str(run_dir))
        self.note_prediction(trial)
        self.trials[_key(setting)] = trial
        try:
            result, trial.server_ready_s = await self.measure(setting, run_dir)
        except PlateauError as exc:
            if why == "start":
                raise
            # A setting the server cannot start with (or that fails its sweep) is a result, not the end
            # of the tune: what was measured before it is kept.
            trial.why = f"{why} (failed: {exc})"
            return trial
        trial.measured_tok_s = objective_value(result, self.use_slo)
        if result.verdict is not None and result.verdict.constraint == "load_generator":
            trial.load_generator_bound = result.verdict.headline
        return trial

    async def recalibrate(self) -> None:
        ok = [t for t in self.trials.values() if t.measured_tok_s is not None and t.run_dir]
        predict = await self.calibrate_on([Path(t.run_dir or "") for t in ok])
        predictions = {_key(s): await predict(s) for s in self.grid}
        self.basis, self.predictions = [t.setting for t in ok], predictions

    def note_prediction(self, trial: TuneTrial) -> None:
        """Put the prediction of the moment for the trial's setting (and its band) on the trial."""
        forecast = self.predictions.get(_key(trial.setting))
        if forecast is not None:
            trial.predicted_tok_s, trial.predicted_high = forecast.tok_s, forecast.high
            trial.predicted_from = list(self.basis)

    def unmeasured(self) -> list[dict[str, int]]:
        return [s for s in self.grid if _key(s) not in self.trials]

    def best(self) -> TuneTrial | None:
        own = [t for t in self.trials.values() if t.measured_tok_s is not None]
        return max(own, key=lambda t: t.measured_tok_s or 0.0, default=None)

    def worst_error(self) -> float:
        return max((abs(t.error) for t in self.trials.values() if t.error is not None), default=0.0)

    def upper(self, forecast: Forecast) -> float:
        """The most a setting may measure: its prediction over one minus the larger of its held-out error
        and the largest error seen so far (capped below 1: a prediction 100 % off bounds nothing)."""
        margin = min(0.95, max(forecast.held_out, self.worst_error()))
        return forecast.tok_s / (1.0 - margin)

    def next_candidate(self) -> tuple[dict[str, int] | None, str]:
        left = [(s, f) for s in self.unmeasured() if (f := self.predictions.get(_key(s))) is not None]
        if not left:
            return None, "every setting the twin predicts is measured"
        top, forecast = max(left, key=lambda sf: sf[1].tok_s)
        best = self.best()
        if best is None or any(self.upper(f) > (best.measured_tok_s or 0.0) for _, f in left):
            return top, ""
        reach = max(self.upper(f) for _, f in left)
        return None, (f"no setting left could beat {_label(best.setting)} ({best.measured_tok_s:,.0f} tok/s "
                      f"measured): at the top of their bands (held-out error {forecast.held_out:.0%}, largest "
                      f"error so far {self.worst_error():.0%}) the best would measure {reach:,.0f}")


def _label(setting: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in setting.items())


async def run_tune(params: Sequence[TuneParam], start: dict[str, int], measure: Measure, out_dir: Path, *,
                   workload: WorkloadSpec, slos: Sequence[Slo] = (), candidates: int = 2,
                   brute_force: bool = False, serve: str = "", calibrate_on: Calibrate | None = None) -> TuneResult:
    """Measure ``start``, then predict, measure and recalibrate (see the module docstring).

    ``calibrate_on`` turns the measured sweeps' run directories into a predictor (default: the twin's
    calibration, ``predictor``)."""
    grid = settings(params)
    if _key(start) not in {_key(s) for s in grid}:
        raise ConfigError(f"--start {start} is not in the --param grid")
    model_notes: list[str] = []   # the last calibration's
    notes: list[str] = []         # the tune's own

    async def calibrated(run_dirs: Sequence[Path]) -> Predict:
        round_notes: list[str] = []
        made = await predictor(run_dirs, params, workload, slos, round_notes)
        model_notes[:] = round_notes
        return made

    search = _Search(grid, measure, out_dir, calibrate_on or calibrated, bool(slos))
    await search.measured(start, "start")
    known = all(p.knob for p in params)
    if known:
        await search.recalibrate()
        search.note_prediction(search.trials[_key(start)])
        stopped = ""
        for _ in range(candidates):
            setting, stopped = search.next_candidate()
            if setting is None:
                break
            if (await search.measured(setting, "candidate")).measured_tok_s is None:
                continue
            try:
                await search.recalibrate()
            except PlateauError as exc:   # the sweeps together do not calibrate: keep the last model's word
                notes.append(f"not calibrated again after {_label(setting)}: {exc}")
        if stopped:
            notes.append(f"stopped before --candidates {candidates}: {stopped}")
    else:
        notes.append("a parameter the twin does not model: every setting measured")
        for setting in search.unmeasured():
            await search.measured(setting, "measured only")
    restarts = len(search.trials)
    best = search.best()
    if brute_force:
        for setting in search.unmeasured():
            await search.measured(setting, "brute force")
    notes += [f"{_label(t.setting)}: its {t.measured_tok_s or 0:,.0f} tok/s is a lower bound, the load generator "
              f"limited the sweep ({t.load_generator_bound})" for t in search.trials.values() if t.load_generator_bound]
    return TuneResult(serve=redact_command(serve), params=list(params), objective="slo throughput" if slos
                      else "throughput", slos=[s.describe() for s in slos],
                      trials=sorted(search.trials.values(), key=lambda t: _key(t.setting)),
                      recommendation=best.setting if best else None,
                      recommended_tok_s=best.measured_tok_s if best else None, restarts=restarts,
                      brute_force_restarts=len(grid), predicted=known,
                      calibration_notes=[*model_notes, *notes])
