"""The HTTP level runner against the twin's server, over real sockets: how a steady level ends."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from plateau_bench.analysis.convergence import PrecisionRule
from plateau_bench.analysis.level import build_level
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.workload.prompts import Prompt

PROMPTS = [Prompt(f"prompt number {i}", 16, 48) for i in range(16)]
LEVEL = LevelSpec(mode="steady", concurrency=8, duration_s=30.0)


async def _running(metrics_url: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(metrics_url) as response:
        text = await response.text()
    line = next(x for x in text.splitlines() if x.startswith("vllm:num_requests_running"))
    return float(line.rsplit(" ", 1)[1])


async def _level(drain: bool) -> tuple[float, int, int, float]:
    with start_sim_server(get_preset("tiny")) as twin:
        runner = HttpLevelRunner(TargetSpec(url=twin.url, model="tiny"), PROMPTS, metrics_url=None)
        rule = PrecisionRule(precision=0.25, min_s=0.5, max_s=30.0, drain=drain)
        run = await runner.run_level(LEVEL, label="C=8", on_record=None, stop_rule=rule)
        await asyncio.sleep(0.3)
        running = await _running(f"{twin.url}/metrics")
    level = build_level(run)
    return level.output_throughput, run.cancelled_at_end, level.failed, running


@pytest.mark.slow   # two real-time levels against a twin process, a few seconds each
async def test_a_precise_steady_level_cancels_what_is_in_flight_and_the_server_lets_it_go() -> None:
    tok_s, cancelled, failed, running = await _level(drain=False)
    assert cancelled > 0 and failed == 0
    assert running == 0, "the server should have dropped the cancelled requests with their connections"
    drained_tok_s, drained_cancelled, drained_failed, _ = await _level(drain=True)
    assert drained_cancelled == 0 and drained_failed == 0
    # The same server measured twice (real time, a loaded machine): the figures agree within the
    # rule's precision. (What the cancel saves is priced in virtual time, tests/sweep/test_cheap_levels.py.)
    assert abs(tok_s / drained_tok_s - 1) < 0.25
