"""Scenario generator, oracle and scoring for the diagnosis gauntlet (see ``test_gauntlet`` for the rules).

Shared by ``tests/gauntlet/test_gauntlet.py`` and ``bench/gauntlet.py`` (which prints the tables).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import (
    ClientHealth,
    Knee,
    LevelResult,
    Plateau,
    ResultFile,
    SearchSettings,
    ServerTelemetry,
    Verdict,
)
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.probe import Probe, Window, window
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits

FAMILIES = ("cap", "kv", "kv_under_cap", "compute", "prefill", "unsaturated", "free")
FRONT_END = "front_end"   # a family of its own (``front_end_scenarios``): the seven above keep their rotation
ARMS = ("client", "metrics", "spike")
CLASSES = ("admission_cap", "kv_capacity", "front_end", "compute", "prefill", "not_saturated")
FRONT_END_BINDS = 0.9   # the front end busy this share of the top level's window, the engine below its limits
MIN_LEVEL_S, MAX_LEVEL_S = 2.0, (12.0, 60.0)   # levels last 3 request lifetimes, within these bounds
WHAT_IF_TOLERANCE = 0.25


@dataclass(frozen=True)
class Scenario:
    index: int
    family: str
    config: EngineConfig
    workload: WorkloadSpec
    mode: str
    max_concurrency: int
    chunks: bool
    warm: bool = False       # steady levels measured warm (``--warm-levels``)

    @property
    def limits(self) -> SweepLimits:
        """Levels long enough for a steady state: three lifetimes of a request at the cap."""
        c, w = self.config, self.workload
        fit = c.kv_tokens / (w.input_len + w.output_len)
        step = c.step.t0 + c.step.a * min(c.max_num_seqs, fit, self.max_concurrency)
        lifetime = w.output_len * step + w.input_len * c.step.b
        return SweepLimits(min_level_s=MIN_LEVEL_S, max_level_s=min(MAX_LEVEL_S[1], max(MAX_LEVEL_S[0], 3 * lifetime)),
                           warm=self.warm)

    def describe(self) -> str:
        c, w, s = self.config, self.workload, self.config.step
        return (f"#{self.index} {self.family} {self.mode} {c.policy} cap={c.max_num_seqs} kv={c.kv_tokens} "
                f"budget={c.max_num_batched_tokens} in={w.input_len} out={w.output_len} spread={w.range_ratio} "
                f"t0={s.t0 * 1e3:.2f}ms a={s.a * 1e3:.3f}ms b={s.b * 1e6:.1f}us c={s.c * 1e9:.1f}ns "
                f"maxC={self.max_concurrency}{' chunks' if self.chunks else ''}")


@dataclass(frozen=True)
class Oracle:
    """The engine's answer: the binding constraint, a second one when it binds too, what else is accepted."""

    primary: str
    secondary: str | None
    accepted: frozenset[str]
    shares: dict[str, float]
    top_concurrency: int
    gain: float
    cap_gain: float | None = None    # plateau with the cap doubled, over the plateau, minus 1
    kv_gain: float | None = None     # the same with the KV cache doubled


@dataclass
class Outcome:
    scenario: Scenario
    arm: str
    oracle: Oracle
    verdict: Verdict
    what_if_truth: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.verdict.constraint in self.oracle.accepted

    @property
    def high_wrong(self) -> bool:
        return not self.correct and self.verdict.confidence == "high"

    @property
    def what_if_error(self) -> float | None:
        predicted = self.verdict.predicted_throughput_doubled_cap
        if predicted is None or self.what_if_truth is None or self.what_if_truth <= 0:
            return None
        return predicted / self.what_if_truth - 1.0


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _lengths(rng: np.random.Generator, family: str) -> tuple[int, int]:
    if family == "prefill":
        return round(_log_uniform(rng, 1536, 8192)), round(_log_uniform(rng, 4, 40))
    if family in ("kv", "kv_under_cap"):
        return round(_log_uniform(rng, 32, 512)), round(_log_uniform(rng, 384, 2048))
    return round(_log_uniform(rng, 32, 1024)), round(_log_uniform(rng, 32, 512))


