"""GPU energy over a level's window: energy counters against power readings integrated, window edges
between samples, per output token, and unknown figures that stay unknown."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.energy import (
    counter_power_w,
    energy_sentence,
    gpu_energy,
    per_output_token,
    total_energy,
    trapezoid_power_w,
)
from plateau_bench.analysis.gpu import gpu_metrics
from plateau_bench.records import SOURCE_GPU, TelemetrySample
from plateau_bench.result import GpuMetrics
from plateau_bench.units import NS


def s(t: float) -> int:
    return int(t * NS)


def test_trapezoid_interpolates_a_window_edge_between_samples() -> None:
    """Power rises linearly 100 -> 200 W over 10 s; the window [5 s, 10 s] opens between the samples at
    150 W, so its mean is 175 W (a step function would say 100 W for all of it)."""
    points = [(s(0), 100.0), (s(10), 200.0)]
    assert trapezoid_power_w(points, s(5), s(10)) == pytest.approx(175.0)
    assert trapezoid_power_w(points, s(2), s(4)) == pytest.approx(130.0)   # both edges between the samples
    assert gpu_energy({"power_w": points}, s(5), s(10)).joules == pytest.approx(875.0)  # type: ignore[union-attr]


def test_trapezoid_sums_the_segments_inside_the_window() -> None:
    points = [(s(0), 100.0), (s(1), 300.0), (s(2), 300.0), (s(3), 100.0)]
    # [0.5, 2.5]: 200..300 (0.5 s, 125 J), 300..300 (1 s, 300 J), 300..200 (0.5 s, 125 J) = 550 J over 2 s
    assert trapezoid_power_w(points, s(0.5), s(2.5)) == pytest.approx(275.0)


def test_counter_delta_splits_the_energy_at_the_edges() -> None:
    """A counter in joules, 1,000 J between samples 10 s apart: the window [2 s, 7 s] gets half."""
    counter = [(s(0), 50_000.0), (s(10), 51_000.0)]
    assert counter_power_w(counter, s(2), s(7)) == pytest.approx(100.0)
    assert gpu_energy({"energy_j": counter}, s(2), s(7)).joules == pytest.approx(500.0)  # type: ignore[union-attr]


def test_the_counter_wins_over_power_readings() -> None:
    """Power read once a second misses the spikes between readings; the board's counter does not."""
    gpu = {"energy_j": [(s(0), 0.0), (s(10), 4_000.0)], "power_w": [(s(0), 300.0), (s(10), 300.0)]}
    energy = gpu_energy(gpu, s(0), s(10))
    assert energy is not None and energy.source == "counter" and energy.joules == pytest.approx(4_000.0)


def test_a_counter_that_did_not_move_is_not_zero_watts() -> None:
    """An exporter serving one cached value all window: the power readings stand in; without them, unknown."""
    stale = [(s(0), 9_000.0), (s(5), 9_000.0), (s(10), 9_000.0)]
    energy = gpu_energy({"energy_j": stale, "power_w": [(s(0), 200.0), (s(10), 200.0)]}, s(0), s(10))
    assert energy is not None and energy.source == "power" and energy.joules == pytest.approx(2_000.0)
    assert gpu_energy({"energy_j": stale}, s(0), s(10)) is None


def test_a_counter_reset_counts_from_zero() -> None:
    """The driver reloaded mid-window: the counter restarts; the energy after the restart still counts."""
    counter = [(s(0), 10_000.0), (s(5), 11_000.0), (s(10), 500.0)]
    assert gpu_energy({"energy_j": counter}, s(0), s(10)).joules == pytest.approx(1_500.0)  # type: ignore[union-attr]


@pytest.mark.parametrize("gpu", [
    {},                                              # nothing read
    {"power_w": [(s(0), 300.0)]},                    # one reading: nothing to integrate
    {"power_w": [(s(0), 300.0), (s(1), 300.0)]},     # readings all before the window
])
def test_unknown_energy_is_none(gpu: dict[str, list[tuple[int, float]]]) -> None:
    assert gpu_energy(gpu, s(2), s(4)) is None


def test_the_total_is_known_only_when_every_gpu_has_it() -> None:
    counter = {"energy_j": [(s(0), 0.0), (s(10), 3_000.0)]}
    power = {"power_w": [(s(0), 100.0), (s(10), 100.0)]}
    both = total_energy([counter, power], s(0), s(10))
    assert both is not None and both.source == "mixed" and both.joules == pytest.approx(4_000.0)
    assert total_energy([counter, counter], s(0), s(10)).source == "counter"  # type: ignore[union-attr]
    assert total_energy([counter, {"power_w": [(s(0), 100.0)]}], s(0), s(10)) is None   # a partial sum understates
    assert total_energy([], s(0), s(10)) is None


def test_per_output_token() -> None:
    m = per_output_token(GpuMetrics(gpus=1, energy_j=1_000.0, energy_source="counter"), 2_500)
    assert (m.joules_per_output_token, m.output_tokens_per_joule) == (0.4, 2.5)
    assert energy_sentence(m) == ("0.4 J per output token (2.5 output tokens per joule; 1,000 J over the window, "
                                  "from the boards' energy counters)")
    none = per_output_token(GpuMetrics(gpus=1, energy_j=1_000.0), 0)
    assert none.joules_per_output_token is None and none.output_tokens_per_joule is None
    unknown = per_output_token(GpuMetrics(gpus=1, power_w_mean=300.0), 2_500)
    assert unknown.output_tokens_per_joule is None and energy_sentence(unknown) is None


def nvml(t_s: float, **raw: float) -> TelemetrySample:
    return TelemetrySample(t_ns=s(t_s), engine="nvml", source=SOURCE_GPU, raw=raw)


def test_gpu_metrics_sum_the_gpus_energy() -> None:
    """GPU 0 has the counter (350 W), GPU 1 only power readings (100 -> 300 W): 3.5 kJ + 2 kJ over 10 s."""
    samples = [nvml(0, gpu0_energy_j=1_000.0, gpu1_power_w=100.0), nvml(10, gpu0_energy_j=4_500.0, gpu1_power_w=300.0)]
    m = gpu_metrics(samples, 0, s(10))
    assert m is not None and m.energy_source == "mixed" and m.energy_j == pytest.approx(5_500.0)
    assert m.joules_per_output_token is None     # the tokens come with the level (analysis.level)


def test_a_level_has_its_joules_per_output_token() -> None:
    """Four requests of 3 tokens in a 0.3 s window while the GPU's counter grew 300 W x 0.3 s = 90 J."""
    from plateau_bench.analysis.level import build_level
    from plateau_bench.level_run import LevelRun
    from plateau_bench.records import RequestRecord
    from plateau_bench.spec import LevelSpec

    ms = NS // 1000
    records = [RequestRecord(index=i, worker=i, scheduled_ns=0, sent_ns=0, first_token_ns=100 * ms,
                             end_ns=300 * ms, chunk_ns=[100 * ms, 200 * ms, 300 * ms], chunk_tokens=[1, 1, 1],
                             prompt_tokens=10, output_tokens=3) for i in range(4)]
    samples = [nvml(t, gpu0_energy_j=500.0 + 300.0 * t, gpu0_power_w=300.0) for t in (0.0, 0.2, 0.4)]
    level = build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=4), label="C=4", records=records,
                                 gpu_samples=samples, gpus_serve=True))
    m = level.gpu_metrics
    assert m is not None and level.output_tokens == 12
    assert m.energy_source == "counter" and m.energy_j == pytest.approx(90.0)
    assert m.joules_per_output_token == pytest.approx(7.5) and m.output_tokens_per_joule == pytest.approx(0.1333)
