"""Comparing deployments: crossovers, SLO capacity, cost and users at a latency target.

Every run is a throughput curve over concurrency. Runs are **aligned** on the union of their
measured concurrencies; where a run did not measure a level its value is interpolated linearly in
``log2(C)`` between its two neighbouring levels (the same scale the plateau search uses: the
sweeps double concurrency, so log spacing is what the data was measured on). A run is never
extrapolated outside its own measured range.

**Crossovers.** For a pair of runs, the throughput difference ``d(C) = a(C) - b(C)`` is
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

**Users at a latency target.** The end-to-end latency of an ``N``-token response at a level is
estimated as ``TTFT + (N - 1) * TPOT`` with both at the same statistic (p90 by default: a sum
of p90s bounds the p90 of the sum from above, so the estimate errs on the safe side). The
largest concurrency whose estimate meets the target, interpolated in ``log2(C)`` between the
last level that meets it and the next, is the number of users the run serves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations, pairwise
from typing import Any

from plateau_bench.analysis.plateau import Knee, Plateau, SearchConfig
from plateau_bench.analysis.slo import STATS, Slo, goodput, level_meets
from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.records import LevelResult, RequestRecord
from plateau_bench.sweep import plateau_and_knee

NS = 1_000_000_000
WORKLOAD_KEYS = ("input_len", "output_len", "range_ratio", "dataset")


@dataclass(frozen=True)
class RunData:
    """One saved run as the comparison needs it (``requests`` by level label, optional)."""

    name: str
    levels: tuple[LevelResult, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)
    requests: Mapping[str, Sequence[RequestRecord]] | None = None
    search: SearchConfig = field(default_factory=SearchConfig)


@dataclass(frozen=True)
class Curve:
    """A run's usable levels (measured, not failed, closed-loop), sorted by concurrency."""

    name: str
    levels: tuple[LevelResult, ...]

    @property
    def concurrencies(self) -> list[int]:
        return [lv.concurrency or 0 for lv in self.levels]

    def at(self, c: float, value: str = "output_throughput") -> float | None:
        """``value`` (a LevelResult attribute) at concurrency ``c``, log2-interpolated; None outside."""
        xs = self.concurrencies
        ys = [float(getattr(lv, value)) for lv in self.levels]
        return interpolate_log2(xs, ys, c)


def interpolate_log2(xs: Sequence[float], ys: Sequence[float | None], c: float) -> float | None:
    """Linear interpolation in log2(x) over sorted ``xs``; None outside the range or at a gap."""
    if not xs or c < xs[0] or c > xs[-1]:
        return None
    for i, x in enumerate(xs):
        if c == x:
            return ys[i]
        if c < x:
            lo, hi = ys[i - 1], ys[i]
            if lo is None or hi is None:
                return None
            t = (math.log2(c) - math.log2(xs[i - 1])) / (math.log2(x) - math.log2(xs[i - 1]))
            return lo + t * (hi - lo)
    return None


def curve_of(run: RunData) -> Curve:
    usable = {lv.concurrency: lv for lv in run.levels
              if lv.concurrency and not lv.level_failed and lv.mode != "rate"}
    if not usable:
        raise ResultsError(f"run {run.name!r} has no finished closed-loop level to compare")
    return Curve(run.name, tuple(usable[c] for c in sorted(usable)))


# -- crossovers ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Crossover:
    first: str                    # the pair, in the order the runs were given
    second: str
    leader_below: str             # ahead at lower concurrency
    leader_above: str             # ahead at higher concurrency (the one that overtakes)
    concurrency: float
    bracket: tuple[int, int]      # measured levels (of either run) around it
    throughput: float             # both runs' (interpolated) output tok/s there
    per_user_tok_s: float         # throughput / concurrency

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [self.first, self.second], "leader_below": self.leader_below,
                "leader_above": self.leader_above, "concurrency": self.concurrency,
                "bracket": list(self.bracket), "throughput": self.throughput,
                "per_user_tok_s": self.per_user_tok_s}


@dataclass(frozen=True)
class PairResult:
    first: str
    second: str
    common_range: tuple[int, int] | None
    crossovers: tuple[Crossover, ...]
    leader_low: str | None        # ahead at the bottom of the common range (None: tied)
    leader_high: str | None       # ahead at the top of it

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [self.first, self.second],
                "common_range": list(self.common_range) if self.common_range else None,
                "crossovers": [c.to_dict() for c in self.crossovers],
                "leader_low": self.leader_low, "leader_high": self.leader_high}


