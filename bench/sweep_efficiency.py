"""How much load the adaptive sweep spends to find the plateau and the knee, against the classic grid.

For twin presets with a known ceiling, each with a workload (input/output tokens), in virtual time,
side by side:

* the adaptive sweep (steady levels stopped by the precision rule, and the same search in burst mode),
* the seeds' way: a fixed grid in burst mode at 1, 256, 512, 768, 1024, 2048,
* a floor under any steady sweep of the same levels: each held for one request cycle (its median
  end-to-end latency), the least a level started cold can cost and still hold a whole cycle (a lock-step
  level's first answers take that long, and a shorter window holds a decode phase without its prefill),
* the reference: a dense steady grid (four levels per doubling), every level held for ``TRUTH_S``
  (no precision rule, so the truth does not share the adaptive sweep's stopping), whose plateau and
  knee are taken as the truth.

Benchmark-seconds are seconds of load against the server (virtual time here: what the same sweep
would cost on the real deployment the preset models). The twin publishes its gauges as ``/metrics``
would (``plateau sweep`` scrapes them by default). Prints figures and ratios; asserts nothing.

Cases: the two reference runs' engines with their workloads (``seed-a-tp8ep`` 128/512 and
``seed-b-fp4`` 128/128, ``reference/seed-runs.md``), Run B's engine with 1,024-token outputs
(``seed-b-long``: requests eight times longer, so every level's turnover and drain are too),
``compute-bound`` (no cap), and ``llama-8b-h100`` with 512/256 (a roofline-derived Llama-3.1-8B on one
H100 whose KV cache fills before its admission cap; see ``sim.presets``).

    .venv/bin/python bench/sweep_efficiency.py [--cases seed-a-tp8ep,seed-b-fp4,...] [--no-drain]

``--no-drain``: the adaptive steady sweep as ``plateau sweep --no-drain`` runs it (requests in flight at a
precise stop cancelled, not drained).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from plateau_bench.result import ResultFile
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits

# case -> (preset, input tokens, output tokens)
CASES = {"seed-a-tp8ep": ("seed-a-tp8ep", 128, 512), "seed-b-fp4": ("seed-b-fp4", 128, 128),
         "seed-b-long": ("seed-b-fp4", 128, 1024), "compute-bound": ("compute-bound", 128, 128),
         "llama-8b-h100": ("llama-8b-h100", 512, 256)}
GRID = (1, 256, 512, 768, 1024, 2048)
TRUTH_S = 900.0   # seconds per truth level: ~15 request cycles at seed-b-fp4's cap, under two at seed-b-long's


def dense_grid(top: int = 4096) -> tuple[int, ...]:
    values = sorted({max(1, round(2 ** (k / 4))) for k in range(0, 4 * top.bit_length())})
    return tuple(v for v in values if v <= top)


def run(case: str, plan: ConcurrencyPlan, steady_s: float = 60.0) -> tuple[float, ResultFile, int]:
    preset, inl, outl = CASES[case]
    # Gauges sampled once a second: what a /metrics scrape sees (the records do not depend on it).
    runner = VirtualLevelRunner(get_preset(preset), WorkloadSpec(input_len=inl, output_len=outl), steady_s=steady_s,
                                metrics=True, scrape_s=1.0, probe_s=1.0)
    state, result = asyncio.run(run_plan(runner, plan))
    return state.spent_s, result, len(state.levels)


def one_cycle_each_s(result: ResultFile) -> float:
    """Seconds the sweep's levels would cost held for one request cycle (median end-to-end latency) each."""
    return sum((lv.e2e_ms.p50 or 0.0) / 1000 for lv in result.levels)


def fmt(result: ResultFile) -> tuple[float, float, str]:
    plateau, knee = result.plateau, result.knee
    bracket = knee.bracket if knee else ("-", "-")
    return (plateau.throughput if plateau else 0.0, knee.concurrency if knee else 0.0, f"[{bracket[0]},{bracket[1]}]")


def steady(concurrencies: tuple[int, ...] | None = None, drain: bool = True) -> ConcurrencyPlan:
    return ConcurrencyPlan(mode="steady", concurrencies=concurrencies, limits=SweepLimits(max_level_s=600, drain=drain))


def truth_plan() -> ConcurrencyPlan:
    # The rule's window minimum equal to its time limit: every level runs the whole TRUTH_S.
    return ConcurrencyPlan(mode="steady", concurrencies=dense_grid(),
                           limits=SweepLimits(min_level_s=TRUTH_S, max_level_s=TRUTH_S))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--no-drain", action="store_true", help="the steady sweep cancels at precise stops")
    args = parser.parse_args()
    print(f"{'case':<14} {'method':<22} {'levels':>6} {'bench-s':>8} {'vs grid':>8} {'plateau':>9} {'err':>7} "
          f"{'knee':>7} {'bracket':>12} {'knee err':>9}")
    for case in args.cases.split(","):
        started = time.perf_counter()
        truth_s, truth, truth_n = run(case, truth_plan())
        t_plateau, t_knee, _ = fmt(truth)
        rows = [
            ("dense steady (truth)", truth_plan(), 60.0),
            ("fixed grid, burst", ConcurrencyPlan(mode="burst", concurrencies=GRID), 60.0),
            ("adaptive, steady", steady(drain=not args.no_drain), 60.0),
            ("adaptive, burst", ConcurrencyPlan(mode="burst"), 60.0),
        ]
        grid_s = None
        for name, spec, steady_s in rows:
            spent, summary, n = (truth_s, truth, truth_n) if name.startswith("dense") else run(case, spec, steady_s)
            if name.startswith("fixed"):
                grid_s = spent
            plateau, knee, bracket = fmt(summary)
            ratio = f"{spent / grid_s:.2f}x" if grid_s else "-"
            print(f"{case:<14} {name:<22} {n:>6} {spent:>8.0f} {ratio:>8} {plateau:>9,.0f} "
                  f"{(plateau / t_plateau - 1) if t_plateau else 0:>+7.1%} {knee:>7.0f} {bracket:>12} "
                  f"{(knee / t_knee - 1) if t_knee else 0:>+9.1%}")
            if name == "adaptive, steady" and grid_s:
                floor = one_cycle_each_s(summary)
                print(f"{case:<14} {'  floor: 1 cycle/level':<22} {n:>6} {floor:>8.0f} {floor / grid_s:>7.2f}x")
        print(f"{'':<14} (wall time for this case: {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
