"""The twin's front end (``config.front_end_ms_per_request``): one process, FIFO, before the engine's queue."""

from __future__ import annotations

import asyncio

import aiohttp
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.errors import ConfigError
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.engine import Engine
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.probe import Probe, server_samples, window
from plateau_bench.spec import LevelSpec, WorkloadSpec

TINY = get_preset("tiny")


def test_requests_leave_the_front_end_one_at_a_time_in_arrival_order() -> None:
    engine = Engine(TINY.with_overrides(front_end_ms=10.0))
    reqs = [engine.submit(8, 4, arrival=0.0) for _ in range(3)]
    late = engine.submit(8, 4, arrival=1.0)   # the front end is idle again by then
    assert [r.entered for r in reqs] == pytest.approx([0.010, 0.020, 0.030])
    assert late.entered == pytest.approx(1.010)
    engine.run()
    firsts = [r.first_token for r in reqs]
    assert firsts == sorted(firsts)
    assert all(r.first_token >= r.entered for r in [*reqs, late])
    assert [r.arrival for r in reqs] == [0.0, 0.0, 0.0]   # the client's send time is kept


def test_requests_in_the_front_end_are_not_counted_waiting() -> None:
    engine = Engine(TINY.with_overrides(front_end_ms=10.0))
    for _ in range(5):
        engine.submit(8, 4, arrival=0.0)
    assert engine.state().waiting == 0
    assert engine.in_front_end() == 5
    engine.run_until(0.025)   # two have left it; the clock stops at the start of the step in flight
    assert 0.020 <= engine.now < 0.030
    assert engine.in_front_end() == 3
    assert engine.state().front_end_cpu_s == pytest.approx(engine.now)   # busy from 0 without a break


def test_the_front_end_cost_adds_to_ttft() -> None:
    level = LevelSpec(mode="burst", concurrency=1, num_requests=4)
    workload = WorkloadSpec(input_len=32, output_len=8)
    plain = simulate_level(TINY, level, workload).records
    fronted = simulate_level(TINY.with_overrides(front_end_ms=20.0), level, workload).records
    for a, b in zip(plain, fronted, strict=True):
        assert b.first_token_ns - b.sent_ns == pytest.approx(a.first_token_ns - a.sent_ns + 20e6, abs=1e3)


def test_no_front_end_changes_nothing() -> None:
    """The default (0 ms) runs the engine as before: records and /metrics samples byte for byte."""
    level = LevelSpec(mode="steady", concurrency=24, duration_s=3.0)
    workload = WorkloadSpec(input_len=64, output_len=32)
    explicit = msgspec.structs.replace(TINY, front_end_ms_per_request=0.0)
    runs = []
    for config in (TINY, explicit):
        probe = Probe(0.1)
        result = simulate_level(config, level, workload, probe=probe)
        samples = server_samples(probe.snapshots, config.kv_tokens)
        runs.append(msgspec.json.encode([result.records, samples]))
        assert all("process_cpu" not in s.values for s in samples)
    assert runs[0] == runs[1]


def test_a_saturated_front_end_is_busy_all_the_time_and_holds_the_engine_below_its_cap() -> None:
    config = TINY.with_overrides(front_end_ms=5.0)   # at most 200 requests/s reach the engine
    probe = Probe(0.05)
    simulate_level(config, LevelSpec(mode="steady", concurrency=64, duration_s=4.0),
                   WorkloadSpec(input_len=16, output_len=4), probe=probe)
    w = window(probe.snapshots, 1.0, 3.0, config.num_gpu_blocks)
    assert w is not None
    assert w.front_end_busy_share == pytest.approx(1.0, abs=0.02)
    assert w.running_mean < config.max_num_seqs
    samples = server_samples(probe.snapshots, config.kv_tokens, front_end=True)
    cpu = [s.values["process_cpu"] for s in samples]
    assert cpu == sorted(cpu) and cpu[-1] > 3.0


def test_a_negative_front_end_cost_is_refused() -> None:
    with pytest.raises(ConfigError, match="front-end"):
        TINY.with_overrides(front_end_ms=-1.0)


async def test_serve_sim_publishes_the_front_ends_cpu_and_keeps_it_out_of_the_queue_time() -> None:
    # Six requests through a 25 ms front end at 4x speed: 150 ms of its (virtual) CPU, 37.5 ms of real time.
    config = TINY.with_overrides(front_end_ms=25.0)
    with start_sim_server(config, in_process=True, speed=4.0) as handle:
        async with aiohttp.ClientSession() as session:
            async def one() -> None:
                async with session.post(handle.url + "/v1/completions",
                                        json={"prompt": "a b c", "max_tokens": 4, "stream": True}) as resp:
                    await resp.read()

            await asyncio.gather(*(one() for _ in range(6)))
            async with session.get(handle.url + "/metrics") as resp:
                text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    cpu = families["process_cpu_seconds"].samples[0]
    assert cpu.name == "process_cpu_seconds_total" and cpu.labels == {}
    assert cpu.value == pytest.approx(6 * 0.025 / 4.0)
    queue = {s.name: s.value for s in families["vllm:request_queue_time_seconds"].samples}
    ttft = {s.name: s.value for s in families["vllm:time_to_first_token_seconds"].samples}
    assert queue["vllm:request_queue_time_seconds_count"] == 6
    # each request's own 25 ms (virtual) in the front end, at least, is in its TTFT and not in its queue time
    assert ttft["vllm:time_to_first_token_seconds_sum"] - queue["vllm:request_queue_time_seconds_sum"] >= \
        6 * 0.025 / 4.0 * 0.99


async def test_serve_sim_without_a_front_end_publishes_no_process_cpu() -> None:
    with start_sim_server(TINY, in_process=True, speed=4.0) as handle:
        async with aiohttp.ClientSession() as session, session.get(handle.url + "/metrics") as resp:
            text = await resp.text()
    assert "process_cpu_seconds" not in text
