"""What a level's notes name: figures the level kept apart rather than trusted."""

from __future__ import annotations

from plateau_bench.analysis.level import build_level
from plateau_bench.level_run import LevelRun
from plateau_bench.spec import LevelSpec
from plateau_bench.units import NS_PER_MS

from support.builders import request_record


def test_refuted_usage_claims_are_named() -> None:
    ms = NS_PER_MS
    records = [request_record(i, sent_ns=0, first_token_ns=10 * ms, end_ns=30 * ms, chunk_ns=[10 * ms, 30 * ms],
                              chunk_tokens=[4, 4], output_tokens=8, prompt_tokens=16,
                              usage_tokens=20 if i < 3 else None) for i in range(4)]
    level = build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=4), label="C=4", records=records))
    assert level.token_mismatches == 3 and level.output_tokens == 32
    assert any(note.startswith("3 request(s) had a usage report claiming more output tokens than they streamed "
                               "or than max_tokens allowed") for note in level.notes)
    clean = build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=4), label="C=4",
                                 records=[request_record(0, end_ns=30 * ms, output_tokens=8)]))
    assert not any("usage report" in note for note in clean.notes)


def level_of(outputs: list[int], asked: int | None) -> list[str]:
    ms = NS_PER_MS
    records = [request_record(i, sent_ns=0, first_token_ns=10 * ms, end_ns=30 * ms, chunk_ns=[10 * ms, 30 * ms],
                              chunk_tokens=[n // 2, n - n // 2], output_tokens=n, prompt_tokens=16,
                              asked_tokens=asked) for i, n in enumerate(outputs)]
    return build_level(LevelRun(level=LevelSpec(mode="burst", concurrency=len(outputs)), label="C=4",
                                records=records)).notes


def test_answers_the_server_ended_short_of_what_they_asked_are_named() -> None:
    notes = level_of([240, 176, 164, 190], asked=240)
    assert any(n.startswith("3 of 4 answers ended short of the tokens asked (the median of them 176 of 240): the "
                            "server stopped them early") for n in notes), notes
    assert not any("ended short" in n for n in level_of([240] * 4, asked=240))
    assert not any("ended short" in n for n in level_of([176] * 4, asked=None))   # the twin records none
    assert not any("ended short" in n for n in level_of([240] * 39 + [200], asked=240))   # one in forty: noise
