"""The engine's ground truth (sim.probe): what kept waiting requests out, step by step, and its /metrics form."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.analysis.level import build_level
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.probe import REASONS, Probe, server_samples, window
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import LevelSpec, WorkloadSpec

TINY = get_preset("tiny")


@st.composite
def engines(draw: st.DrawFn) -> tuple[EngineConfig, LevelSpec, WorkloadSpec]:
    cap = draw(st.integers(1, 24))
    config = EngineConfig(
        name="prop", step=StepModel(t0=draw(st.floats(1e-4, 1e-2)), a=draw(st.floats(0, 1e-3)),
                                    b=draw(st.floats(0, 1e-4)), c=draw(st.floats(0, 1e-6))),
        max_num_seqs=cap, max_num_batched_tokens=draw(st.integers(cap, cap + 200)),
        kv_tokens=draw(st.integers(200, 4000)), block_size=draw(st.sampled_from([1, 4, 16])),
        policy=draw(st.sampled_from(["mixed", "prefill_first"])))
    mode = draw(st.sampled_from(["burst", "steady"]))
    level = LevelSpec(mode=mode, concurrency=draw(st.integers(1, 48)),
                      num_requests=draw(st.integers(1, 60)) if mode == "burst" else None,
                      duration_s=1.0 if mode == "steady" else None)
    workload = WorkloadSpec(input_len=draw(st.integers(1, 100)), output_len=draw(st.integers(1, 80)),
                            range_ratio=draw(st.sampled_from([0.0, 0.5])), seed=draw(st.integers(0, 9)))
    return config, level, workload


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engines())
def test_a_probe_changes_no_record_and_agrees_with_the_step_trace(
        scenario: tuple[EngineConfig, LevelSpec, WorkloadSpec]) -> None:
    config, level, workload = scenario
    plain = simulate_level(config, level, workload, chunks=True)
    probe = Probe(0.05)
    probed = simulate_level(config, level, workload, chunks=True, trace=True, probe=probe)
    assert probed.records == plain.records
    assert probed.state == plain.state
    # Every step's time went to exactly one reason, and the trace says the same reason per step.
    assert probed.trace is not None
    by_reason = dict.fromkeys(REASONS, 0.0)
    for row in probed.trace:
        by_reason[row.blocked or "none"] += row.duration
    assert probe.blocked_s == pytest.approx([by_reason[r] for r in REASONS], rel=1e-6, abs=1e-9)
    assert sum(probe.blocked_s) == pytest.approx(probe.busy_s)
    assert 0.0 <= probe.prefill_s <= probe.busy_s * (1 + 1e-9)
    snaps = probe.snapshots
    assert [s.t for s in snaps] == sorted(s.t for s in snaps)
    assert all(0 <= s.running <= config.max_num_seqs and 0.0 <= s.kv_usage <= 1.0 for s in snaps)
    end = snaps[-1].t
    if end > 0:
        w = window(snaps, 0.0, end, config.num_gpu_blocks)
        assert w is not None
        assert sum(w.blocked.values()) == pytest.approx(1.0)
        assert 0.0 <= w.kv_usage_mean <= 1.0 + 1e-9


def _shares(config: EngineConfig, workload: WorkloadSpec, c: int) -> dict[str, float]:
    probe = Probe()
    simulate_level(config, LevelSpec(mode="steady", concurrency=c, duration_s=20), workload, probe=probe)
    w = window(probe.snapshots, 5.0, 15.0, config.num_gpu_blocks)
    assert w is not None
    return {**w.blocked, "kv_all": w.kv_share, "prefill": w.prefill_share, "running": w.running_mean}


def test_each_limit_is_named_by_the_engine() -> None:
    cap = _shares(TINY, WorkloadSpec(input_len=64, output_len=64), 128)
    assert cap["cap"] == pytest.approx(1.0) and cap["running"] == pytest.approx(32.0)
    below = _shares(TINY, WorkloadSpec(input_len=64, output_len=64), 16)
    assert below["none"] == pytest.approx(1.0)
    kv = _shares(TINY.with_overrides(kv_tokens=6000, max_num_seqs=64), WorkloadSpec(input_len=64, output_len=512),
                 128)
    assert kv["kv_all"] > 0.95 and kv["preempted"] > 0 and kv["running"] < 32
    prefill = _shares(get_preset("llama-8b-h100"), WorkloadSpec(input_len=4096, output_len=32), 256)
    assert prefill["budget"] > 0.95 and prefill["prefill"] > 0.9


def test_virtual_levels_carry_the_telemetry_a_scrape_would_show() -> None:
    config = TINY.with_overrides(max_num_seqs=8)
    runner = VirtualLevelRunner(config, WorkloadSpec(input_len=32, output_len=64), metrics=True, probe=True)
    run = asyncio.run(runner.run_level(LevelSpec(mode="steady", concurrency=24, duration_s=10), label="C=24",
                                       on_record=None, stop_rule=None))
    plain = asyncio.run(VirtualLevelRunner(config, WorkloadSpec(input_len=32, output_len=64)).run_level(
        LevelSpec(mode="steady", concurrency=24, duration_s=10), label="C=24", on_record=None, stop_rule=None))
    assert run.records == plain.records and not plain.server_samples
    level = build_level(run)
    t = level.telemetry
    assert t.engine == "vllm" and t.samples > 10
    assert t.running_max == 8 and t.running_mean == pytest.approx(8, abs=0.2)
    assert t.waiting_mean == pytest.approx(16, abs=0.5)
    assert t.kv_capacity_tokens == config.num_gpu_blocks * config.block_size
    assert t.preemptions_delta == 0 and t.generation_tokens_rate == pytest.approx(level.output_throughput, rel=0.05)
    assert "C=24" in runner.probes


def test_scrapes_are_spaced_like_a_scraper() -> None:
    probe = Probe(0.1)
    simulate_level(TINY, LevelSpec(mode="steady", concurrency=8, duration_s=5), WorkloadSpec(), probe=probe)
    samples = server_samples(probe.snapshots, 1000, interval_s=0.5)
    gaps = [(b.t_ns - a.t_ns) / 1e9 for a, b in itertools.pairwise(samples)]
    assert gaps and min(gaps) >= 0.5 - 1e-9 and max(gaps) < 0.7


async def test_serve_sim_publishes_its_ground_truth() -> None:
    config = TINY.with_overrides(max_num_seqs=2)
    with start_sim_server(config, in_process=True, speed=4.0) as handle:
        async with aiohttp.ClientSession() as session:
            async def one() -> None:
                async with session.post(handle.url + "/v1/completions",
                                        json={"prompt": "a b c", "max_tokens": 100, "stream": True}) as resp:
                    await resp.read()

            await asyncio.gather(*(one() for _ in range(6)))
            async with session.get(handle.url + "/metrics") as resp:
                text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    blocked = {s.labels["reason"]: s.value for s in families["plateau:admission_blocked_seconds"].samples
               if s.name.endswith("_total")}
    assert set(blocked) == set(REASONS)
    busy = families["plateau:engine_busy_seconds"].samples[0].value
    assert busy > 0 and sum(blocked.values()) == pytest.approx(busy)
    assert blocked["cap"] > 0.3 * busy   # six requests through two slots: the cap held most of them out
    assert 0 < families["plateau:prefill_seconds"].samples[0].value < busy


def test_probe_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError):
        Probe(0.0)