def _sizes(rng: np.random.Generator, family: str, per_seq: int) -> tuple[int, int, int]:
    """(cap, kv_tokens, max_concurrency) for a family; ``per_seq``: the longest request's tokens."""
    cap = round(_log_uniform(rng, 8, 384))
    kv = round(cap * per_seq * _log_uniform(rng, 2.0, 6.0))
    max_c = 4096
    if family == "kv":
        cap = int(rng.choice([1024, 2048, 4096]))
        kv = round(per_seq * _log_uniform(rng, 6, 120))
    elif family == "kv_under_cap":
        fit = _log_uniform(rng, 12, 150)
        kv = round(per_seq * fit)
        cap = max(4, round(fit * _log_uniform(rng, 0.8, 2.0)))
    elif family in ("compute", "prefill"):
        cap = int(rng.choice([1024, 2048, 4096]))
        kv = round(cap * per_seq * 1.5)
        max_c = 1024
    elif family == "unsaturated":
        cap = int(rng.choice([256, 512, 1024]))
        kv = round(cap * per_seq * 2)
        max_c = cap // int(rng.choice([8, 16, 32]))
    elif family == "free":
        kv = round(per_seq * _log_uniform(rng, 4, 400))
    return cap, max(kv, per_seq + 16), max_c


def make_scenario(index: int, seed: int = 0) -> Scenario:
    """One random engine, workload and sweep; the family rotates with ``index`` so every kind appears."""
    rng = np.random.default_rng([seed, index])
    family = FAMILIES[index % len(FAMILIES)]
    step = StepModel(t0=_log_uniform(rng, 2e-3, 20e-3), a=_log_uniform(rng, 0.02e-3, 0.3e-3),
                     b=_log_uniform(rng, 5e-6, 60e-6), c=0.0 if rng.random() < 0.3 else _log_uniform(rng, 1e-9, 30e-9))
    if family == "compute":
        step = msgspec.structs.replace(step, a=_log_uniform(rng, 0.1e-3, 0.5e-3))
    prompt, output = _lengths(rng, family)
    spread = float(rng.choice([0.0, 0.0, 0.3, 0.6, 0.9]))
    per_seq = int((prompt + output) * (1 + spread)) + 2
    cap, kv, max_c = _sizes(rng, family, per_seq)
    budget = max(cap, int(rng.choice([2048, 4096, 8192, 16384])))
    config = EngineConfig(name=f"gauntlet-{index}", step=step, max_num_seqs=cap, max_num_batched_tokens=budget,
                          kv_tokens=kv, max_model_len=max(per_seq * 2, 4096),
                          policy="prefill_first" if rng.random() < 0.25 else "mixed")
    config.validate()
    mode = "burst" if rng.random() < 0.3 else "steady"
    workload = WorkloadSpec(input_len=prompt, output_len=output, range_ratio=spread, seed=index)
    return Scenario(index, family, config, workload, mode, max_c, chunks=bool(rng.random() < 0.5))


def scenarios(n: int, seed: int = 0, start: int = 0) -> list[Scenario]:
    return [make_scenario(i, seed) for i in range(start, start + n)]


def make_front_end_scenario(index: int, seed: int = 0) -> Scenario:
    """A random engine behind a front end 1.5-4x slower than it.

    Engines are drawn from the families whose plateau is an engine limit (not the prefill-heavy one, whose
    step time is mostly prompts, nor the unsaturated one, which never reaches a limit), until one gives the
    front end a cost of 1-50 ms of CPU per request (an API server spends milliseconds on HTTP, templating and
    tokenizing a request). The engine's time per request at its batch limit B (cap, KV cache or the sweep's
    top concurrency) is its prompt's prefill plus its share of B-wide decode steps, ``in * b + out * (t0 / B
    + a)``; the front end costs ``slowdown`` times that. The estimate only picks the engine: whether the front
    end really binds is the oracle's business (the engine's record over the top level's window).
    """
    rng = np.random.default_rng([seed, index, 1])
    slowdown = _log_uniform(rng, 1.5, 4.0)
    for attempt in itertools.count():
        base = make_scenario(10_000 + 100 * index + attempt, seed)
        if base.family in ("prefill", "unsaturated"):
            continue
        c, w, step = base.config, base.workload, base.config.step
        batch = max(1.0, min(c.max_num_seqs, c.kv_tokens / (w.input_len + w.output_len), base.max_concurrency))
        cost_s = slowdown * (w.input_len * step.b + w.output_len * (step.t0 / batch + step.a))
        if 1e-3 <= cost_s <= 50e-3:
            break
    config = msgspec.structs.replace(c, name=f"gauntlet-fe-{index}", front_end_ms_per_request=cost_s * 1e3)
    config.validate()
    return Scenario(index, FRONT_END, config, w, base.mode, base.max_concurrency, base.chunks)


