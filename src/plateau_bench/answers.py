"""What the calibrated twin answers, as typed results: the calibrated model (``plateau calibrate --out
model.json``), a predicted sweep (``plateau predict``), a capacity plan (``plateau plan``) and a tune
(``plateau tune``, its ``tune.json``).

Plain structs in the base layer, because two layers meet on them: the orchestration computes them
(``analysis.calibration``, ``sweep.predict``, ``sweep.capacity``, ``sweep.tune``, which re-export them)
and the presentation renders them (``report.answers``), which may not import the orchestration.
"""

from __future__ import annotations

import math

import msgspec

from plateau_bench.result import Knee, Plateau

# -- the calibrated model (``analysis.calibration``) ------------------------------------------------------


# Each step-time term: what it costs and the unit of its value.
TERMS = {"t0": ("fixed cost per step", "s per step"),
         "a": ("per decoding sequence", "s per decoding sequence, per step"),
         "b": ("per prompt token prefilled", "s per prompt token"),
         "c": ("per KV-cache token read", "s per KV token read"),
         "s": ("per allocated slot (the cap), used or not", "s per slot, per step")}


class Parameter(msgspec.Struct, frozen=True, kw_only=True):
    """One term of the step time ``t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read + s*slots``."""

    name: str                      # t0 | a | b | c | s
    value: float                   # in ``unit``
    stderr: float | None = None    # None: no residual degrees of freedom, or not identified
    identified: bool = True
    note: str = ""                 # why it is fixed, when it is
    term: str = ""                 # what it costs: "fixed cost per step", "per allocated slot, per step", ...
    unit: str = ""                 # the value's: "s per step", "s per decoding sequence", ...
    source: str = "fitted"         # fitted | fixed (at 0 or the floor: ``note`` says why)


class LevelFit(msgspec.Struct, frozen=True, kw_only=True):
    run: str
    label: str
    batch: float
    measured_ms: float             # mean TPOT (or TTFT for the prompt's row)
    fitted_ms: float
    metric: str = "tpot"           # tpot | ttft
    context: float = 0.0           # tokens a decoding sequence holds on average (prompt + half the answer)
    held_out_ms: float | None = None   # predicted by the fit without this level (None: that fit cannot be made)
    held_out_sweep_ms: float | None = None   # ... without this level's whole sweep (several sweeps only)
    slots: int | None = None       # the server's admission cap at this level (None: none showed)
    weight: float = 1.0            # the robust fit's weight (Huber, 0..1): below 1, the level fitted worse

    @property
    def residual(self) -> float:
        return self.fitted_ms / self.measured_ms - 1.0

    @property
    def held_out_error(self) -> float | None:
        return None if self.held_out_ms is None else self.held_out_ms / self.measured_ms - 1.0

    @property
    def held_out_sweep_error(self) -> float | None:
        return None if self.held_out_sweep_ms is None else self.held_out_sweep_ms / self.measured_ms - 1.0


