"""Warm steady levels over real HTTP: the live closed loop the runner keeps between levels, against the
twin's server (going down, cancelling at the end) and the scripted server (a server that stops answering).

Every request the live load sends gets one index, from 0 up, so "every request sent is accounted for"
reads: the indices of all the levels' records, the records handed back at the end and the cancelled
count together cover 0..sent-1, each once.
"""

from __future__ import annotations

import asyncio

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.level import build_level
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.level_run import LevelRun
from plateau_bench.records import RequestRecord
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.workload.prompts import Prompt

from conftest import ScriptedServer

PROMPTS = [Prompt(f"prompt number {i}", 16, 48) for i in range(16)]
RULE = PrecisionRule(precision=0.1, min_s=0.5, max_s=2.5)


def warm(c: int) -> LevelSpec:
    return LevelSpec(mode="steady", concurrency=c, duration_s=RULE.max_s, max_wall_s=RULE.max_s, warm=True)


def _indices(*groups: list[RequestRecord]) -> list[int]:
    return sorted(r.index for group in groups for r in group)


async def _levels(runner: HttpLevelRunner, grid: list[int],
                  rule: PrecisionRule = RULE) -> tuple[list[LevelRun], dict[str, list[RequestRecord]]]:
    """The grid's levels on one runner, with what each level's ``on_record`` received."""
    runs, seen = [], {}
    for c in grid:
        label = f"C={c}"
        seen[label] = []
        runs.append(await runner.run_level(warm(c), label=label, on_record=seen[label].append, stop_rule=rule))
    return runs, seen


async def test_going_down_retires_workers_and_the_level_settles() -> None:
    with start_sim_server(get_preset("tiny").with_overrides(max_num_seqs=16)) as twin:
        runner = HttpLevelRunner(TargetSpec(url=twin.url, model="tiny"), PROMPTS, metrics_url=None)
        async with runner:
            (high, low), seen = await _levels(runner, [8, 2])
            ended = await runner.end_warm(drain=True)
    assert ended is not None and ended.cancelled == 0
    assert low.warm is not None and low.warm.from_concurrency == 8
    assert low.warm.settled_s < (low.benchmark_s or 0.0), "the retirees never finished"
    assert low.warm.carried_in >= 6, "the retirees' last requests end in the level after the step down"
    assert low.warm.carried_out == 2, "two workers left streaming at the close"
    assert low.window_ns is not None and low.window_ns[0] >= low.level_start_ns + round(low.warm.settled_s * 1e9)
    # Each level's records are what its on_record got; every request sent is in exactly one place.
    assert [r.index for r in high.records] == [r.index for r in seen["C=8"]]
    assert [r.index for r in low.records] == [r.index for r in seen["C=2"]]
    indices = _indices(high.records, low.records, ended.records)
    assert indices == list(range(len(indices)))
    assert all(r.error is None for r in [*high.records, *low.records, *ended.records])
    assert high.t0_monotonic_ns == low.t0_monotonic_ns, "one clock origin for the live load"
    for run in (high, low):
        level = build_level(run)
        assert level.num_requests == level.completed + level.failed == len(run.records)
        assert level.output_throughput > 0


async def test_end_warm_without_drain_cancels_what_is_in_flight() -> None:
    with start_sim_server(get_preset("tiny").with_overrides(max_num_seqs=16)) as twin:
        runner = HttpLevelRunner(TargetSpec(url=twin.url, model="tiny"), PROMPTS, metrics_url=None)
        (run,), _ = await _levels(runner, [4])
        ended = await runner.end_warm(drain=False)
        assert await runner.end_warm(drain=False) is None, "the live load ends once"
    assert ended is not None and 1 <= ended.cancelled <= 4
    assert ended.seconds == 0.0
    # Indices run from 0 without gaps: those without a record are exactly the cancelled ones.
    recorded = _indices(run.records, ended.records)
    sent = len(recorded) + ended.cancelled
    assert len(set(recorded)) == len(recorded) and all(i < sent for i in recorded)
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()], "tasks left running"


async def test_a_server_that_stops_answering_ends_the_level_with_hung_requests(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.02, 0.004
    runner = HttpLevelRunner(TargetSpec(url=server.url, model="tiny"), PROMPTS, metrics_url=None, grace_min_s=0.3,
                             check_s=0.2)
    rule = PrecisionRule(precision=0.1, min_s=0.3, max_s=0.8)
    async with runner:
        (answered,), _ = await _levels(runner, [4], rule)
        # From now on no request gets a first token before it is hung (a bit later, so that the scripted
        # server's handlers, which outlive their clients' disconnects, end before its shutdown waits for them).
        server.plan.ttft_s = 1.0
        (silent,), _ = await _levels(runner, [4], rule)
        ended = await runner.end_warm(drain=True)
    assert ended is not None
    assert all(r.error is None for r in answered.records)
    hung = [r for r in silent.records if r.error == "hung"]
    assert hung, "no request was declared hung in the level where the server went silent"
    assert (silent.benchmark_s or 0.0) < rule.max_s + 1.0, "the level outlived its time limit"
    assert build_level(silent).hung == len(hung)
    assert all(r.error == "hung" for r in ended.records), "the drain declares the silent rest hung"
    indices = _indices(answered.records, silent.records, ended.records)
    assert indices == list(range(len(indices)))