def _sign(d: float) -> int:
    return (d > 0) - (d < 0)


def _noise(a: Curve, b: Curve, c: float) -> float:
    """Combined absolute half-width of the two curves' 95 % CIs at ``c`` (0 when unknown)."""
    total = 0.0
    for cv in (a, b):
        thr = cv.at(c) or 0.0
        ci = interpolate_log2(cv.concurrencies, [lv.throughput_ci_rel or 0.0 for lv in cv.levels], c) or 0.0
        total += (thr * ci) ** 2
    return math.sqrt(total)


def find_crossovers(a: Curve, b: Curve) -> PairResult:
    """Every concurrency where one curve overtakes the other inside their common range."""
    lo = max(a.concurrencies[0], b.concurrencies[0])
    hi = min(a.concurrencies[-1], b.concurrencies[-1])
    if lo > hi:
        return PairResult(a.name, b.name, None, (), None, None)
    grid = sorted({c for c in a.concurrencies + b.concurrencies if lo <= c <= hi})
    diff = [(a.at(c) or 0.0) - (b.at(c) or 0.0) for c in grid]
    significant = [abs(d) > _noise(a, b, c) for c, d in zip(grid, diff, strict=True)]
    # Excursions: maximal runs of grid points with one nonzero sign; crossings sit between them.
    excursions: list[tuple[int, list[int]]] = []        # (sign, grid indices)
    for i, d in enumerate(diff):
        s = _sign(d)
        if s == 0:
            continue
        if excursions and excursions[-1][0] == s:
            excursions[-1][1].append(i)
        else:
            excursions.append((s, [i]))
    # A lead that never rises above the noise is a tie: merge it away with its neighbours.
    real = [(s, idx) for s, idx in excursions if any(significant[i] for i in idx)]
    merged: list[tuple[int, list[int]]] = []
    for s, idx in real:
        if merged and merged[-1][0] == s:
            merged[-1][1].extend(idx)
        else:
            merged.append((s, list(idx)))
    names = {1: a.name, -1: b.name}
    crossings: list[Crossover] = []
    for (s0, idx0), (_, idx1) in pairwise(merged):
        i, j = idx0[-1], idx1[0]
        # d = 0 on the first segment between the two leads where its sign changes (or at a zero level).
        k = next((m for m in range(i, j) if _sign(diff[m]) != _sign(diff[m + 1])), i)
        if diff[k + 1] == 0:
            c, bracket = float(grid[k + 1]), (grid[k + 1], grid[k + 1])
        else:
            x0, x1 = math.log2(grid[k]), math.log2(grid[k + 1])
            t = diff[k] / (diff[k] - diff[k + 1])
            c, bracket = 2 ** (x0 + t * (x1 - x0)), (grid[k], grid[k + 1])
        thr = a.at(c) or 0.0
        crossings.append(Crossover(a.name, b.name, names[s0], names[-s0], c, bracket, thr, thr / c))
    leader_low = names[merged[0][0]] if merged else None
    leader_high = names[merged[-1][0]] if merged else None
    return PairResult(a.name, b.name, (lo, hi), tuple(crossings), leader_low, leader_high)


# -- SLO capacity ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SloLevel:
    concurrency: int
    meets: bool
    goodput_rps: float
    goodput_source: str           # "requests" | "level"
    output_throughput: float

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "meets": self.meets, "goodput_rps": self.goodput_rps,
                "goodput_source": self.goodput_source, "output_throughput": self.output_throughput}


@dataclass(frozen=True)
class SloCapacity:
    run: str
    levels: tuple[SloLevel, ...]
    max_concurrency: int | None   # largest level meeting every bound
    max_throughput: float | None  # output tok/s at that level
    best_concurrency: int | None  # the meeting level with the most output tok/s
    best_throughput: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "max_concurrency": self.max_concurrency, "max_throughput": self.max_throughput,
                "best_concurrency": self.best_concurrency, "best_throughput": self.best_throughput,
                "levels": [lv.to_dict() for lv in self.levels]}