class CrossValidation(msgspec.Struct, frozen=True, kw_only=True):
    """How well the fit predicts what it was not fitted on: relative errors of mean TPOT, held out."""

    folds: int = 0                          # levels predicted by a fit without them
    median_abs_error: float | None = None   # leave one level out
    worst_error: float | None = None        # signed: the largest in magnitude
    sweep_folds: int = 0                    # sweeps predicted by a fit without them (several sweeps only)
    sweep_median_abs_error: float | None = None
    sweep_worst_error: float | None = None
    # The extrapolation fold: fitted to the levels up to half the widest decoding batch, the wider levels
    # predicted; the one erring most per doubling of the batch beyond the fit's (None: no fold could be made).
    extrapolation_folds: int = 0             # levels predicted beyond the fold's batches
    extrapolation_from_batch: float | None = None   # the widest decoding batch the fold was fitted to
    extrapolation_ratio: float | None = None        # that level's batch over it
    extrapolation_error: float | None = None        # that level's TPOT error, signed

    def per_doubling(self) -> float | None:
        """How far off, unsigned, the fit went per doubling of the decoding batch beyond its own (None: no fold)."""
        if self.extrapolation_error is None or self.extrapolation_ratio is None or self.extrapolation_ratio <= 1:
            return None
        return abs(self.extrapolation_error) / math.log2(self.extrapolation_ratio)

    def beyond(self, ratio: float) -> float:
        """The error to add to a prediction whose decoding batch reaches ``ratio`` times the widest calibrated:
        the fold's error per doubling, times the doublings (0 within the calibrated batches, or with no fold)."""
        rate = self.per_doubling()
        return rate * math.log2(ratio) if rate is not None and ratio > 1 else 0.0

    def worst(self, *, across_sweeps: bool = False) -> float | None:
        """The worst held-out error, unsigned (None: none known). With ``across_sweeps``, leaving one sweep
        out is read first (another setting is what a tune predicts)."""
        order = (self.sweep_worst_error, self.worst_error) if across_sweeps else (self.worst_error,)
        return next((abs(e) for e in order if e is not None), None)

    def widest(self) -> tuple[str, float] | None:
        """The larger unsigned held-out error of a level's and a whole sweep's, with what was held out ("level"
        or "sweep"; None: none known)."""
        errors = [(basis, abs(e)) for basis, e in (("level", self.worst_error), ("sweep", self.sweep_worst_error))
                  if e is not None]
        return max(errors, key=lambda held: held[1]) if errors else None   # a tie: the level's


class EngineModel(msgspec.Struct, frozen=True, kw_only=True):
    """What the twin needs: the step model and the scheduler's limits."""

    t0: float
    a: float
    b: float
    c: float
    max_num_seqs: int
    s: float = 0.0                 # per allocated slot of max_num_seqs, per step (llama.cpp's --parallel)
    max_num_batched_tokens: int
    kv_tokens: int
    policy: str = "mixed"
    block_size: int = 16
    max_model_len: int = 32768


class CalibratedModel(msgspec.Struct, kw_only=True):
    """``plateau calibrate --out model.json``: the fitted engine, how well it fits and where it came from."""

    kind: str = "plateau-calibrated-model"
    version: int = 1
    engine: EngineModel
    parameters: list[Parameter]
    levels: list[LevelFit]
    sources: list[str]
    cap_source: str                # diagnosis | server | none (no cap seen: the limit is an assumption)
    kv_source: str                 # server | client lower bound
    policy_source: str
    input_len: float               # mean lengths of the calibration levels
    output_len: float
    notes: list[str] = msgspec.field(default_factory=list)
    cross_validation: CrossValidation | None = None
    engines: list[str] = msgspec.field(default_factory=list)   # the servers the sweeps named (vllm, llamacpp, ...)

    def parameter(self, name: str) -> Parameter:
        return next(p for p in self.parameters if p.name == name)


# -- a prediction (``sweep.predict``) ---------------------------------------------------------------------


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """What the prediction changes (None: the calibrated value)."""

    max_num_seqs: int | None = None
    kv_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    reserve_kv: bool = False           # admission by the whole request's KV (sim.config.EngineConfig.reserve_kv)


