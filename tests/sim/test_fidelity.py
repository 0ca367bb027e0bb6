"""The twin against the reference runs (reference/seed-runs.md), through the tool's own metrics.

Each level is the reference benchmark: a burst of ``num_requests = C`` requests at t=0, metrics
from ``analysis.metrics.compute_level(mode="burst")`` (see tests/support/seed_runs.py, which also
says which figures the presets were fitted to).

Three kinds of test, named so:

* ``test_pin_*``: the rows the presets were fitted to. They hold the fit where it was put (a
  regression check of the presets); passing them says nothing about fidelity.
* ``test_holdout_*``: figures no coefficient was fitted to (other concurrencies of the same run, the
  crossover, unfitted columns). These are the fidelity the README states, with the same bands.
* ``test_both_sides_*``: achieved concurrency from the client (Little's law over request records)
  against the engine's own running / waiting counts over its step trace, and against the reference's
  own Little's-law figure.

Run A: 512 output tokens per request; the input length is not given, 128 tokens is assumed.
The reference's p50 is a nearest-rank median (the 257th of 512 latencies, the first of the second
wave); ``compute_level`` interpolates, which puts the C=512 median between the two waves, so the
hold-out compares the nearest-rank median.

Run B: SGLang's ``bench_serving`` random lengths (``seed_runs.sglang_random_lengths``).
"""

from __future__ import annotations

import pytest

from support.seed_runs import (
    BOTH_SIDES,
    HOLDOUT_RUN_A,
    HOLDOUT_RUN_B,
    PIN,
    PIN_RUN_B,
    RUN_A,
    RUN_A_C1,
    RUN_A_C256,
    RUN_A_CAP,
    RUN_A_CROSSOVER,
    RUN_A_HOLDOUT_C,
    RUN_B,
    RUN_B_1024_MEAN_TPOT_MS,
    RUN_B_2048,
    RUN_B_C1,
    RUN_B_CAP,
    RUN_B_LOOSE_MAX_FASTER,
    burst,
    rel,
    run_b,
)

# --- pins: the fitted rows -------------------------------------------------------------------------


@pytest.mark.parametrize(("preset", "c", "reference"), [
    ("seed-a-tp8ep", 1, RUN_A_C1["seed-a-tp8ep"]), ("seed-a-tp8ep", 256, RUN_A_C256["seed-a-tp8ep"]),
    ("seed-a-tp8ep", 256, RUN_A[256].tok_s),
    ("seed-a-tp4", 1, RUN_A_C1["seed-a-tp4"]), ("seed-a-tp4", 256, RUN_A_C256["seed-a-tp4"]),
])
def test_pin_run_a_throughput(preset: str, c: int, reference: float) -> None:
    assert abs(rel(burst(preset, c).level.output_throughput, reference)) <= PIN


def test_pin_run_a_c256_row() -> None:
    ref, twin = RUN_A[256], burst("seed-a-tp8ep", 256)
    level = twin.level
    assert abs(rel(level.wall_s, ref.wall_s)) <= PIN
    assert level.e2e_ms.mean is not None and abs(rel(level.e2e_ms.mean / 1000, ref.lat_avg_s)) <= PIN
    assert ref.lat_p50_s is not None and abs(rel(twin.nearest_rank_median_s, ref.lat_p50_s)) <= PIN
    assert ref.lat_p99_s is not None and level.e2e_ms.p99 is not None
    assert abs(rel(level.e2e_ms.p99 / 1000, ref.lat_p99_s)) <= PIN


@pytest.mark.parametrize(("c", "reference", "band"), [
    (1, RUN_B_C1, PIN), (1024, RUN_B[1024], PIN_RUN_B), (2048, RUN_B[2048], PIN_RUN_B),
])
def test_pin_run_b_throughput(c: int, reference: float, band: float) -> None:
    assert abs(rel(run_b(c).level.output_throughput, reference)) <= band


# --- hold-out: figures no coefficient was fitted to -------------------------------------------------


@pytest.mark.parametrize("c", RUN_A_HOLDOUT_C)
def test_holdout_run_a_rows(c: int) -> None:
    ref, twin = RUN_A[c], burst("seed-a-tp8ep", c)
    level = twin.level
    assert abs(rel(level.wall_s, ref.wall_s)) <= HOLDOUT_RUN_A
    assert abs(rel(level.output_throughput, ref.tok_s)) <= HOLDOUT_RUN_A
    assert level.e2e_ms.mean is not None and abs(rel(level.e2e_ms.mean / 1000, ref.lat_avg_s)) <= HOLDOUT_RUN_A
    if ref.lat_p50_s is not None:
        assert abs(rel(twin.nearest_rank_median_s, ref.lat_p50_s)) <= HOLDOUT_RUN_A
    if ref.lat_p99_s is not None:
        assert level.e2e_ms.p99 is not None and abs(rel(level.e2e_ms.p99 / 1000, ref.lat_p99_s)) <= HOLDOUT_RUN_A


