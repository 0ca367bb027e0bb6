"""Per-turn metrics of multi-turn sessions, from records alone."""

from __future__ import annotations

from plateau_bench.analysis.turns import turn_metrics
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord

from support.builders import request_record


def rec(index: int, turn: int, ttft_ms: int, prompt: int, *, error: ErrorClass | None = None,
        warmup: bool = False) -> RequestRecord:
    return request_record(index, ttft_ms=ttft_ms, e2e_ms=ttft_ms + 10, prompt_tokens=prompt, session=index // 3,
                          turn=turn, error=error, warmup=warmup)


def test_figures_per_turn_index_leave_out_failures_and_warmup() -> None:
    records = [rec(0, 0, 10, 100), rec(1, 1, 20, 200), rec(2, 2, 30, 300),
               rec(3, 0, 12, 100), rec(4, 1, 22, 220), rec(5, 2, 999, 300, error=ErrorClass.HTTP_5XX),
               rec(6, 0, 500, 100, warmup=True)]
    turns = turn_metrics(records)
    assert [t.turn for t in turns] == [0, 1, 2]
    assert [t.requests for t in turns] == [2, 2, 1]
    assert turns[0].ttft_ms.p50 == 11 and turns[1].ttft_ms.p50 == 21 and turns[2].ttft_ms.max == 30
    assert turns[1].prompt_tokens_mean == 210 and turns[2].e2e_ms.p50 == 40


def test_single_turn_requests_have_no_turn_figures() -> None:
    plain = request_record(0, end_ns=5, first_token_ns=1)
    assert turn_metrics([plain]) == []