@dataclass(frozen=True)
class SloResult:
    slos: tuple[Slo, ...]
    runs: tuple[SloCapacity, ...]
    winner: str | None            # most output tok/s while meeting every bound

    @property
    def label(self) -> str:
        return ", ".join(s.describe() for s in self.slos)

    def to_dict(self) -> dict[str, Any]:
        return {"slo": [s.describe() for s in self.slos], "winner": self.winner,
                "runs": [r.to_dict() for r in self.runs]}


def _goodput_of(level: LevelResult, records: Sequence[RequestRecord] | None, slos: Sequence[Slo],
                meets: bool) -> tuple[float, str]:
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
        rows.append(SloLevel(lv.concurrency or 0, meets, gp, source, lv.output_throughput))
    ok = [r for r in rows if r.meets]
    top = max(ok, key=lambda r: r.concurrency) if ok else None
    best = max(ok, key=lambda r: r.output_throughput) if ok else None
    return SloCapacity(run.name, tuple(rows),
                       top.concurrency if top else None, top.output_throughput if top else None,
                       best.concurrency if best else None, best.output_throughput if best else None)


# -- users at a latency target ---------------------------------------------------------------------

@dataclass(frozen=True)
class UsersAtTarget:
    run: str
    users: int                    # largest concurrency whose estimated E2E meets the target
    at_least: bool                # every measured level met it: the true figure may be higher
    throughput: float | None      # output tok/s at that concurrency (interpolated)
    estimates_ms: tuple[tuple[int, float | None], ...]  # (C, estimated E2E) per level

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "users": self.users, "at_least": self.at_least, "throughput": self.throughput,
                "estimated_e2e_ms": [{"concurrency": c, "e2e_ms": e} for c, e in self.estimates_ms]}


def estimated_e2e_ms(level: LevelResult, response_tokens: int, stat: str) -> float | None:
    ttft = getattr(level.ttft_ms, stat)
    tpot = getattr(level.tpot_ms, stat)
    if ttft is None or (tpot is None and response_tokens > 1):
        return None
    return float(ttft) + (response_tokens - 1) * float(tpot or 0.0)


def users_at_target(curve: Curve, response_tokens: int, target_ms: float, stat: str = "p90") -> UsersAtTarget:
    cs = curve.concurrencies
    est = [estimated_e2e_ms(lv, response_tokens, stat) for lv in curve.levels]
    pairs = tuple(zip(cs, est, strict=True))
    meeting = [i for i, e in enumerate(est) if e is not None and e <= target_ms]
    if not meeting:
        return UsersAtTarget(curve.name, 0, False, None, pairs)
    i = meeting[-1]
    if i == len(cs) - 1:
        return UsersAtTarget(curve.name, cs[i], True, curve.at(cs[i]), pairs)
    lo_e, hi_e = est[i], est[i + 1]
    users = cs[i]
    if lo_e is not None and hi_e is not None and hi_e > lo_e:
        x0, x1 = math.log2(cs[i]), math.log2(cs[i + 1])
        c = 2 ** (x0 + (target_ms - lo_e) / (hi_e - lo_e) * (x1 - x0))
        users = max(cs[i], min(cs[i + 1] - 1, math.floor(c)))
    return UsersAtTarget(curve.name, users, False, curve.at(users), pairs)


# -- the whole comparison --------------------------------------------------------------------------

@dataclass(frozen=True)
class RunSummary:
    name: str
    concurrencies: tuple[int, ...]
    throughputs: tuple[float, ...]
    plateau: Plateau | None
    knee: Knee | None
    best_concurrency: int
    best_throughput: float
    gpus: int | None = None
    tok_s_per_gpu: float | None = None          # at the plateau (else the best level)
    cost_per_mtok: float | None = None          # $ per 1M output tokens there
    slo_cost_per_mtok: tuple[float | None, ...] = ()  # one per SLO profile, at its best level

    @property
    def reference_throughput(self) -> float:
        return self.plateau.throughput if self.plateau else self.best_throughput

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name,
                "levels": [{"concurrency": c, "output_throughput": t}
                           for c, t in zip(self.concurrencies, self.throughputs, strict=True)],
                "plateau": self.plateau.to_dict() if self.plateau else None,
                "knee": self.knee.to_dict() if self.knee else None,
                "best": {"concurrency": self.best_concurrency, "output_throughput": self.best_throughput},
                "gpus": self.gpus, "tok_s_per_gpu": self.tok_s_per_gpu, "cost_per_mtok": self.cost_per_mtok,
                "slo_cost_per_mtok": list(self.slo_cost_per_mtok)}


