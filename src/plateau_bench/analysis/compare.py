"""Comparing deployments: crossovers, SLO capacity, cost and users at a latency target.

Every run is a throughput curve over concurrency. Runs are **aligned** on the union of their
measured concurrencies; where a run did not measure a level its value is interpolated linearly in
``log2(C)`` between its two neighbouring levels (the same scale the plateau search uses: the
sweeps double concurrency, so log spacing is what the data was measured on). A run is never
extrapolated outside its own measured range.

**Crossovers** (``crossover``). For a pair of runs, the throughput difference ``d(C) = a(C) - b(C)`` is
evaluated at every level of either run inside their common range. Both interpolants are
piecewise linear in ``log2(C)`` with breakpoints at those levels, so ``d`` is too, and each sign
change between consecutive levels locates a crossover exactly (for the interpolants) by solving
``d = 0`` on that segment; the two levels are its bracket. When levels carry a confidence
interval (steady mode), a lead that never exceeds the combined noise of the two curves is a tie,
not a lead: the crossings around such a wiggle are dropped.

**SLO capacity.** A level meets an SLO profile when every bound holds on the level's own
statistic (``slo.level_meets``: percentiles are level-wide). Goodput follows DistServe: requests
completed in the measurement window that meet every bound on their own TTFT/TPOT/E2E, per second
(``slo.goodput``); without saved requests it falls back to the level-wide check (all the level's
requests per second when it meets, else 0).

**Cost.** ``$ per 1M output tokens = gpu_cost * gpus / 3600 / (output tok/s) * 1e6``, at the
plateau (or the best measured level when no plateau was found) and at each SLO's best level.

**Energy.** Output tokens per joule at each run's plateau, from the GPU energy of the level that speaks
for it (``analysis.gpu.plateau_level``, among the levels whose energy is known); compared only where at
least two runs have it.

**Users at a latency target.** The end-to-end latency of an ``N``-token response at a level is
estimated as ``TTFT + (N - 1) * TPOT`` with both at the same statistic (p90 by default: a sum
of p90s bounds the p90 of the sum from above, so the estimate errs on the safe side). The
largest concurrency whose estimate meets the target, interpolated in ``log2(C)`` between the
last level that meets it and the next, is the number of users the run serves.

**Repeats.** For each pair, per level both measured and per figure, Welch's t test over the runs'
repeats says whether the difference is real at 95 % or within the between-run noise; without repeats
in a run it says it cannot tell (``analysis.repeats``).

**The result** is a tree of msgspec Structs whose field names are the keys ``plateau compare
--json`` prints: the JSON is ``msgspec.json.encode(comparison)``, nothing is converted by hand.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Literal

import msgspec

from plateau_bench.analysis.crossover import Curve, PairResult, find_crossovers
from plateau_bench.analysis.gpu import plateau_level
from plateau_bench.analysis.plateau import SearchConfig, plateau_and_knee
from plateau_bench.analysis.repeats import RepeatComparison, compare_repeats
from plateau_bench.analysis.slo import STATS, Slo, goodput, level_meets
from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.records import RequestRecord
from plateau_bench.result import Knee, LevelResult, Plateau, RunSpec
from plateau_bench.spec import LengthSpec, WorkloadSpec
from plateau_bench.units import NS

# Every workload setting that changes the load a server sees (lengths, their spread, shared prefixes,
# conversations, a trace), read from the spec itself so a new setting is compared without being listed.
# Not these: the seed draws other prompts from the same distributions, the tokenizer only makes the
# lengths exact, and the session header is a routing name.
_SAME_LOAD = frozenset({"seed", "tokenizer", "session_header"})
WORKLOAD_KEYS = tuple(f.name for f in msgspec.structs.fields(WorkloadSpec) if f.name not in _SAME_LOAD)


@dataclass(frozen=True)
class RunData:
    """One saved run as the comparison needs it (``requests`` by level label, optional)."""

    name: str
    levels: tuple[LevelResult, ...]
    spec: RunSpec = field(default_factory=RunSpec)
    requests: Mapping[str, Sequence[RequestRecord]] | None = None
    search: SearchConfig = field(default_factory=SearchConfig)


def curve_of(run: RunData) -> Curve:
    usable = {lv.concurrency: lv for lv in run.levels
              if lv.concurrency and not lv.level_failed and lv.mode != "rate"}
    if not usable:
        raise ResultsError(f"run {run.name!r} has no finished closed-loop level to compare")
    return Curve(run.name, tuple(usable[c] for c in sorted(usable)))


# -- SLO capacity ----------------------------------------------------------------------------------

GoodputSource = Literal["requests", "level"]


class SloLevel(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    meets: bool
    goodput_rps: float
    goodput_source: GoodputSource  # from the saved requests, or the level-wide check
    output_throughput: float


class SloCapacity(msgspec.Struct, frozen=True, kw_only=True):
    run: str
    max_concurrency: int | None   # largest level meeting every bound
    max_throughput: float | None  # output tok/s at that level
    best_concurrency: int | None  # the meeting level with the most output tok/s
    best_throughput: float | None
    levels: tuple[SloLevel, ...]


class SloResult(msgspec.Struct, frozen=True, kw_only=True):
    slo: tuple[str, ...]          # the profile's bounds, as ``Slo.describe`` writes them
    winner: str | None            # most output tok/s while meeting every bound
    runs: tuple[SloCapacity, ...]

    @property
    def label(self) -> str:
        return ", ".join(self.slo)


def _goodput_of(level: LevelResult, records: Sequence[RequestRecord] | None, slos: Sequence[Slo],
                meets: bool) -> tuple[float, GoodputSource]:
    if records:
        lo, hi = level.window_start_s * NS, level.window_end_s * NS
        in_window = [r for r in records if lo <= r.end_ns <= hi]
        return goodput(in_window, level.duration_s, slos), "requests"
    return (level.request_throughput if meets else 0.0), "level"


def slo_capacity(run: RunData, curve: Curve, slos: Sequence[Slo]) -> SloCapacity:
    for s in slos:
        if all(s.value(lv) is None for lv in curve.levels):
            raise ResultsError(f"run {run.name!r} has no {s.key} measurements, so --slo {s.describe()} "
                               "cannot be checked")
    rows: list[SloLevel] = []
    for lv in curve.levels:
        meets = level_meets(lv, slos)
        records = run.requests.get(lv.label) if run.requests else None
        gp, source = _goodput_of(lv, records, slos, meets)
        rows.append(SloLevel(concurrency=lv.concurrency or 0, meets=meets, goodput_rps=gp, goodput_source=source,
                             output_throughput=lv.output_throughput))
    ok = [r for r in rows if r.meets]
    top = max(ok, key=lambda r: r.concurrency) if ok else None
    best = max(ok, key=lambda r: r.output_throughput) if ok else None
    return SloCapacity(run=run.name, levels=tuple(rows),
                       max_concurrency=top.concurrency if top else None,
                       max_throughput=top.output_throughput if top else None,
                       best_concurrency=best.concurrency if best else None,
                       best_throughput=best.output_throughput if best else None)


# -- users at a latency target ---------------------------------------------------------------------

class E2eEstimate(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    e2e_ms: float | None          # None where the level lacks the statistic


class UsersAtTarget(msgspec.Struct, frozen=True, kw_only=True):
    run: str
    users: int                    # largest concurrency whose estimated E2E meets the target
    at_least: bool                # every measured level met it: the true figure may be higher
    throughput: float | None      # output tok/s at that concurrency (interpolated)
    estimated_e2e_ms: tuple[E2eEstimate, ...]  # one per level

    @property
    def estimates_ms(self) -> tuple[tuple[int, float | None], ...]:
        """(C, estimated E2E) per level."""
        return tuple((e.concurrency, e.e2e_ms) for e in self.estimated_e2e_ms)


class UsersQuery(msgspec.Struct, frozen=True, kw_only=True):
    """How many users each run serves within ``target_latency_s`` for ``response_tokens``-token responses."""

    response_tokens: int
    target_latency_s: float
    stat: str                     # the statistic of TTFT and TPOT in the estimate
    winner: str | None            # the run serving the most (None: no run serves one)
    runs: tuple[UsersAtTarget, ...]


def estimated_e2e_ms(level: LevelResult, response_tokens: int, stat: str) -> float | None:
    ttft = getattr(level.ttft_ms, stat)
    tpot = getattr(level.tpot_ms, stat)
    if ttft is None or (tpot is None and response_tokens > 1):
        return None
    return float(ttft) + (response_tokens - 1) * float(tpot or 0.0)


def users_at_target(curve: Curve, response_tokens: int, target_ms: float, stat: str = "p90") -> UsersAtTarget:
    cs = curve.concurrencies
    est = [estimated_e2e_ms(lv, response_tokens, stat) for lv in curve.levels]
    estimates = tuple(E2eEstimate(concurrency=c, e2e_ms=e) for c, e in zip(cs, est, strict=True))

    def result(users: int, at_least: bool) -> UsersAtTarget:
        return UsersAtTarget(run=curve.name, users=users, at_least=at_least,
                             throughput=curve.at(users) if users else None, estimated_e2e_ms=estimates)

    meeting = [i for i, e in enumerate(est) if e is not None and e <= target_ms]
    if not meeting:
        return result(0, False)
    i = meeting[-1]
    if i == len(cs) - 1:
        return result(cs[i], True)
    lo_e, hi_e = est[i], est[i + 1]
    users = cs[i]
    if lo_e is not None and hi_e is not None and hi_e > lo_e:
        x0, x1 = math.log2(cs[i]), math.log2(cs[i + 1])
        c = 2 ** (x0 + (target_ms - lo_e) / (hi_e - lo_e) * (x1 - x0))
        users = max(cs[i], min(cs[i + 1] - 1, math.floor(c)))
    return result(users, False)


# -- the whole comparison --------------------------------------------------------------------------

class CurvePoint(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    output_throughput: float


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    levels: tuple[CurvePoint, ...]
    plateau: Plateau | None
    knee: Knee | None
    best: CurvePoint                            # the measured level with the most output tok/s
    gpus: int | None = None
    tok_s_per_gpu: float | None = None          # at the plateau (else the best level)
    cost_per_mtok: float | None = None          # $ per 1M output tokens there
    slo_cost_per_mtok: tuple[float | None, ...] = ()  # one per SLO profile, at its best level
    output_tokens_per_joule: float | None = None  # GPU energy at the plateau level (analysis.gpu.plateau_level)
    energy_concurrency: int | None = None          # the level it was measured at

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(p.concurrency for p in self.levels)

    @property
    def throughputs(self) -> tuple[float, ...]:
        return tuple(p.output_throughput for p in self.levels)

    @property
    def best_concurrency(self) -> int:
        return self.best.concurrency

    @property
    def best_throughput(self) -> float:
        return self.best.output_throughput

    @property
    def reference_throughput(self) -> float:
        return self.plateau.throughput if self.plateau else self.best.output_throughput


class AlignedValue(msgspec.Struct, frozen=True, kw_only=True):
    output_throughput: float | None   # None outside the run's measured range
    measured: bool                    # False: interpolated


class AlignedRow(msgspec.Struct, frozen=True, kw_only=True):
    concurrency: int
    runs: dict[str, AlignedValue]     # by run name, in the order the runs were given

    @property
    def values(self) -> tuple[float | None, ...]:
        return tuple(v.output_throughput for v in self.runs.values())

    @property
    def measured(self) -> tuple[bool, ...]:
        return tuple(v.measured for v in self.runs.values())


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    runs: tuple[RunSummary, ...]
    aligned: tuple[AlignedRow, ...]
    pairs: tuple[PairResult, ...]
    slo: tuple[SloResult, ...] = ()
    users: UsersQuery | None = None
    gpu_cost_per_hour: float | None = None
    warnings: tuple[str, ...] = ()
    repeats: tuple[RepeatComparison, ...] = ()   # one per pair of runs: real differences or noise

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]


def align(curves: Sequence[Curve]) -> list[AlignedRow]:
    grid = sorted({c for cv in curves for c in cv.concurrencies})
    return [AlignedRow(concurrency=c, runs={cv.name: AlignedValue(output_throughput=cv.at(c),
                                                                  measured=c in cv.concurrencies)
                                            for cv in curves})
            for c in grid]


def _setting(spec: RunSpec, key: str) -> object:
    if key == "endpoint":
        return spec.target.endpoint if spec.target is not None else None
    value: object = getattr(spec.workload, key)
    return value.text if isinstance(value, LengthSpec) else value   # as the command line wrote it


def workload_differences(runs: Sequence[RunData]) -> list[str]:
    """One warning per workload setting that differs between runs (None where a run does not say)."""
    out: list[str] = []
    for label in (*WORKLOAD_KEYS, "endpoint"):
        values = [_setting(r.spec, label) for r in runs]
        # An endpoint is unknown for the twin run in virtual time: that is no difference.
        known = [v for v in values if v is not None] if label == "endpoint" else values
        if len({repr(v) for v in known}) > 1:
            shown = ", ".join(f"{r.name}={v if v is not None else 'unknown'}" for r, v in zip(runs, values,
                                                                                          strict=True))
            out.append(f"the workloads differ in {label} ({shown}): throughputs are not like for like")
    modes = [sorted({lv.mode for lv in r.levels}) for r in runs]
    if len({tuple(m) for m in modes}) > 1:
        shown = ", ".join(f"{r.name}={'/'.join(m)}" for r, m in zip(runs, modes, strict=True))
        out.append(f"the load modes differ ({shown}): burst and steady-state levels are not like for like")
    return out


def _cost(gpu_cost: float | None, gpus: int | None, throughput: float | None) -> float | None:
    if gpu_cost is None or gpus is None or not throughput:
        return None
    return gpu_cost * gpus / 3600.0 / throughput * 1e6


def _check_options(runs: Sequence[RunData], gpu_cost: float | None, gpus: Sequence[int] | None,
                   response_tokens: int | None, target_latency_s: float | None, latency_stat: str) -> None:
    if len(runs) < 2:
        raise ConfigError("a compare needs at least two runs (got "
                          f"{len(runs)}): plateau compare RUN_DIR RUN_DIR [...]")
    if len({r.name for r in runs}) < len(runs):
        raise ConfigError("two runs have the same name: give each a distinct --name")
    if gpu_cost is not None and gpu_cost < 0:
        raise ConfigError(f"--gpu-cost must not be negative (got {gpu_cost:g})")
    if gpus is not None:
        if len(gpus) != len(runs):
            raise ConfigError(f"--gpus gives {len(gpus)} GPU count(s) for {len(runs)} runs: give one per run")
        if any(g <= 0 for g in gpus):
            raise ConfigError("--gpus counts must be positive")
    if gpu_cost is not None and gpus is None:
        raise ConfigError("--gpu-cost needs --gpus (one GPU count per run, e.g. --gpus 4,8)")
    if (response_tokens is None) != (target_latency_s is None):
        raise ConfigError("--response-tokens and --target-latency go together")
    if response_tokens is not None and response_tokens < 1:
        raise ConfigError(f"--response-tokens must be >= 1 (got {response_tokens})")
    if target_latency_s is not None and target_latency_s <= 0:
        raise ConfigError("--target-latency must be positive")
    if latency_stat not in STATS:
        raise ConfigError(f"--latency-stat must be one of {', '.join(STATS)} (got {latency_stat!r})")


def _energy(levels: Sequence[LevelResult]) -> tuple[float | None, int | None]:
    """Output tokens per joule at the plateau, among the levels whose GPU energy is known."""
    known = [lv for lv in levels if lv.gpu_metrics is not None and lv.gpu_metrics.output_tokens_per_joule]
    level = plateau_level(known)
    if level is None or level.gpu_metrics is None:
        return None, None
    return level.gpu_metrics.output_tokens_per_joule, level.concurrency


def _summary(run: RunData, cv: Curve, gpu_cost: float | None, gpus: int | None,
             slo_best: Sequence[float | None]) -> RunSummary:
    plateau, knee = plateau_and_knee(cv.levels, run.search)
    best = max(cv.levels, key=lambda lv: lv.output_throughput)
    ref = plateau.throughput if plateau else best.output_throughput
    tokens_per_joule, energy_at = _energy(cv.levels)
    return RunSummary(
        name=run.name, plateau=plateau, knee=knee,
        levels=tuple(CurvePoint(concurrency=lv.concurrency or 0, output_throughput=lv.output_throughput)
                     for lv in cv.levels),
        best=CurvePoint(concurrency=best.concurrency or 0, output_throughput=best.output_throughput),
        gpus=gpus, tok_s_per_gpu=ref / gpus if gpus else None, cost_per_mtok=_cost(gpu_cost, gpus, ref),
        slo_cost_per_mtok=tuple(_cost(gpu_cost, gpus, t) for t in slo_best),
        output_tokens_per_joule=tokens_per_joule, energy_concurrency=energy_at)


def compare_runs(
    runs: Sequence[RunData],
    slos: Sequence[Sequence[Slo]] = (),
    *,
    gpu_cost: float | None = None,
    gpus: Sequence[int] | None = None,
    response_tokens: int | None = None,
    target_latency_s: float | None = None,
    latency_stat: str = "p90",
) -> Comparison:
    """Compare two or more runs. Raises ConfigError/ResultsError with one sentence on bad input."""
    _check_options(runs, gpu_cost, gpus, response_tokens, target_latency_s, latency_stat)
    curves = [curve_of(r) for r in runs]
    slo_results: list[SloResult] = []
    for profile in slos:
        caps = tuple(slo_capacity(r, cv, profile) for r, cv in zip(runs, curves, strict=True))
        meeting = [c for c in caps if c.best_throughput]
        winner = max(meeting, key=lambda c: c.best_throughput or 0.0).run if meeting else None
        slo_results.append(SloResult(slo=tuple(s.describe() for s in profile), winner=winner, runs=caps))

    summaries = tuple(
        _summary(run, cv, gpu_cost, gpus[i] if gpus is not None else None,
                 [s.runs[i].best_throughput for s in slo_results])
        for i, (run, cv) in enumerate(zip(runs, curves, strict=True)))

    users: UsersQuery | None = None
    if response_tokens is not None and target_latency_s is not None:
        served = tuple(users_at_target(cv, response_tokens, target_latency_s * 1000, latency_stat) for cv in curves)
        top = max(served, key=lambda u: u.users)
        users = UsersQuery(response_tokens=response_tokens, target_latency_s=target_latency_s, stat=latency_stat,
                           winner=top.run if top.users > 0 else None, runs=served)

    pairs = tuple(find_crossovers(a, b) for a, b in combinations(curves, 2))
    repeats = tuple(compare_repeats((ra.name, rb.name), ra.levels, rb.levels) for ra, rb in combinations(runs, 2))
    return Comparison(runs=summaries, aligned=tuple(align(curves)), pairs=pairs, slo=tuple(slo_results),
                      users=users, gpu_cost_per_hour=gpu_cost, warnings=tuple(workload_differences(runs)),
                      repeats=repeats)
