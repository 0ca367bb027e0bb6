"""How much load the adaptive sweep spends to find the plateau, the knee and the verdict, against the grid.

For twin presets with a known ceiling, each with a workload (input/output tokens), in virtual time,
side by side:

* the truth: a dense grid (four levels per doubling) of long steady runs whose workers started spread
  over ``TRUTH_STAGGER_S`` (so no two start in lock step), each measured from ``TRUTH_FROM_S`` to
  ``TRUTH_TO_S`` by the engine's own token counter; its plateau and knee are taken as the truth;
* the same dense grid started cold (every worker at once, ``COLD_TRUTH_S`` per level, the precision rule
  off): what a steady level measures when its identical requests start in lock step and the engine
  keeps the wave (the column ``err`` shows how far that is from the truth);
* the seeds' way: a fixed grid in burst mode at 1, 256, 512, 768, 1024, 2048 (the cost reference);
* the adaptive sweep with warm levels (``--warm-levels``, the default, and ``--goal verdict``), the same
  with cold levels (``--cold-levels``), and in burst mode, each with levels of up to 600 s
  (``--max-level-time 10m``), and the adaptive sweep warm and cold again with the default
  ``--max-level-time auto`` (a minute, stretched up to ten for a level with no steady window by then: Run
  B's requests take 40 s and more at its cap; ``warm, auto levels`` is ``plateau sweep`` with every
  default).

Benchmark-seconds are seconds of load against the server (virtual time here: what the same sweep
would cost on the real deployment the preset models); "to verdict" is the benchmark-seconds until the
verdict (constraint and cap) stood as it ended. The twin publishes its gauges as ``/metrics`` would
(``plateau sweep`` scrapes them by default). Prints figures and ratios; asserts nothing.

Cases: the two reference runs' engines with their workloads (``seed-a-tp8ep`` 128/512 and
``seed-b-fp4`` 128/128, ``reference/seed-runs.md``), Run B's engine with 1,024-token outputs
(``seed-b-long``: requests eight times longer, so every level's cycle is too), ``compute-bound`` (no
cap), and ``llama-8b-h100`` with 512/256 (a roofline-derived Llama-3.1-8B on one H100 whose KV cache
fills before its admission cap; see ``sim.presets``).

    .venv/bin/python bench/sweep_efficiency.py [--cases seed-a-tp8ep,seed-b-fp4,...]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from plateau_bench.analysis.plateau import plateau_and_knee
from plateau_bench.result import LevelResult, ResultFile, SearchSettings
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.warm import WarmDriver
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import AUTO_LEVEL_S, AUTO_STRETCH_S, ConcurrencyPlan, SweepLimits

# case -> (preset, input tokens, output tokens, the truth's time scale: its requests' cycle against the others')
CASES = {"seed-a-tp8ep": ("seed-a-tp8ep", 128, 512, 1), "seed-b-fp4": ("seed-b-fp4", 128, 128, 4),
         "seed-b-long": ("seed-b-fp4", 128, 1024, 4), "compute-bound": ("compute-bound", 128, 128, 1),
         "llama-8b-h100": ("llama-8b-h100", 512, 256, 1)}
GRID = (1, 256, 512, 768, 1024, 2048)
# The truth's runs, times the case's scale: the workers' first requests spread over TRUTH_STAGGER_S
# (longer than the case's request cycle at any level), measured from TRUTH_FROM_S to TRUTH_TO_S (at least
# six cycles at the cap: seed-b-long's last 575 s there, the others' under 100 s). Run B's engine, whose
# prefill-first steps take every waiting request at once, gets the longer horizon in both its cases:
# with the shorter one its levels above the cap stayed in waves (~2,150 tok/s instead of ~1,830).
TRUTH_STAGGER_S = 300.0
TRUTH_FROM_S = 600.0
TRUTH_TO_S = 1500.0
COLD_TRUTH_S = 900.0       # seconds per cold-started dense level


def dense_grid(top: int = 4096) -> tuple[int, ...]:
    values = sorted({max(1, round(2 ** (k / 4))) for k in range(0, 4 * top.bit_length())})
    return tuple(v for v in values if v <= top)


def workload(case: str) -> WorkloadSpec:
    _, inl, outl, _ = CASES[case]
    return WorkloadSpec(input_len=inl, output_len=outl)


def truth(case: str) -> ResultFile:
    """The dense grid's long desynchronised steady runs (see the module docstring)."""
    levels = []
    scale = CASES[case][3]
    for c in dense_grid():
        loop = WarmDriver(get_preset(CASES[case][0]), workload(case))
        loop.cycle_s = TRUTH_STAGGER_S * scale   # spread the first requests over this
        loop.set_workers(c)
        loop.advance(TRUTH_FROM_S * scale)
        before = loop.engine.state().generation_tokens_total
        loop.advance(TRUTH_TO_S * scale)
        tok_s = (loop.engine.state().generation_tokens_total - before) / ((TRUTH_TO_S - TRUTH_FROM_S) * scale)
        levels.append(LevelResult(label=f"C={c}", mode="steady", concurrency=c, output_throughput=tok_s))
    result = ResultFile(kind="sweep", levels=levels)
    result.plateau, result.knee = plateau_and_knee(levels, SearchSettings())
    result.benchmark_seconds = len(levels) * TRUTH_TO_S * scale
    return result