@dataclass(frozen=True)
class AlignedRow:
    concurrency: int
    values: tuple[float | None, ...]      # one per run; None outside its measured range
    measured: tuple[bool, ...]

    def to_dict(self, names: Sequence[str]) -> dict[str, Any]:
        return {"concurrency": self.concurrency,
                "runs": {n: {"output_throughput": v, "measured": m}
                         for n, v, m in zip(names, self.values, self.measured, strict=True)}}


@dataclass(frozen=True)
class Comparison:
    runs: tuple[RunSummary, ...]
    aligned: tuple[AlignedRow, ...]
    pairs: tuple[PairResult, ...]
    slo: tuple[SloResult, ...] = ()
    users: tuple[UsersAtTarget, ...] = ()
    users_query: dict[str, Any] | None = None   # response_tokens, target_ms, stat, winner
    gpu_cost: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs],
                "aligned": [row.to_dict(self.names) for row in self.aligned],
                "pairs": [p.to_dict() for p in self.pairs],
                "slo": [s.to_dict() for s in self.slo],
                "users": ({**self.users_query, "runs": [u.to_dict() for u in self.users]}
                          if self.users_query else None),
                "gpu_cost_per_hour": self.gpu_cost,
                "warnings": list(self.warnings)}


def align(curves: Sequence[Curve]) -> list[AlignedRow]:
    grid = sorted({c for cv in curves for c in cv.concurrencies})
    return [AlignedRow(c, tuple(cv.at(c) for cv in curves), tuple(c in cv.concurrencies for cv in curves))
            for c in grid]


def _field(spec: Mapping[str, Any], *path: str) -> Any:
    node: Any = spec
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def workload_differences(runs: Sequence[RunData]) -> list[str]:
    """One warning per workload setting that differs between runs (None where a run does not say)."""
    checks = [(k, ("workload", k)) for k in WORKLOAD_KEYS] + [("endpoint", ("target", "endpoint"))]
    out: list[str] = []
    for label, path in checks:
        values = [_field(r.spec, *path) for r in runs]
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

    curves = [curve_of(r) for r in runs]
    slo_results: list[SloResult] = []
    for profile in slos:
        caps = tuple(slo_capacity(r, cv, profile) for r, cv in zip(runs, curves, strict=True))
        meeting = [c for c in caps if c.best_throughput]
        winner = max(meeting, key=lambda c: c.best_throughput or 0.0).run if meeting else None
        slo_results.append(SloResult(tuple(profile), caps, winner))

    summaries: list[RunSummary] = []
    for i, (run, cv) in enumerate(zip(runs, curves, strict=True)):
        plateau, knee = plateau_and_knee(cv.levels, run.search)
        best = max(cv.levels, key=lambda lv: lv.output_throughput)
        n_gpus = gpus[i] if gpus is not None else None
        ref = plateau.throughput if plateau else best.output_throughput
        summaries.append(RunSummary(
            run.name, tuple(cv.concurrencies), tuple(lv.output_throughput for lv in cv.levels), plateau, knee,
            best.concurrency or 0, best.output_throughput, n_gpus,
            ref / n_gpus if n_gpus else None, _cost(gpu_cost, n_gpus, ref),
            tuple(_cost(gpu_cost, n_gpus, s.runs[i].best_throughput) for s in slo_results)))

    users: list[UsersAtTarget] = []
    query: dict[str, Any] | None = None
    if response_tokens is not None and target_latency_s is not None:
        users = [users_at_target(cv, response_tokens, target_latency_s * 1000, latency_stat) for cv in curves]
        top = max(users, key=lambda u: u.users)
        query = {"response_tokens": response_tokens, "target_latency_s": target_latency_s, "stat": latency_stat,
                 "winner": top.run if top.users > 0 else None}

    pairs = tuple(find_crossovers(a, b) for a, b in combinations(curves, 2))
    return Comparison(tuple(summaries), tuple(align(curves)), pairs, tuple(slo_results), tuple(users), query,
                      gpu_cost, tuple(workload_differences(runs)))
