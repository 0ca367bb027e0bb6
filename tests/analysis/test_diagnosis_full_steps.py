"""A full step token budget, told by the server: its tokens per step, and the steps a prompt is split over.

``tests/data/real/vllm-budget-96``: a default sweep (``--input-len 512 --output-len 32 --max-concurrency 64``)
of vLLM 0.32 on the CPU, ``--max-num-seqs 64 --max-num-batched-tokens 96`` on the suite's tiny model, with
/metrics. Its steps carried 17 tokens on average at C=1 and 96 at both C=8 and C=16.

``tests/data/real/vllm-budget-64-short-prompts``: the same server with ``--max-num-batched-tokens 64`` swept
with ``--input-len 32 --output-len 64 --max-concurrency 128``. The budget held the running count at 43-44,
pinned as a cap pins it, while its prefill took 2.3 steps a request at C=128 against 1.2 at C=1 (its prompts
split over the tokens the decodes left); it was called a cap of 44, high confidence, with --max-num-seqs 88
as the advice, which would have changed nothing.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from plateau_bench.analysis.diagnosis_budget import budget_sign
from plateau_bench.analysis.diagnosis_common import Sweep
from plateau_bench.analysis.diagnosis_compute import full_steps
from plateau_bench.result import (
    Knee,
    Latency,
    LevelResult,
    Plateau,
    ServerPhase,
    ServerTelemetry,
    ServerTimeSplit,
    Verdict,
)

from support.builders import level_result
from support.loading import Cli

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def test_the_real_vllm_with_a_small_step_budget_is_told_to_raise_it(cli: Cli) -> None:
    result = cli("diagnose", str(REAL / "vllm-budget-96"), "--json")
    assert result.exit_code == 0, result.output
    v = msgspec.convert(msgspec.json.decode(result.output, type=dict[str, object])["verdict"], type=Verdict)
    assert v.constraint == "prefill", v
    assert any("steps carried ~96 tokens on average at C=8 and C=16" in e and "against 17 at C=1" in e
               for e in v.evidence), v.evidence
    assert v.suggestions[0].startswith("raise the per-step token budget above ~96 (--max-num-batched-tokens"), v


def level(c: int, step_tokens: float, decoding: float, running: float | None = None) -> LevelResult:
    return level_result(c, 1000.0, decoding_concurrency=decoding, telemetry=ServerTelemetry(running_mean=running),
                        time_split=ServerTimeSplit(step_tokens=ServerPhase(observations=100, mean=step_tokens)))


def sweep(levels: list[LevelResult]) -> Sweep:
    return Sweep(levels, Plateau(throughput=1000.0, concurrency=levels[-2].concurrency or 0, reached=True),
                 Knee(concurrency=4.0, throughput=950.0, bracket=(2, 8), reached=True), "vllm", levels[-2:], None)


def test_steps_that_grew_then_held_far_above_the_batch_are_full() -> None:
    found = full_steps(sweep([level(1, 20.0, 1.0), level(8, 250.0, 7.0), level(16, 254.0, 8.0)]))
    assert found is not None and found[0] == 254.0


def test_steps_that_hold_a_capped_batch_are_not_a_budget() -> None:
    # A cap at 32 with short prompts: a token per running sequence and the odd prompt, at every level above it.
    assert full_steps(sweep([level(1, 2.0, 1.0), level(32, 36.0, 31.0, 32.0), level(64, 36.5, 31.0, 32.0)])) is None


def test_steps_still_growing_or_never_small_are_not_full() -> None:
    assert full_steps(sweep([level(1, 20.0, 1.0), level(8, 200.0, 7.0), level(16, 250.0, 8.0)])) is None
    assert full_steps(sweep([level(1, 200.0, 1.0), level(8, 250.0, 7.0), level(16, 250.0, 8.0)])) is None


def test_the_real_vllm_held_by_a_small_budget_is_told_to_raise_the_budget_not_the_cap(cli: Cli) -> None:
    result = cli("diagnose", str(REAL / "vllm-budget-64-short-prompts"), "--json")
    assert result.exit_code == 0, result.output
    v = msgspec.convert(msgspec.json.decode(result.output, type=dict[str, object])["verdict"], type=Verdict)
    assert (v.constraint, v.estimated_cap, v.confidence) == ("admission_cap", 44, "medium"), v
    assert v.headline.startswith("admission held at 44 running requests by a full step token budget"), v.headline
    assert any("prefill took ~2.3 steps per request at C=128 against 1.2 at C=1" in e for e in v.evidence), v.evidence
    assert v.suggestions[0].startswith("raise the step token budget above ~57 (--max-num-batched-tokens"), v
    assert not any("--max-num-seqs" in t for t in v.suggestions), v.suggestions


def split_level(c: int, prefill_ms: float, tpot_ms: float, running: float) -> LevelResult:
    return level_result(c, 1000.0, decoding_concurrency=running, tpot_ms=Latency(mean=tpot_ms),
                        telemetry=ServerTelemetry(running_mean=running),
                        time_split=ServerTimeSplit(prefill_ms=ServerPhase(observations=100, mean=prefill_ms)))


def test_prompts_prefilled_in_one_step_at_the_cap_are_not_a_budget() -> None:
    levels = [split_level(1, 2.0, 1.6, 1.0), split_level(64, 9.0, 8.0, 44.0), split_level(128, 9.5, 8.5, 44.0)]
    assert budget_sign(sweep(levels), levels[-2:]) is None
    split = [*levels[:2], split_level(128, 21.0, 8.5, 44.0)]
    found = budget_sign(sweep(split), split[-2:])
    assert found is not None and found.steps_top == pytest.approx(21.0 / 8.5)