@pytest.mark.parametrize("c", RUN_A_HOLDOUT_C)
def test_holdout_run_a_waves_of_the_cap(c: int) -> None:
    # Wall time in whole waves of the C=256 burst, and at C=512 the nearest-rank median is the first
    # latency of the second wave (the reference's reading of its own table).
    waves = c // RUN_A_CAP
    one_wave = burst("seed-a-tp8ep", RUN_A_CAP).level.wall_s
    twin = burst("seed-a-tp8ep", c)
    assert abs(rel(twin.level.wall_s, waves * one_wave)) <= HOLDOUT_RUN_A
    if c == 512:
        assert abs(rel(twin.nearest_rank_median_s, 2 * one_wave)) <= HOLDOUT_RUN_A


def test_holdout_run_a_crossover() -> None:
    low, high = RUN_A_CROSSOVER
    assert burst("seed-a-tp4", low).level.output_throughput > burst("seed-a-tp8ep", low).level.output_throughput
    assert burst("seed-a-tp4", high).level.output_throughput < burst("seed-a-tp8ep", high).level.output_throughput


def test_holdout_run_b_2048_unfitted_columns() -> None:
    level = run_b(2048).level
    figures = {
        "peak_output_throughput": level.peak_output_throughput,
        "total_throughput": level.total_throughput,
        "achieved_concurrency": level.achieved_concurrency,
        "mean_tpot_ms": level.tpot_ms.mean or 0.0,
    }
    off = {name: rel(figures[name], RUN_B_2048[name]) for name in figures}
    assert all(abs(off[name]) <= HOLDOUT_RUN_B[name] for name in off), off


@pytest.mark.parametrize("c", [256, 512])
def test_holdout_run_b_loose_rows(c: int) -> None:
    # The reference's caveat: these levels may have shared the server; a single-level model runs them
    # 25-55 % faster than reported. The twin alone must be faster, by no more than that.
    assert 0.0 < rel(run_b(c).level.output_throughput, RUN_B[c]) <= RUN_B_LOOSE_MAX_FASTER


@pytest.mark.xfail(strict=True, reason="known miss: the twin's mean TPOT at 1,024 is 481 ms against the "
                   "reference's ~300 ms (+60 %); a and b fitted to throughput do not reproduce it")
def test_holdout_run_b_mean_tpot_at_1024() -> None:
    tpot = run_b(1024).level.tpot_ms.mean
    assert tpot is not None and abs(rel(tpot, RUN_B_1024_MEAN_TPOT_MS)) <= HOLDOUT_RUN_B["mean_tpot_ms"]


# --- achieved concurrency from both sides --------------------------------------------------------


@pytest.mark.parametrize("c", sorted(RUN_A))
def test_both_sides_run_a(c: int) -> None:
    ref, twin = RUN_A[c], burst("seed-a-tp8ep", c)
    level, engine = twin.level, twin.engine
    # Client (Little's law over the records) and engine (running + waiting over its trace) agree:
    # nothing stands between them in the twin.
    assert abs(rel(level.achieved_concurrency, engine.in_system_avg)) <= BOTH_SIDES
    # Decode-first scheduling: every running sequence past its prefill is in the decode batch.
    assert abs(rel(level.decoding_concurrency, engine.decoding_avg)) <= BOTH_SIDES
    assert level.decoding_concurrency <= engine.running_avg
    # The cap, from both sides: the most requests decoding at once is the engine's most running.
    assert level.peak_decoding == engine.running_max == RUN_A_CAP
    # Beyond the cap the rest queue in the engine (at 256 only behind the prefill token budget, briefly).
    assert engine.waiting_max >= c - RUN_A_CAP
    # Against the reference's own Little's-law figure: sum of latencies / wall = lat avg * C / wall.
    assert abs(rel(level.achieved_concurrency, ref.lat_avg_s * c / ref.wall_s)) <= HOLDOUT_RUN_A


@pytest.mark.parametrize("c", [1024, 2048])
def test_both_sides_run_b(c: int) -> None:
    twin = run_b(c)
    level, engine = twin.level, twin.engine
    assert abs(rel(level.achieved_concurrency, engine.in_system_avg)) <= BOTH_SIDES
    # Prefill-first scheduling: requests past their first token sit out prefill steps, so the engine's
    # decode batch averages below the client's decoding concurrency; both stay below what is running.
    assert engine.decoding_avg <= level.decoding_concurrency <= engine.running_avg
    assert level.peak_decoding <= engine.running_max <= RUN_B_CAP
    if c > RUN_B_CAP:
        # The cap binds: the engine runs exactly its cap and queues the rest; the client's achieved
        # concurrency sits far below the 2,048 sent, near the reference's 1,254.
        assert engine.running_max == RUN_B_CAP and engine.waiting_max > 0
        assert abs(rel(level.achieved_concurrency, RUN_B_2048["achieved_concurrency"])) <= (
            HOLDOUT_RUN_B["achieved_concurrency"])
