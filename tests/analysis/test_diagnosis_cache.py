"""A prefix cache the workload did not ask for is a measurement fault, named before any server verdict;
reuse the workload asks for (shared prefixes, sessions) is not."""

from __future__ import annotations

import msgspec

from analysis.test_diagnosis import capped_levels
from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import LevelResult, PromptUse, ServerTelemetry


def _with(levels: list[LevelResult], hit: float, use: PromptUse, from_c: int = 1) -> list[LevelResult]:
    """The levels from ``from_c`` on with the server's hit rate ``hit``; every level with ``use``."""
    return [msgspec.structs.replace(
        lv, prompts=use,
        telemetry=msgspec.structs.replace(lv.telemetry, prefix_cache_hit_rate=hit if (lv.concurrency or 0) >= from_c
                                          else 0.0)) for lv in levels]


NEW = PromptUse(requests=1000, prompt_tokens=1_536_000)   # every prompt new, 1,536 tokens each


def test_cache_hits_on_new_prompts_are_a_measurement_fault_named_first() -> None:
    v = diagnose(_with(capped_levels(telemetry=True), 0.55, NEW, from_c=128), engine="vllm")
    assert v.constraint == "measurement" and v.confidence == "high"
    assert v.headline.startswith("measurement fault: the server's prefix cache served 55% of the prompt tokens")
    assert "the workload repeats 0%" in v.headline
    assert v.evidence[0].startswith("C=128: the server found 55% of the prompt tokens in its prefix cache")
    assert any("restart the server" in s for s in v.suggestions)


def test_no_fault_without_hits_and_the_server_verdict_stands() -> None:
    v = diagnose(_with(capped_levels(telemetry=True), 0.01, NEW), engine="vllm")
    assert v.constraint == "admission_cap"


def test_shared_prefixes_explain_their_hits() -> None:
    shared = PromptUse(requests=1000, prompt_tokens=1_000_000, prefix_tokens=900_000)
    assert diagnose(_with(capped_levels(telemetry=True), 0.88, shared), engine="vllm").constraint == "admission_cap"
    # ... but not hits beyond what they share
    assert diagnose(_with(capped_levels(telemetry=True), 0.5, msgspec.structs.replace(shared, prefix_tokens=100_000)),
                    engine="vllm").constraint == "measurement"


def test_short_prompts_sharing_a_template_preamble_are_no_fault() -> None:
    # 40-token prompts, 30 % found cached: 12 tokens a request, a chat template's preamble, not a repeat
    short = PromptUse(requests=1000, prompt_tokens=40_000)
    assert diagnose(_with(capped_levels(telemetry=True), 0.3, short), engine="vllm").constraint == "admission_cap"


def test_sessions_and_old_results_are_not_judged() -> None:
    sessions = PromptUse(requests=1000, prompt_tokens=1_536_000, by_design="sessions")
    assert diagnose(_with(capped_levels(telemetry=True), 0.9, sessions), engine="vllm").constraint != "measurement"
    saved_before = [msgspec.structs.replace(lv, telemetry=ServerTelemetry(prefix_cache_hit_rate=0.9))
                    for lv in capped_levels()]
    assert all(lv.prompts is None for lv in saved_before)
    assert diagnose(saved_before).constraint == "admission_cap"
