"""A prediction's levels are the desynchronised steady state a warm sweep measures, grids included."""

from __future__ import annotations

import asyncio

import pytest

from plateau_bench.answers import CalibratedModel, EngineModel, PredictedLevel
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.predict import lead_in, predict

# A step where a prompt costs several decode steps (llama.cpp's shape on a CPU): requests that start
# together prefill together, and every one of them waits out the others' prompts before decoding.
ENGINE = EngineModel(t0=3e-3, a=1.2e-3, b=0.8e-3, c=0.0, max_num_seqs=8, max_num_batched_tokens=8192,
                     kv_tokens=100_000)
WORKLOAD = WorkloadSpec(input_len=35, output_len=64)


def model() -> CalibratedModel:
    return CalibratedModel(engine=ENGINE, parameters=[], levels=[], sources=["r"], cap_source="diagnosis",
                           kv_source="server", policy_source="", input_len=35.0, output_len=64.0)


def at(levels: list[PredictedLevel], concurrency: int) -> PredictedLevel:
    return next(lv for lv in levels if lv.concurrency == concurrency)


def test_a_grid_is_led_in_by_the_doublings_below_its_first_level() -> None:
    assert lead_in((8, 16)) == (1, 2, 4)
    assert lead_in((6,)) == (1, 2, 4)
    assert lead_in((1, 4)) == ()


def test_a_grid_level_reads_as_the_adaptive_sweeps_with_its_requests_spread() -> None:
    adaptive = asyncio.run(predict(model(), WORKLOAD, band=False))
    grid = asyncio.run(predict(model(), WORKLOAD, concurrencies=[8], band=False))
    assert [lv.concurrency for lv in grid.levels] == [8]     # the lead-in levels are not reported
    alone, swept = grid.levels[0], at(adaptive.levels, 8)
    assert alone.output_throughput == pytest.approx(swept.output_throughput, rel=0.02)
    # In lock step, eight prompts of 28 ms each share one step: ~6.7 of 8 decode on average and the first
    # token waits ~200 ms; spread, a prompt joins seven decoding sequences.
    assert alone.decoding >= 7.2 and swept.decoding >= 7.2
    assert alone.ttft_p50_ms is not None and alone.ttft_p50_ms < 80
