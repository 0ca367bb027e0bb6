"""GPU figures over a level's window from DCGM samples, and the sentences the verdict takes from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.analysis.gpu import evidence_for, gpu_evidence, gpu_metrics, plateau_level
from plateau_bench.records import SOURCE_GPU, TelemetrySample, samples_from_lines
from plateau_bench.result import GpuMetrics, LevelResult
from plateau_bench.telemetry.dcgm import node_raw, parse_dcgm
from plateau_bench.units import NS

from support.builders import level_result

DATA = Path(__file__).resolve().parents[1] / "telemetry" / "data"   # the constructed DCGM pages
CONSTRAINTS = ["admission_cap", "kv_capacity", "compute", "prefill", "load_generator", "not_saturated",
               "errors", "insufficient_data"]


def dcgm(t_s: float, node: int = 0, **raw: float) -> TelemetrySample:
    return TelemetrySample(t_ns=int(t_s * NS), engine="dcgm", source="dcgm", raw={"node": float(node), **raw})


def page_samples(*names: str, t_s: float = 0.0) -> list[TelemetrySample]:
    """One sample per node of the golden pages, numbered in order, as the poller makes them."""
    nodes = [n for name in names for n in parse_dcgm((DATA / name).read_text()).nodes]
    return [dcgm(t_s, i, **node_raw(n)) for i, n in enumerate(nodes)]


# -- gpu_metrics ---------------------------------------------------------------------------------------

def test_time_weighted_mean_over_the_window() -> None:
    samples = [dcgm(0, gpu0_sm_active=0.2), dcgm(5, gpu0_sm_active=0.6)]
    assert gpu_metrics(samples, 0, 10 * NS).sm_active == pytest.approx(0.4)            # type: ignore[union-attr]
    assert gpu_metrics(samples, 5 * NS, 10 * NS).sm_active == pytest.approx(0.6)       # type: ignore[union-attr]
    # 3 s at 0.2, then 2 s at 0.6: the value in force at the window start counts from there
    assert gpu_metrics(samples, 2 * NS, 7 * NS).sm_active == pytest.approx(0.36)       # type: ignore[union-attr]
    m = gpu_metrics(samples, 2 * NS, 7 * NS)
    assert m is not None and m.samples == 1 and (m.gpus, m.nodes) == (1, 1)


def test_gpus_of_different_nodes_stay_apart_and_are_averaged() -> None:
    # gpu0 on both nodes: node 1's 1.0 must not interleave with node 0's series
    samples = [dcgm(0, 0, gpu0_sm_active=0.2), dcgm(0.5, 1, gpu0_sm_active=1.0),
               dcgm(1, 0, gpu0_sm_active=0.2), dcgm(1.5, 1, gpu0_sm_active=1.0)]
    m = gpu_metrics(samples, 0, 2 * NS)
    assert m is not None and (m.gpus, m.nodes) == (2, 2)
    assert m.sm_active == pytest.approx(0.6)
    assert (m.raw["sm_active_max"], m.raw["sm_active_min"]) == (1.0, 0.2)


def test_shares_units_and_sums() -> None:
    samples = [dcgm(0, gpu0_power_w=350, gpu0_power_limit_w=700, gpu0_util_pct=50, gpu0_fb_used_mib=60,
                    gpu0_fb_free_mib=20, gpu0_pcie_tx_bytes_per_s=1e8, gpu0_pcie_rx_bytes_per_s=2e8,
                    gpu1_power_w=100, gpu1_power_limit_w=400, gpu1_util_pct=100, gpu1_pcie_tx_bytes_per_s=1e8)]
    m = gpu_metrics(samples, 0, NS)
    assert m is not None
    assert m.power_w_mean == 225.0 and m.power_limit_w == 550.0
    assert m.power_share == pytest.approx((0.5 + 0.25) / 2)
    assert m.gpu_util == 0.75 and m.fb_used_share == 0.75
    assert m.pcie_bytes_per_s == 4e8 and m.nvlink_bytes_per_s is None
    assert m.sm_active is None and m.tensor_active is None


def test_golden_nodes_summarised() -> None:
    m = gpu_metrics(page_samples("dcgm_h100_node_a.prom", "dcgm_a100_node_b.prom"), 0, 10 * NS)
    assert m is not None and (m.gpus, m.nodes) == (6, 2)
    shares = [273.5 / 700, 268 / 700, 281.25 / 700, 270 / 700, 360 / 400, 372 / 400]
    assert m.power_share == pytest.approx(sum(shares) / 6, abs=1e-4)
    assert m.sm_active == pytest.approx((0.30 + 0.28 + 0.32 + 0.30 + 0.97 + 0.99) / 6, abs=1e-4)
    assert m.gpu_util == pytest.approx((62 + 60 + 64 + 62 + 100 + 100) / 600, abs=1e-4)
    assert m.fb_used_share == pytest.approx((4 * 71234 / 81559 + 2 * 78000 / 79920) / 6, abs=1e-4)
    assert m.pcie_bytes_per_s == 1.3e9 + 2e9 and m.nvlink_bytes_per_s == 3.2e10
    assert m.raw["sm_active_max"] == 0.99 and m.raw["power_share_max"] == 0.93
    assert m.raw["nvlink_bandwidth_total"] == 8012 + 8010 + 8020 + 7998


def test_saved_and_reloaded_samples_give_the_same_figures() -> None:
    samples = page_samples("dcgm_h100_node_a.prom", "dcgm_a100_node_b.prom")
    reloaded = samples_from_lines([s.to_line() for s in samples], source="dcgm")
    assert gpu_metrics(reloaded, 0, NS) == gpu_metrics(samples, 0, NS)


@pytest.mark.parametrize("samples", [
    [],
    [dcgm(0, node_gpus=1.0, node_power_w=10.0)],          # aggregates only, no per-GPU series
    [TelemetrySample(t_ns=0, engine="nvml", source=SOURCE_GPU, raw={"gpu_power_w": 300.0})],   # NVML totals only
])
def test_no_gpu_metrics_without_per_gpu_samples(samples: list[TelemetrySample]) -> None:
    assert gpu_metrics(samples, 0, 10 * NS) is None


def nvml(t_s: float, **raw: float) -> TelemetrySample:
    return TelemetrySample(t_ns=int(t_s * NS), engine="nvml", source=SOURCE_GPU, raw=raw)


def test_nvml_readings_stand_in_for_an_exporter() -> None:
    """This host's NVML samples carry DCGM's quantity names: power share, utilisation, memory and
    the clock against its maximum, without the profiling counters."""
    samples = [nvml(0, gpu0_power_w=262.0, gpu0_power_limit_w=700.0, gpu0_util_pct=84.0, gpu0_fb_used_mib=80_000.0,
                    gpu0_fb_free_mib=57_771.0, gpu0_sm_clock_mhz=1980.0, gpu0_sm_clock_max_mhz=1980.0,
                    gpu0_temp_c=52.0, gpu_power_w=262.0),
               nvml(1, gpu0_power_w=682.0, gpu0_power_limit_w=700.0, gpu0_util_pct=99.0, gpu0_fb_used_mib=80_000.0,
                    gpu0_fb_free_mib=57_771.0, gpu0_sm_clock_mhz=1671.0, gpu0_sm_clock_max_mhz=1980.0,
                    gpu0_temp_c=60.0, gpu_power_w=682.0)]
    m = gpu_metrics(samples, 1 * NS, 2 * NS)
    assert m is not None and m.source == "nvml" and (m.gpus, m.nodes) == (1, 1)
    assert m.power_share == pytest.approx(682 / 700, abs=1e-4) and m.gpu_util == 0.99
    assert m.fb_used_share == pytest.approx(80_000 / 137_771, abs=1e-4)
    assert m.sm_active is None and m.dram_active is None
    assert (m.sm_clock_mhz, m.sm_clock_max_mhz, m.raw["temp_c"]) == (1671.0, 1980.0, 60.0)
    assert m.sm_clock_share == pytest.approx(1671 / 1980, abs=1e-4)


def test_an_exporter_is_preferred_to_nvml() -> None:
    both = [nvml(0, gpu0_power_w=100.0, gpu0_power_limit_w=700.0), dcgm(0, gpu0_power_w=600.0,
                                                                         gpu0_power_limit_w=700.0)]
    m = gpu_metrics(both, 0, NS)
    assert m is not None and m.source == "dcgm" and m.power_w_mean == 600.0


def test_the_sentence_gives_the_clock_against_its_maximum() -> None:
    m = gpu_metrics([nvml(0, gpu0_power_w=682.0, gpu0_power_limit_w=700.0, gpu0_util_pct=99.0,
                          gpu0_sm_clock_mhz=1671.0, gpu0_sm_clock_max_mhz=1980.0)], 0, NS)
    assert m is not None
    assert evidence_for(m, "prefill") == [
        "GPUs at 97 % of their power limit and 99 % GPU utilisation and an SM clock of 1,671 of 1,980 MHz",
        "GPUs at 97 % of their power limit, SM clock at 84 % of its maximum: power-bound, the driver lowers "
        "clocks to stay under the limit (throttled)"]


def test_no_gpu_metrics_for_a_window_before_the_first_sample() -> None:
    assert gpu_metrics([dcgm(5, gpu0_sm_active=0.5)], 0, 4 * NS) is None


# -- gpu_evidence --------------------------------------------------------------------------------------

def level(m: GpuMetrics | None, *, concurrency: int = 64, throughput: float = 1000.0,
          failed: bool = False) -> LevelResult:
    return level_result(concurrency, throughput, label=f"c{concurrency}", gpu_metrics=m, level_failed=failed)


def gm(**fields: float) -> GpuMetrics:
    return GpuMetrics(gpus=8, nodes=1, samples=10, **fields)  # type: ignore[arg-type]


def evidence(constraint: str, **fields: float) -> list[str]:
    return gpu_evidence([level(gm(**fields))], constraint)


def test_cap_with_idle_gpus_is_safe_to_raise() -> None:
    assert evidence("admission_cap", power_share=0.39, sm_active=0.30) == [
        "GPUs at 39 % of their power limit and 30 % SM activity while the cap binds: raising the cap is safe"]


@pytest.mark.parametrize(("fields", "tail"), [
    ({"power_share": 0.7, "sm_active": 0.6}, "the GPUs have some headroom, so a higher cap gains less than in "
                                             "proportion"),
    ({"power_share": 0.7, "sm_active": 0.85}, "the GPUs are close to saturation, so raising the cap gains little"),
    ({"power_share": 0.95, "sm_active": 0.4}, "the GPUs are close to saturation, so raising the cap gains little"),
    ({"power_share": 0.3, "sm_active": 0.4, "dram_active": 0.7}, "the GPUs are close to saturation, so raising "
                                                                "the cap gains little"),
])
def test_cap_with_busier_gpus(fields: dict[str, float], tail: str) -> None:
    (sentence,) = evidence("admission_cap", **fields)
    assert sentence.endswith(f"while the cap binds: {tail}")


def test_compute_bound() -> None:
    assert evidence("compute", power_share=0.8, sm_active=0.98, tensor_active=0.85) == [
        "SM activity ~100 % (tensor pipes 85 %): compute-bound"]
    assert evidence("compute", sm_active=0.88) == ["SM activity 88 %: compute-bound"]


def test_bandwidth_bound_decode() -> None:
    assert evidence("compute", sm_active=0.9, tensor_active=0.2, dram_active=0.72) == [
        "DRAM active 72 %, SM activity 90 % (tensor pipes 20 %): memory-bandwidth-bound (decode streams the "
        "weights and KV cache)"]


def test_compute_verdict_contradicted_by_idle_gpus() -> None:
    assert evidence("compute", power_share=0.4, sm_active=0.3) == [
        "SM activity only 30 %: the GPUs are not saturated, so the limit is elsewhere (scheduling, host "
        "overhead, batch size)"]


def test_compute_without_sm_activity_is_not_confirmed() -> None:
    assert evidence("compute", power_share=0.7, gpu_util=0.99) == [
        "GPUs at 70 % of their power limit and 99 % GPU utilisation; SM activity is not exported "
        "(DCGM_FI_PROF_SM_ACTIVE), so compute saturation is not confirmed"]


def test_power_capped_compute() -> None:
    assert evidence("compute", power_share=0.97, sm_active=0.9) == [
        "SM activity 90 %: compute-bound",
        "GPUs at 97 % of their power limit: power-capped, clocks drop before the compute runs out"]


@pytest.mark.parametrize(("fields", "sentence"), [
    ({"power_share": 0.39, "sm_clock_share": 1.0},
     "GPUs at 39 % of their power limit, SM clock at maximum: not power- or thermal-bound"),
    ({"power_share": 0.98, "sm_clock_share": 0.8},
     "GPUs at 98 % of their power limit, SM clock at 80 % of its maximum: power-bound, the driver lowers clocks "
     "to stay under the limit (throttled)"),
    ({"power_share": 0.93, "sm_clock_share": 0.97},
     "GPUs at 93 % of their power limit, SM clock at maximum: at the edge of the power limit, not yet throttled"),
    ({"power_share": 0.5, "sm_clock_share": 0.7},
     "GPUs at 50 % of their power limit, SM clock at 70 % of its maximum: clocks held down by something other "
     "than power (temperature, a clock cap such as nvidia-smi -lgc, or the GPUs idling between steps)"),
    ({"sm_clock_share": 0.7},
     "SM clock at 70 % of its maximum: throttled (the power limit is not known, so power and heat cannot be "
     "told apart)"),
])
def test_compute_verdict_reads_power_and_clock_headroom(fields: dict[str, float], sentence: str) -> None:
    assert evidence("compute", sm_active=0.9, **fields) == ["SM activity 90 %: compute-bound", sentence]


def test_clocks_saved_in_raw_by_older_results_still_read() -> None:
    older = GpuMetrics(gpus=1, samples=3, power_share=0.39, sm_active=0.9,
                       raw={"sm_clock_mhz": 1980.0, "sm_clock_max_mhz": 1980.0})
    assert evidence_for(older, "compute")[1] == ("GPUs at 39 % of their power limit, SM clock at maximum: not "
                                                 "power- or thermal-bound")


def test_energy_per_token_joins_any_verdict() -> None:
    m = gm(power_share=0.39, sm_active=0.3, energy_j=12_600.0, energy_source="power",
           joules_per_output_token=0.42, output_tokens_per_joule=2.381)
    assert gpu_evidence([level(m)], "admission_cap")[-1] == (
        "0.42 J per output token (2.38 output tokens per joule; 12,600 J over the window, from power readings "
        "integrated over time)")


def test_prefill() -> None:
    assert evidence("prefill", sm_active=0.92, tensor_active=0.6) == [
        "SM activity 92 % (tensor pipes 60 %) while prompts dominate: prefill is compute-bound"]
    assert evidence("prefill", power_share=0.3, sm_active=0.35) == [
        "GPUs at 30 % of their power limit and 35 % SM activity: prefill does not saturate the GPUs; how "
        "prefill chunks are scheduled sets the pace"]


def test_kv_capacity() -> None:
    assert evidence("kv_capacity", power_share=0.45, sm_active=0.4) == [
        "GPUs at 45 % of their power limit and 40 % SM activity while the KV cache is full: the GPUs have "
        "headroom, so more KV cache memory would raise throughput"]
    assert evidence("kv_capacity", sm_active=0.9)[0].endswith("so more KV cache alone gains little")


def test_load_generator_and_not_saturated() -> None:
    assert evidence("load_generator", sm_active=0.2) == [
        "GPUs at 20 % SM activity: the GPUs had headroom, consistent with a limit in the client"]
    assert evidence("load_generator", sm_active=0.9) == [
        "GPUs at 90 % SM activity: the GPUs were busy, which does not fit a limit in the client"]
    assert evidence("not_saturated", power_share=0.2) == ["GPUs at 20 % of their power limit: the GPUs had headroom"]


def test_other_constraints_get_the_description() -> None:
    assert evidence("errors", power_share=0.5, sm_active=0.5) == [
        "GPUs at 50 % of their power limit and 50 % SM activity"]
    assert evidence("errors", power_w_mean=235.0) == []      # no share, no activity: nothing to weigh
    assert evidence("errors") == []


def test_engine_activity_stands_in_for_headroom() -> None:
    m = GpuMetrics(gpus=1, nodes=1, power_share=0.3, raw={"gr_engine_active": 0.25})
    assert gpu_evidence([level(m)], "admission_cap") == [
        "GPUs at 30 % of their power limit and 25 % graphics-engine activity while the cap binds: raising the "
        "cap is safe"]


def test_uneven_gpus_are_named() -> None:
    m = GpuMetrics(gpus=8, nodes=1, sm_active=0.5, raw={"sm_active_max": 0.95})
    assert gpu_evidence([level(m)], "not_saturated")[-1] == (
        "GPU load is uneven: the busiest GPU at 95 % SM activity against a mean of 50 % (check the tensor- or "
        "expert-parallel balance)")


@pytest.mark.parametrize("constraint", CONSTRAINTS)
def test_nothing_without_gpu_metrics(constraint: str) -> None:
    assert gpu_evidence([], constraint) == []
    assert gpu_evidence([level(None), level(None, concurrency=128)], constraint) == []


def test_the_plateau_level_speaks() -> None:
    low = level(gm(sm_active=0.1), concurrency=8, throughput=400)
    plateau = level(gm(sm_active=0.3), concurrency=64, throughput=1000)
    top = level(gm(sm_active=0.35), concurrency=128, throughput=990)     # within 5 %: the most load
    broken = level(gm(sm_active=0.99), concurrency=256, throughput=1100, failed=True)
    assert plateau_level([low, plateau, top, broken]) is top
    assert plateau_level([low, plateau]) is plateau
    assert plateau_level([broken]) is broken        # failed levels only when nothing else has figures
    assert gpu_evidence([low, plateau, top, broken], "admission_cap")[0].startswith("GPUs at 35 % SM activity")


@pytest.mark.parametrize(("gpus_serve", "read"), [(True, True), (False, False)])
def test_a_level_reads_nvml_only_when_its_server_runs_on_this_host(gpus_serve: bool, read: bool) -> None:
    """NVML reads this host's GPUs: the server's when it runs here, someone else's otherwise."""
    from plateau_bench.analysis.level import build_level
    from plateau_bench.level_run import LevelRun
    from plateau_bench.records import RequestRecord
    from plateau_bench.spec import LevelSpec

    ms = NS // 1000
    records = [RequestRecord(index=i, worker=i, scheduled_ns=0, sent_ns=0, first_token_ns=100 * ms,
                             end_ns=300 * ms, chunk_ns=[100 * ms, 200 * ms, 300 * ms], chunk_tokens=[1, 1, 1],
                             prompt_tokens=10, output_tokens=3) for i in range(4)]
    samples = [nvml(t, gpu0_power_w=300.0, gpu0_power_limit_w=700.0, gpu0_util_pct=40.0, gpu_power_w=300.0)
               for t in (0.0, 0.2)]
    level = build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=4), label="C=4", records=records,
                                 gpu_samples=samples, gpus_serve=gpus_serve))
    assert (level.gpu_metrics is not None) is read
    assert level.telemetry.gpu_power_w_mean == pytest.approx(300.0)   # recorded either way
    if read:
        assert level.gpu_metrics is not None and level.gpu_metrics.source == "nvml"
        assert level.gpu_metrics.power_share == pytest.approx(300 / 700, abs=1e-4)
