"""The reference runs (reference/seed-runs.md) as data, which figures the presets were fitted to, the
bands the fidelity tests hold the twin to, and the twin's figures for each reference row.

tests/sim/test_fidelity.py asserts against these; scripts/readme_figures.py prints them into the
README, so the figures the README states and the bands it names are the ones the tests check.

Fitted or not (sim/presets.py says where each coefficient comes from):

* ``seed-a-tp8ep``: t0 and a fitted to 71 tok/s at C=1 and 3,962.8 tok/s / 33.1 s at C=256. The
  C=512, 768 and 1,024 rows (waves of the cap, latency percentiles) were not used: hold-out.
* ``seed-a-tp4``: fitted to 84 tok/s at C=1 and 2,586 tok/s at C=256; the crossover with tp8ep at
  C=12-16 was not fitted (two coefficients, two points): hold-out.
* ``seed-b-fp4``: t0 from 10.22 tok/s at C=1, a and b from the output throughput of the 1,024 and
  2,048 rows. Not fitted: the 2,048 row's other columns (peak and total throughput, achieved
  concurrency, mean TPOT), the ~300 ms mean TPOT at 1,024, and the 256 / 512 rows (loose references:
  the reference says they may have shared the server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from plateau_bench.analysis.metrics import compute_level
from plateau_bench.records import RequestRecord
from plateau_bench.sim.engine import StepRecord
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, WorkloadSpec

if TYPE_CHECKING:
    from plateau_bench.result import LevelResult


class RunARow(NamedTuple):
    wall_s: float
    tok_s: float
    lat_avg_s: float
    lat_p50_s: float | None  # nearest-rank median (the 257th of 512 latencies at C=512); cut at 1,024
    lat_p99_s: float | None


RUN_A = {
    256: RunARow(33.1, 3962.8, 32.88, 32.88, 32.97),
    512: RunARow(65.7, 3988.1, 49.13, 65.23, 65.48),
    768: RunARow(98.5, 3991.2, 65.47, 65.50, 98.09),
    1024: RunARow(131.2, 3997.0, 81.66, None, None),
}
RUN_A_CAP = 256
RUN_A_FITTED_C = (1, 256)
RUN_A_HOLDOUT_C = (512, 768, 1024)
RUN_A_WORKLOAD = WorkloadSpec(input_len=128, output_len=512)  # input length not given: 128 assumed
RUN_A_C1 = {"seed-a-tp8ep": 71.0, "seed-a-tp4": 84.0}  # tok/s at C=1 (fitted)
RUN_A_C256 = {"seed-a-tp8ep": 3982.0, "seed-a-tp4": 2586.0}  # "earlier points", tok/s at C=256 (fitted)
RUN_A_CROSSOVER = (12, 16)  # tp4 better at 12, tp8ep at 16 (not fitted)

RUN_B_CAP = 1024
RUN_B_C1 = 10.22
RUN_B = {  # output tok/s per num_prompts
    256: 704.64, 512: 1105.82, 1024: 1601.28, 2048: 1639.69,
}
RUN_B_2048 = {"peak_output_throughput": 3593.00, "total_throughput": 3249.48,
              "achieved_concurrency": 1254.38, "mean_tpot_ms": 527.24}
RUN_B_1024_MEAN_TPOT_MS = 300.0  # "~300" in the reference

# Bands, relative. Pins hold the fitted figures where the fit put them (a regression check of the
# presets, not evidence of fidelity); hold-out bands are the fidelity the README claims.
PIN = 0.03
PIN_RUN_B = 0.15  # two coefficients fitted to two rows with random lengths: the fit leaves +11 % at 1,024
HOLDOUT_RUN_A = 0.02  # wall, throughput, mean / p50 / p99 latency at C=512-1,024
HOLDOUT_RUN_B = {"total_throughput": 0.05, "mean_tpot_ms": 0.10, "peak_output_throughput": 0.15,
                 "achieved_concurrency": 0.15}
RUN_B_LOOSE_MAX_FASTER = 0.55  # the reference: a single-level model runs 256 / 512 25-55 % faster
BOTH_SIDES = 0.01  # client-side Little's-law figures against the engine's own step trace


def rel(value: float, reference: float) -> float:
    """Signed relative difference, value / reference - 1."""
    return value / reference - 1.0


@dataclass(frozen=True)
class EngineSide:
    """Time averages over the engine's own step trace (what its running / waiting gauges show)."""

    running_avg: float     # requests admitted (prefilling or decoding)
    in_system_avg: float   # running + waiting: what the client has in flight, with no network between
    decoding_avg: float    # sequences in the decode batch
    running_max: int
    waiting_max: int


@dataclass(frozen=True)
class Twin:
    """One reference level run through the twin: the client's metrics and the engine's own view."""

    level: LevelResult
    records: list[RequestRecord]
    engine: EngineSide

    @property
    def nearest_rank_median_s(self) -> float:
        e2e = sorted(r.end_ns - r.sent_ns for r in self.records)
        return e2e[len(e2e) // 2] / 1e9

    @property
    def nearest_rank_p99_s(self) -> float:
        e2e = sorted(r.end_ns - r.sent_ns for r in self.records)
        return e2e[min(len(e2e) - 1, int(np.ceil(0.99 * len(e2e))) - 1)] / 1e9


def _engine_side(trace: list[StepRecord]) -> EngineSide:
    span = trace[-1].t_start + trace[-1].duration - trace[0].t_start
    return EngineSide(
        running_avg=sum(s.running * s.duration for s in trace) / span,
        in_system_avg=sum((s.running + s.waiting) * s.duration for s in trace) / span,
        decoding_avg=sum(s.decode_seqs * s.duration for s in trace) / span,
        running_max=max(s.running for s in trace),
        waiting_max=max(s.waiting for s in trace),
    )


def burst(preset: str, c: int, workload: WorkloadSpec = RUN_A_WORKLOAD,
          lengths: list[tuple[int, int]] | None = None) -> Twin:
    """The reference benchmark's shape: a burst of C requests at t=0, metrics as for real runs."""
    result = simulate_level(get_preset(preset), LevelSpec(mode="burst", concurrency=c), workload,
                            lengths=lengths, trace=True)
    assert result.trace is not None
    level = compute_level(result.records, label=f"C={c}", mode="burst", concurrency=c)
    return Twin(level, result.records, _engine_side(result.trace))


def sglang_random_lengths(n: int, seed: int = 1) -> list[tuple[int, int]]:
    """``bench_serving``'s random dataset with ``--random-range-ratio 0``: inputs uniform in [1, 128],
    outputs in [0, 128] (numpy's legacy randint); an output of 0 becomes 1 (the twin refuses 0)."""
    rng = np.random.RandomState(seed)
    inputs = rng.randint(1, 129, size=n)
    outputs = rng.randint(0, 129, size=n)
    return [(int(i), max(1, int(o))) for i, o in zip(inputs, outputs, strict=True)]


def run_b(c: int) -> Twin:
    return burst("seed-b-fp4", c, WorkloadSpec(), lengths=sglang_random_lengths(c))
