"""The report's multi-turn section: one row per level and turn, the hit rate with each level."""

from __future__ import annotations

from pathlib import Path

from plateau_bench.report.html_turns import has_turns, turns_table
from plateau_bench.result import Latency, LevelResult, ResultFile, ServerTelemetry, TurnMetrics
from plateau_bench.run_view import ReportRun


def _run(turns: list[TurnMetrics], hit_rate: float | None) -> ReportRun:
    level = LevelResult(label="C=4", mode="steady", concurrency=4, turns=turns,
                        telemetry=ServerTelemetry(prefix_cache_hit_rate=hit_rate))
    return ReportRun("s", Path("s"), ResultFile(kind="sweep", levels=[level]))


def test_one_row_per_turn_with_the_level_and_its_hit_rate() -> None:
    turns = [TurnMetrics(turn=k, requests=10, prompt_tokens_mean=300.0 * (k + 1),
                         ttft_ms=Latency(p50=20.0 + 10 * k, p99=40.0), e2e_ms=Latency(p50=100.0)) for k in range(3)]
    run = _run(turns, 0.42)
    html = turns_table(run)
    assert has_turns([run]) and html.count("<tr>") == 4   # the header and three turns
    assert "C=4 (prefix cache hits 42%)" in html and html.count("C=4") == 1
    assert "<td>900</td>" in html and "<td>40.0 ms</td>" in html


def test_runs_without_sessions_have_no_section() -> None:
    run = _run([], None)
    assert not has_turns([run]) and turns_table(run) == ""