class PredictedLevel(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    output_throughput: float
    decoding: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    meets_slo: bool | None = None


class Prediction(msgspec.Struct, frozen=True, kw_only=True):
    engine: EngineModel
    levels: list[PredictedLevel]
    plateau: Plateau | None
    knee: Knee | None
    plateau_low: float | None          # the plateau with every coefficient one standard error slower
    plateau_high: float | None         # ... and faster
    slo_max_concurrency: int | None = None
    slo_throughput: float | None = None
    band_note: str = ""
    notes: list[str] = msgspec.field(default_factory=list)
    # The plateau moved by the calibration's worst held-out TPOT error either way (None: no held-out figure):
    # a level's, or a whole sweep's where several were calibrated on and that one is worse.
    held_out_low: float | None = None
    held_out_high: float | None = None
    held_out_basis: str = "level"      # what was held out for that error: a "level", or a whole "sweep"
    model: str = ""                    # the model the prediction came from: its sources, step time and error
    # The part of that band's error added because the plateau's decoding batch reaches past the calibrated ones:
    # the extrapolation fold's error per doubling of the batch, times the doublings (0: within them).
    held_out_beyond: float = 0.0


# -- a capacity plan (``sweep.capacity``) -----------------------------------------------------------------


class ReplicaTrial(msgspec.Struct, frozen=True, kw_only=True):
    replicas: int
    balancer: str
    meets: bool
    keeps_up: bool
    request_rate: float              # completed requests per second
    output_throughput: float
    ttft_p99_ms: float | None
    tpot_p99_ms: float | None
    e2e_p99_ms: float | None
    goodput_rps: float | None
    decoding: float | None = None    # each replica's mean decoding batch


class CapacityPlan(msgspec.Struct, frozen=True, kw_only=True):
    rate: float
    slos: list[str]
    balancer: str
    replicas: int | None             # the fewest meeting the SLO; None: not within max_replicas
    gpus: int | None
    cost_per_hour: float | None
    cost_per_million_tokens: float | None
    trials: list[ReplicaTrial]
    # The fewest replicas with every step as far off as the calibration's worst held-out level, faster then
    # slower (None: no held-out figure, or not within max_replicas).
    replicas_low: int | None = None
    replicas_high: int | None = None
    held_out_basis: str = "level"      # the band's error: the worst held-out "level", or whole "sweep"
    model: str = ""                    # the model the plan came from: its sources, step time and error
    held_out_beyond: float = 0.0       # added to that error for a replica's batch past the calibrated ones


# -- a tune (``sweep.tune``) ------------------------------------------------------------------------------

CAP_NAMES = {"max_num_seqs", "max_running_requests", "parallel", "np", "max_concurrent_requests",
             "max_batch_size", "max_num_seqs_per_replica"}
BUDGET_NAMES = {"max_num_batched_tokens", "chunked_prefill_size", "max_batch_total_tokens",
                "max_batch_prefill_tokens"}


class TuneParam(msgspec.Struct, frozen=True):
    name: str
    values: list[int]

    @property
    def knob(self) -> str | None:
        """What the twin knows this flag as: cap | budget | None (measured only)."""
        key = self.name.lower().replace("-", "_")
        return "cap" if key in CAP_NAMES else "budget" if key in BUDGET_NAMES else None


class TuneTrial(msgspec.Struct, kw_only=True):
    setting: dict[str, int]
    why: str                              # start | candidate | brute force | measured only
    predicted_tok_s: float | None = None  # plateau (or, with --slo, the largest load meeting it)
    # The top of the prediction's band: what the setting may measure if the prediction is as far off as
    # the calibration's worst held-out one.
    predicted_high: float | None = None
    measured_tok_s: float | None = None
    run_dir: str | None = None
    server_ready_s: float | None = None
    # The settings whose sweeps the prediction was calibrated on (measured before this one).
    predicted_from: list[dict[str, int]] = msgspec.field(default_factory=list)
    # Its sweep's verdict named the load generator: the measured figure is what the client drove, a lower
    # bound on the server's (the headline says why).
    load_generator_bound: str | None = None

    @property
    def error(self) -> float | None:
        if self.predicted_tok_s is None or not self.measured_tok_s:
            return None
        return self.predicted_tok_s / self.measured_tok_s - 1.0


class TuneResult(msgspec.Struct, kw_only=True):
    serve: str                            # the template, credentials hidden
    params: list[TuneParam]
    objective: str
    slos: list[str]
    trials: list[TuneTrial]
    recommendation: dict[str, int] | None
    recommended_tok_s: float | None
    restarts: int                         # servers started
    brute_force_restarts: int             # a server per setting
    predicted: bool                       # False: a parameter the twin does not model; all measured
    calibration_notes: list[str] = msgspec.field(default_factory=list)