def front_end_scenarios(n: int, seed: int = 0, start: int = 0) -> list[Scenario]:
    return [make_front_end_scenario(i, seed) for i in range(start, start + n)]


def sweep(config: EngineConfig, scenario: Scenario, *, probes: bool = True
          ) -> tuple[list[LevelResult], ResultFile, dict[str, Probe]]:
    runner = VirtualLevelRunner(config, scenario.workload, metrics=probes, probe=probes, chunks=scenario.chunks)
    plan = ConcurrencyPlan(mode="burst" if scenario.mode == "burst" else "steady",
                           search=SearchSettings(max_concurrency=scenario.max_concurrency), limits=scenario.limits)
    state, result = asyncio.run(run_plan(runner, plan))
    return state.levels, result, runner.probes


def _by_c(levels: Iterable[LevelResult]) -> list[LevelResult]:
    by_c = {lv.concurrency: lv for lv in levels if lv.concurrency}
    return [by_c[c] for c in sorted(c for c in by_c if c is not None)]


def _top_window(levels: Sequence[LevelResult], probes: dict[str, Probe], config: EngineConfig) -> Window:
    top = levels[-1]
    w = window(probes[top.label].snapshots, top.window_start_s, top.window_end_s, config.num_gpu_blocks)
    assert w is not None, top.label
    return w


def _gain(levels: Sequence[LevelResult]) -> float:
    top = levels[-1]
    partner = [lv for lv in levels if 2 * (lv.concurrency or 0) <= (top.concurrency or 0)]
    if not partner or partner[-1].output_throughput <= 0:
        return 0.0
    return top.output_throughput / partner[-1].output_throughput - 1.0


def shares(levels: Sequence[LevelResult], probes: dict[str, Probe], config: EngineConfig) -> dict[str, float]:
    """The engine's record over the top level's measurement window."""
    w = _top_window(_by_c(levels), probes, config)
    return {"cap": w.blocked["cap"], "kv": w.kv_share, "budget": w.blocked["budget"], "none": w.blocked["none"],
            "prefill": w.prefill_share, "running": w.running_mean, "kv_usage": w.kv_usage_mean,
            "front_end": w.front_end_busy_share}


RELIEF = 0.15   # doubling a limit that gives less than this does not make it "the" limit alone
NOT_FLAT = 0.15  # a last doubling gaining this much is growth, whatever held requests out


def _limits(sh: dict[str, float], step_ok: set[str], step_bound: str, cap_gain: float | None,
            kv_gain: float | None) -> tuple[str, str | None, set[str]] | None:
    """Rule 2: the admission limits, when they held requests out at least half the time."""
    cap_s, kv_s = sh["cap"], sh["kv"]
    if cap_s + kv_s < 0.5:
        return None
    primary, other = ("kv_capacity", "admission_cap") if kv_s >= cap_s else ("admission_cap", "kv_capacity")
    minor = min(cap_s, kv_s)
    accepted = {primary} | ({other} if minor >= 0.35 else set())
    secondary = other if minor >= 0.15 else None
    relief, other_relief = (kv_gain, cap_gain) if primary == "kv_capacity" else (cap_gain, kv_gain)
    if relief is not None and relief < RELIEF:
        if minor >= 0.15:
            accepted.add(other)     # relaxing the other limit is what helps, or the two bind together
        if minor < 0.15 or other_relief is None or other_relief < RELIEF:
            accepted |= step_ok     # no single limit to relax: the step time shares the blame
            secondary = secondary or step_bound
    return primary, secondary, accepted


