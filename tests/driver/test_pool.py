"""Load processes (``--workers``) against a scripted server over real sockets.

The pool's processes are real child processes streaming real HTTP; the server runs in the test's
own process and logs every request it received, so "no request lost" is checked against what the
server saw, not against what the client says it sent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import TYPE_CHECKING

import pytest

from plateau_bench.analysis.level import build_level
from plateau_bench.driver.pool import WorkerPool
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.spec import LevelSpec, TargetSpec, WorkloadSpec
from plateau_bench.workload import EstimateCounter, synthesize
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.source import PromptSource, synthetic_recipe

if TYPE_CHECKING:
    from conftest import ScriptedServer

pytestmark = pytest.mark.slow   # starts worker processes: a second or two each on two cores

PROMPTS = [Prompt(f"prompt number {i}", 3, 8) for i in range(16)]


def _target(server: ScriptedServer) -> TargetSpec:
    return TargetSpec(url=server.url, model="tiny")


async def _until(condition: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_a_pooled_burst_counts_exactly_like_one_process(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.01, 0.04   # long enough for health samples
    level = LevelSpec(mode="burst", concurrency=24)
    target = _target(server)
    async with WorkerPool(3, auto=False, target=target, prompts=PROMPTS) as pool:
        pids = [p.pid for p in pool.processes]
        runner = HttpLevelRunner(target, PROMPTS, metrics_url=None, pool=pool)
        pooled = await runner.run_level(level, label="C=24", on_record=None, stop_rule=None)
        again = await runner.run_level(level, label="C=24", on_record=None, stop_rule=None)
        assert [p.pid for p in pool.processes] == pids   # started once, reused across levels
    single = await HttpLevelRunner(target, PROMPTS, metrics_url=None).run_level(
        level, label="C=24", on_record=None, stop_rule=None)
    assert len(server.served) == 3 * 24
    for run in (pooled, again):
        assert sorted(r.worker for r in run.records) == list(range(24))   # one request per closed-loop worker
        assert len({r.index for r in run.records}) == 24
        assert run.load_processes == 3
    a, b = build_level(pooled), build_level(single)
    assert (a.num_requests, a.completed, a.failed) == (b.num_requests, b.completed, b.failed) == (24, 24, 0)
    assert a.output_tokens == b.output_tokens == 24 * 8
    assert a.client.processes == 3 and sorted(h.worker for h in a.client.per_worker) == [0, 1, 2]
    assert a.client.in_flight_max == sum(h.in_flight_max or 0 for h in a.client.per_worker)
    # each process's own requests, send lag and connect time, from the records it sent
    assert sorted(h.requests for h in a.client.per_worker) == [8, 8, 8]
    assert all(h.connect_ms_p99 is not None and h.send_lag_ms_p99 is not None for h in a.client.per_worker)
    assert {r.process for r in pooled.records} == {0, 1, 2} and {r.process for r in single.records} == {None}


async def test_an_open_loop_level_is_dealt_out_and_streamed_back(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.005, 0.001
    level = LevelSpec(mode="rate", rate=200.0, num_requests=60)
    seen: list[RequestRecord] = []
    async with WorkerPool(2, auto=False, target=_target(server), prompts=PROMPTS, seed=4) as pool:
        runner = HttpLevelRunner(_target(server), PROMPTS, metrics_url=None, pool=pool, seed=4)
        run = await runner.run_level(level, label="rate=200", on_record=seen.append, stop_rule=None)
    assert sorted(r.index for r in run.records) == list(range(60))
    assert seen == run.records   # every record reached on_record as it came
    assert len(server.served) == 60 and all(r.error is None for r in run.records)


async def test_a_killed_worker_is_reported_and_its_requests_are_counted(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.05, 0.4     # 8 tokens: ~3 s per request
    level = LevelSpec(mode="steady", concurrency=6, duration_s=2.0)
    target = _target(server)
    async with WorkerPool(2, auto=False, target=target, prompts=PROMPTS) as pool:
        runner = HttpLevelRunner(target, PROMPTS, metrics_url=None, pool=pool)
        task = asyncio.create_task(runner.run_level(level, label="C=6", on_record=None, stop_rule=None))
        victim = pool.processes[1]
        await _until(lambda: victim.part is not None and len(victim.part.pending) == 3)
        os.kill(victim.pid, signal.SIGKILL)
        run = await task
        lost = [r for r in run.records if r.error == ErrorClass.HUNG and "died" in (r.error_detail or "")]
        assert len(lost) == 3 and {r.worker for r in lost} == {3, 4, 5}   # the victim's workers
        # every request the server received has exactly one record: none vanished with the process
        assert len(run.records) == len(server.served) == len({r.index for r in run.records})
        assert run.lost_workers == 1
        assert any("load worker 1" in n and "SIGKILL" in n and "3 request(s)" in n for n in run.notes)
        result = build_level(run)
        assert result.level_failed and result.hung == 3
        assert result.completed + result.failed == result.num_requests
        # the next level gets a fresh process in the dead one's place
        server.plan.itl_s = 0.002
        nxt = await runner.run_level(LevelSpec(mode="burst", concurrency=4), label="C=4", on_record=None,
                                     stop_rule=None)
        assert pool.processes[1].pid != victim.pid
        assert nxt.lost_workers == 0 and sum(r.error is None for r in nxt.records) == 4


async def test_cancelling_a_level_keeps_every_finished_record(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.01, 0.01
    level = LevelSpec(mode="steady", concurrency=8, duration_s=30.0)
    seen: list[RequestRecord] = []
    async with WorkerPool(2, auto=False, target=_target(server), prompts=PROMPTS) as pool:
        runner = HttpLevelRunner(_target(server), PROMPTS, metrics_url=None, pool=pool)
        task = asyncio.create_task(runner.run_level(level, label="C=8", on_record=seen.append, stop_rule=None))
        await _until(lambda: len(seen) >= 40)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        finished = len(seen)
        processes = [p.proc for p in pool.processes]
    assert all(p.returncode is not None for p in processes)   # the processes left with the pool
    assert len({r.index for r in seen}) == finished >= 40
    # what the server completed before the abort came back: only the requests cut off are missing
    assert len(server.served) - finished <= 8 + 8


async def test_load_processes_send_the_prompts_one_process_would_each_once(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.002, 0.001
    workload = WorkloadSpec(input_len=40, output_len=8, seed=9)
    source = PromptSource(synthetic_recipe(workload, await synthesize(workload, 16, counter=EstimateCounter())))
    level = LevelSpec(mode="burst", concurrency=30, num_requests=600)   # past the prepared ones, many chunks
    target = _target(server)
    async with WorkerPool(3, auto=False, target=target, prompts=source) as pool:
        pooled = await HttpLevelRunner(target, source, metrics_url=None, pool=pool).run_level(
            level, label="C=30", on_record=None, stop_rule=None)
    sent_pooled = [str(s.body["prompt"]) for s in server.served]
    server.served.clear()
    single = await HttpLevelRunner(target, source, metrics_url=None).run_level(
        level, label="C=30", on_record=None, stop_rule=None)
    sent_single = [str(s.body["prompt"]) for s in server.served]
    assert len(set(sent_pooled)) == len(sent_pooled) == 600          # every request its own prompt
    assert sorted(sent_pooled) == sorted(sent_single)                # the same ones, whoever built them
    for run in (pooled, single):
        assert run.prompts is not None
        assert (run.prompts.requests, run.prompts.repeated, run.prompts.span) == (600, 0, 600)