def run(case: str, plan: ConcurrencyPlan) -> tuple[float, ResultFile, int]:
    preset = CASES[case][0]
    # Gauges sampled once a second: what a /metrics scrape sees (the records do not depend on it).
    runner = VirtualLevelRunner(get_preset(preset), workload(case), steady_s=60.0, metrics=True, scrape_s=1.0,
                                probe_s=1.0)
    state, result = asyncio.run(run_plan(runner, plan, engine="vllm"))
    return state.spent_s, result, len(state.levels)


def cold_truth_plan() -> ConcurrencyPlan:
    # The rule's window minimum equal to its time limit: every level runs the whole COLD_TRUTH_S.
    return ConcurrencyPlan(mode="steady", concurrencies=dense_grid(),
                           limits=SweepLimits(min_level_s=COLD_TRUTH_S, max_level_s=COLD_TRUTH_S, warm=False))


def adaptive(warm: bool, max_level_s: float = 600.0, stretch_s: float | None = None) -> ConcurrencyPlan:
    return ConcurrencyPlan(mode="steady", limits=SweepLimits(max_level_s=max_level_s, warm=warm,
                                                             level_stretch_s=stretch_s))


def verdict(result: ResultFile) -> str:
    v = result.verdict
    if v is None:
        return "-"
    return v.constraint + (f" {v.estimated_cap}" if v.estimated_cap else "")


def row(case: str, name: str, n: int, spent: float, grid_s: float | None, result: ResultFile,
        reference: ResultFile) -> str:
    plateau = result.plateau.throughput if result.plateau else 0.0
    t_plateau = reference.plateau.throughput if reference.plateau else 0.0
    knee = result.knee
    bracket = f"[{knee.bracket[0]},{knee.bracket[1]}]" if knee else "-"
    t_knee = reference.knee.concurrency if reference.knee else None
    holds = "-" if knee is None or t_knee is None else ("yes" if knee.bracket[0] <= t_knee <= knee.bracket[1] else "no")
    ratio = f"{spent / grid_s:.2f}x" if grid_s else "-"
    to_verdict = result.time_to_verdict_s
    tv = f"{to_verdict:8.0f} {to_verdict / grid_s:6.2f}x" if to_verdict is not None and grid_s else f"{'-':>8} {'-':>7}"
    err = f"{plateau / t_plateau - 1:+7.1%}" if t_plateau else f"{'-':>7}"
    return (f"{case:<14} {name:<20} {n:>6} {spent:>8.0f} {ratio:>7} {tv} {plateau:>8,.0f} {err} "
            f"{bracket:>12} {holds:>5}  {verdict(result)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print(f"{'case':<14} {'method':<20} {'levels':>6} {'bench-s':>8} {'vs grid':>7} {'verdict@':>8} {'vs grid':>7} "
          f"{'plateau':>8} {'err':>7} {'knee in':>12} {'holds':>5}  verdict")
    for case in args.cases.split(","):
        started = time.perf_counter()
        reference = truth(case)
        print(row(case, "dense, desync (truth)", len(reference.levels), reference.benchmark_seconds or 0.0, None,
                  reference, reference))
        spent, cold_dense, n = run(case, cold_truth_plan())
        print(row(case, "dense, cold start", n, spent, None, cold_dense, reference))
        grid_s, grid, n = run(case, ConcurrencyPlan(mode="burst", concurrencies=GRID))
        print(row(case, "fixed grid, burst", n, grid_s, grid_s, grid, reference))
        for name, plan in (("adaptive, warm", adaptive(True)), ("adaptive, cold", adaptive(False)),
                           ("adaptive, burst", ConcurrencyPlan(mode="burst")),
                           ("warm, auto levels", adaptive(True, AUTO_LEVEL_S, AUTO_STRETCH_S)),
                           ("cold, auto levels", adaptive(False, AUTO_LEVEL_S, AUTO_STRETCH_S))):
            spent, result, n = run(case, plan)
            print(row(case, name, n, spent, grid_s, result, reference))
        print(f"{'':<14} (wall time for this case: {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