def oracle(levels: Sequence[LevelResult], sh: dict[str, float], cap_gain: float | None = None,
           kv_gain: float | None = None, *, plateau_found: bool = False) -> Oracle:
    """The engine's own answer (rules in ``test_gauntlet``'s docstring)."""
    lvls = _by_c(levels)
    gain = _gain(lvls)
    top_c = lvls[-1].concurrency or 0
    step_bound = "prefill" if sh["prefill"] >= 0.5 else "compute"
    step_ok = {step_bound} | ({"compute", "prefill"} if 0.35 <= sh["prefill"] <= 0.65 else set())

    def made(primary: str, secondary: str | None, accepted: set[str]) -> Oracle:
        return Oracle(primary, secondary, frozenset(accepted), sh, top_c, gain, cap_gain, kv_gain)

    limits = _limits(sh, step_ok, step_bound, cap_gain, kv_gain)
    if sh["budget"] >= 0.5 and limits is None:
        limits = ("prefill", None, {"prefill"} | ({"compute"} if sh["prefill"] < 0.5 else set()))
    front_end = sh["front_end"] >= FRONT_END_BINDS and limits is None
    if front_end:
        # Rule 0: the front end was busy all the time and nothing in the engine held requests out: they
        # waited in front of it (the engine's "none" share says nobody waited *inside* it).
        limits = ("front_end", None, {"front_end"})
    rest = limits or (step_bound, None, step_ok)
    if gain >= NOT_FLAT or (gain >= 0.05 and sh["none"] >= 0.5 and not front_end):
        # Still growing: not saturated. In the grey zone, or when the sweep's own search declared a plateau
        # (a noise allowance the diagnosis takes as given), what holds requests out is accepted too.
        grey = gain < NOT_FLAT or plateau_found
        return made("not_saturated", None, {"not_saturated"} | (rest[2] if grey else set()))
    primary, secondary, accepted = rest
    return made(primary, secondary, accepted | ({"not_saturated"} if gain >= 0.05 else set()))


def _client_only(levels: Sequence[LevelResult]) -> list[LevelResult]:
    return [msgspec.structs.replace(lv, telemetry=ServerTelemetry()) for lv in levels]


def _with_spike(levels: Sequence[LevelResult]) -> list[LevelResult]:
    """Client-only levels with a healthy client record, and one CPU and event-loop spike on the top level."""
    out = []
    top = max(lv.concurrency or 0 for lv in levels)
    for lv in _client_only(levels):
        c = float(lv.concurrency or 0)
        health = ClientHealth(cpu_pct_mean=12.0, cpu_pct_max=30.0, loop_lag_ms_mean=0.5, loop_lag_ms_p99=3.0,
                              loop_lag_ms_max=5.0, in_flight_mean=lv.achieved_concurrency, in_flight_max=c, samples=40)
        if lv.concurrency == top:
            health = msgspec.structs.replace(health, cpu_pct_mean=18.0, cpu_pct_max=97.0, loop_lag_ms_p99=75.0,
                                             loop_lag_ms_max=140.0)
        out.append(msgspec.structs.replace(lv, client=health))
    return out


def arm_levels(levels: Sequence[LevelResult], arm: str) -> list[LevelResult]:
    if arm == "metrics":
        return list(levels)
    if arm == "client":
        return _client_only(levels)
    return _with_spike(levels)


def _plateau(result: ResultFile, levels: Sequence[LevelResult]) -> float:
    return result.plateau.throughput if result.plateau else max(lv.output_throughput for lv in levels)


@dataclass
class Case:
    """One scenario swept, with the engine's answers: its record, and the plateau with each limit doubled."""

    scenario: Scenario
    levels: list[LevelResult]
    plateau: Plateau | None
    knee: Knee | None
    shares: dict[str, float]
    base: float                     # the sweep's plateau (or best) throughput
    doubled_cap: float | None       # the same sweep with the cap doubled (swept when needed)
    kv_gain: float | None           # plateau with the KV cache doubled over ``base``, minus 1 (when KV blocked)

    def double_cap(self) -> float:
        if self.doubled_cap is None:
            config = self.scenario.config
            d_levels, d_result, _ = sweep(config.with_overrides(max_num_seqs=2 * config.max_num_seqs),
                                          self.scenario, probes=False)
            self.doubled_cap = _plateau(d_result, d_levels)
        return self.doubled_cap

    @property
    def oracle(self) -> Oracle:
        cap_gain = self.doubled_cap / self.base - 1 if self.doubled_cap is not None else None
        return oracle(self.levels, self.shares, cap_gain, self.kv_gain, plateau_found=self.plateau is not None)


def simulate(scenario: Scenario) -> Case:
    """Sweep one scenario with the engine's record on; again with the cap (the KV cache) doubled where it blocks."""
    config = scenario.config
    levels, result, probes = sweep(config, scenario)
    sh = shares(levels, probes, config)
    case = Case(scenario, levels, result.plateau, result.knee, sh, _plateau(result, levels), None, None)
    if sh["cap"] >= 0.15:
        case.double_cap()
    if sh["kv"] >= 0.15:
        k_levels, k_result, _ = sweep(config.with_overrides(kv_tokens=2 * config.kv_tokens), scenario, probes=False)
        case.kv_gain = _plateau(k_result, k_levels) / case.base - 1
    return case


