"""A token budget filled by prompts holds the running count exactly as a cap does: with /metrics, the verdict
may name a cap there, but never at high confidence, and it says how to tell the two apart.

Each engine is swept in virtual time with the /metrics a scrape would show (running, waiting, KV usage).
"""

from __future__ import annotations

import asyncio

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import Verdict
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits

STEP = StepModel(t0=6.66e-3, a=0.374e-3, b=5.9e-6, c=1.6e-9)


def verdict_of(cap: int, budget: int, input_len: int, output_len: int) -> Verdict:
    config = EngineConfig(name="budget", step=STEP, max_num_seqs=cap, max_num_batched_tokens=budget,
                          kv_tokens=4_000_000)
    runner = VirtualLevelRunner(config, WorkloadSpec(input_len=input_len, output_len=output_len), steady_s=30,
                                metrics=True, scrape_s=1.0)
    plan = ConcurrencyPlan(mode="steady", concurrencies=(64, 128, 256, 512, 1024),
                           limits=SweepLimits(min_level_s=5.0, max_level_s=120.0, warm=False))
    state, _ = asyncio.run(run_plan(runner, plan, engine="vllm"))
    return diagnose(state.levels)


def test_a_running_count_held_by_a_budget_full_of_prompts_is_no_sure_cap() -> None:
    # Cap 1,024, never reached: each step's 4,096 tokens go to ~365 decodes and the prompts of the ~10 requests
    # that end per step (398 prompt tokens against 39 output tokens each), so running settles at ~375.
    v = verdict_of(cap=1024, budget=4096, input_len=398, output_len=39)
    assert v.estimated_cap is not None and v.estimated_cap < 1024
    assert not (v.constraint == "admission_cap" and v.confidence == "high"), v
    budget_lines = [line for line in v.to_separate if "--max-num-batched-tokens" in line]
    assert len(budget_lines) == 1, v.to_separate
    assert f"running count at {v.estimated_cap}" in budget_lines[0]


def test_a_cap_is_still_sure_where_decodes_fill_the_steps() -> None:
    # The same engine with a real cap of 128 and outputs longer than prompts: the steps carry ~128 decodes and
    # a few prompts, far below the budget, and /metrics show running pinned at 128 with a queue.
    v = verdict_of(cap=128, budget=4096, input_len=64, output_len=256)
    assert (v.constraint, v.estimated_cap, v.confidence) == ("admission_cap", 128, "high")
    assert not any("--max-num-batched-tokens" in line for line in v.to_separate)


def test_a_cap_is_still_sure_where_its_steps_are_smaller_than_any_budget() -> None:
    # Prompts are most of the tokens, but a cap of 16 gives steps of ~16 x (1 + 992 / 116) = 153 tokens: no
    # engine's token budget is that small by default, so the pinned count is the cap.
    v = verdict_of(cap=16, budget=4096, input_len=992, output_len=116)
    assert (v.constraint, v.estimated_cap, v.confidence) == ("admission_cap", 16, "high")
