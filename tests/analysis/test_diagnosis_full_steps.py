"""Every engine step full on the plateau: the server's tokens-per-step histogram names a step budget.

``tests/data/real/vllm-budget-96``: a default sweep (``--input-len 512 --output-len 32 --max-concurrency 64``)
of vLLM 0.32 on the CPU, ``--max-num-seqs 64 --max-num-batched-tokens 96`` on the suite's tiny model, with
/metrics. Its steps carried 17 tokens on average at C=1 and 96 at both C=8 and C=16.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from plateau_bench.analysis.diagnosis_common import Sweep
from plateau_bench.analysis.diagnosis_compute import full_steps
from plateau_bench.result import Knee, LevelResult, Plateau, ServerPhase, ServerTelemetry, ServerTimeSplit, Verdict

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