def judge(case: Case, arms: Sequence[str] = ARMS) -> list[Outcome]:
    """Diagnose each arm of a swept scenario, score it against the oracle, check cap what-ifs against the engine."""
    truth = case.oracle
    engine = {"metrics": "vllm"}
    verdicts = {arm: diagnose(arm_levels(case.levels, arm), engine=engine.get(arm), plateau=case.plateau,
                              knee=case.knee) for arm in arms}
    if any(v.predicted_throughput_doubled_cap is not None for v in verdicts.values()):
        case.double_cap()
    return [Outcome(case.scenario, arm, truth, v, what_if_truth=case.doubled_cap) for arm, v in verdicts.items()]


def run(scenario: Scenario, arms: Sequence[str] = ARMS) -> list[Outcome]:
    return judge(simulate(scenario), arms)


# -- scoring ------------------------------------------------------------------------------------

@dataclass
class Score:
    outcomes: list[Outcome]

    def accuracy(self, arm: str | None = None) -> tuple[int, int]:
        chosen = [o for o in self.outcomes if arm is None or o.arm == arm]
        return sum(o.correct for o in chosen), len(chosen)

    def high_wrong(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.high_wrong]

    def what_if_misses(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.what_if_error is not None and abs(o.what_if_error) > WHAT_IF_TOLERANCE]

    def confusion(self, arm: str | None = None) -> Counter[tuple[str, str]]:
        return Counter((o.oracle.primary, o.verdict.constraint) for o in self.outcomes
                       if arm is None or o.arm == arm)

    def table(self) -> str:
        """Accuracy per oracle class and arm, the confusion matrix, and the what-if errors, as text."""
        lines = ["accuracy by oracle class (correct/total)", f"{'class':15s}" + "".join(f"{a:>16s}" for a in ARMS)
                 + f"{'all':>18s}"]
        for cls in CLASSES:
            cells = []
            for arm in (*ARMS, None):
                chosen = [o for o in self.outcomes if o.oracle.primary == cls and (arm is None or o.arm == arm)]
                cells.append(f"{sum(o.correct for o in chosen)}/{len(chosen)}" if chosen else "-")
            lines.append(f"{cls:15s}" + "".join(f"{c:>16s}" for c in cells[:-1]) + f"{cells[-1]:>18s}")
        cells = [f"{c}/{n} ({c / n:.1%})" if n else "-" for c, n in (self.accuracy(a) for a in (*ARMS, None))]
        lines.append(f"{'overall':15s}" + "".join(f"{c:>16s}" for c in cells[:-1]) + f"{cells[-1]:>18s}")
        lines.append(f"high-confidence wrong: {len(self.high_wrong())}")
        strict = sum(o.verdict.constraint == o.oracle.primary for o in self.outcomes)
        lines.append(f"strict (the verdict names the oracle's primary): {strict}/{len(self.outcomes)} "
                     f"({strict / max(1, len(self.outcomes)):.1%})")
        several = sum(len(o.oracle.accepted) > 1 for o in self.outcomes)
        lines.append(f"verdicts whose oracle accepts more than one class (limits that bind together, grey zones): "
                     f"{several}/{len(self.outcomes)}")
        errors = [abs(e) for o in self.outcomes if (e := o.what_if_error) is not None]
        if errors:
            lines.append(f"cap what-ifs checked: {len(errors)}, median error {np.median(errors):.1%}, "
                         f"worst {max(errors):.1%}, beyond {WHAT_IF_TOLERANCE:.0%}: {len(self.what_if_misses())}")
        lines.append("")
        lines.append("confusion matrix (rows: oracle, columns: verdict; all arms)")
        verdicts = sorted({o.verdict.constraint for o in self.outcomes} | set(CLASSES),
                          key=lambda c: (CLASSES.index(c) if c in CLASSES else 99, c))
        confusion = self.confusion()
        lines.append(f"{'':15s}" + "".join(f"{v[:12]:>13s}" for v in verdicts))
        for cls in CLASSES:
            lines.append(f"{cls:15s}" + "".join(f"{confusion.get((cls, v), 0):>13d}" for v in verdicts))
        return "\n".join(lines)
