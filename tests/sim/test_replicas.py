"""Data-parallel replicas of the twin behind a balancer: N replicas serve N times one, the balancers
split as they say, and serve-sim answers with them over HTTP."""

from __future__ import annotations

import asyncio

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.replicas import ReplicaSet, parse_balancer
from plateau_bench.spec import LevelSpec, WorkloadSpec

TINY = get_preset("tiny")
WORK = WorkloadSpec(input_len=128, output_len=128, range_ratio=0.5)


def tok_s(config: object, level: LevelSpec) -> float:
    records = simulate_level(config, level, WORK).records  # type: ignore[arg-type]
    return sum(r.output_tokens for r in records) / (max(r.end_ns for r in records) / 1e9)


@pytest.mark.parametrize("balancer", ["round_robin", "least_outstanding"])
def test_n_replicas_serve_n_times_one_at_n_times_the_load(balancer: str) -> None:
    one = tok_s(TINY, LevelSpec(mode="steady", concurrency=64, duration_s=30))
    for n in (2, 3):
        many = tok_s(TINY.with_overrides(replicas=n, balancer=balancer),
                     LevelSpec(mode="steady", concurrency=64 * n, duration_s=30))
        assert many == pytest.approx(n * one, rel=0.03)


def test_one_replica_is_the_single_engine_exactly() -> None:
    level = LevelSpec(mode="steady", concurrency=48, duration_s=20)
    assert simulate_level(TINY, level, WORK).records == simulate_level(
        TINY.with_overrides(replicas=1, balancer="least_outstanding"), level, WORK).records


def test_round_robin_takes_turns_and_least_outstanding_evens_the_load() -> None:
    rr = ReplicaSet(TINY, 3, "round_robin")
    for _ in range(9):
        rr.submit(128, 64)
    assert rr.sent_to == [3, 3, 3]
    lor = ReplicaSet(TINY, 2, "least_outstanding")
    lor.submit(128, 4000)                     # replica 0 holds this one for a long time
    t = 0.0
    for _ in range(6):
        lor.submit(128, 4)                    # each short one goes where nothing is outstanding
        while lor.outstanding[1]:
            t += 0.01
            lor.run_until(t)
    assert lor.sent_to == [1, 6] and lor.outstanding == [1, 0]


def test_request_ids_are_unique_across_replicas() -> None:
    rs = ReplicaSet(TINY, 4, "round_robin")
    rids = [rs.submit(64, 8).rid for _ in range(40)]
    assert len(set(rids)) == 40


def test_an_open_loop_over_replicas_finishes_every_request() -> None:
    config = TINY.with_overrides(replicas=4, balancer="least_outstanding")
    result = simulate_level(config, LevelSpec(mode="rate", rate=80.0, duration_s=20), WORK)
    assert all(r.error is None for r in result.records) and len(result.records) > 1000
    assert result.state.running == 0 and result.state.waiting == 0


def test_bad_flags_are_named() -> None:
    with pytest.raises(ConfigError, match="--balancer must be"):
        parse_balancer("random")
    with pytest.raises(ConfigError, match="--replicas must be >= 1"):
        TINY.with_overrides(replicas=0)
    assert parse_balancer("least-outstanding") == "least_outstanding" and parse_balancer("RR") == "round_robin"


def test_serve_sim_with_replicas_over_http() -> None:
    import aiohttp

    from plateau_bench.sim.embed import start_sim_server

    async def main() -> tuple[int, str]:
        with start_sim_server(TINY.with_overrides(replicas=2), in_process=True, speed=50.0) as handle:
            async with aiohttp.ClientSession() as session:
                async def one() -> str:
                    body = {"model": TINY.model_name, "prompt": "hello " * 20, "max_tokens": 8}
                    async with session.post(f"{handle.url}/v1/completions", json=body) as resp:
                        data = await resp.json()
                        return str(data["id"])
                ids = await asyncio.gather(*(one() for _ in range(20)))
                async with session.get(f"{handle.url}/metrics") as resp:
                    metrics = await resp.text()
        return len(set(ids)), metrics

    unique, metrics = asyncio.run(main())
    assert unique == 20
    assert "vllm:num_requests_running" in metrics
