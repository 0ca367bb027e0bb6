"""A warm level's figures: requests counted where they ended, tokens where they arrived."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.metrics import Window
from plateau_bench.analysis.warm_level import compute_warm_level
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

S = NS


def req(index: int, sent: float, first: float, end: float, tokens: int, *, error: str | None = None,
        worker: int | None = None) -> RequestRecord:
    """A chunkless request: its tokens spread evenly from the first to the end (the twin's fast mode)."""
    return RequestRecord(index=index, worker=index if worker is None else worker, scheduled_ns=int(sent * S),
                         sent_ns=int(sent * S), first_token_ns=int(first * S), end_ns=int(end * S),
                         output_tokens=tokens, prompt_tokens=10, error=error)


def level(records: list[RequestRecord], in_flight: list[RequestRecord], start: float = 10.0, end: float = 20.0):
    return compute_warm_level(records, in_flight, label="C=2", concurrency=2,
                              window=Window(int(start * S), int(end * S)), level_start_ns=int(5 * S))


def test_a_request_longer_than_the_window_counts_the_tokens_it_streamed_inside_it() -> None:
    # One request from 0 s to 30 s, 301 tokens (one every 0.1 s): still streaming when the window closes at 20 s,
    # its partial record holds the 201 tokens it had by then; 101 of them arrived inside [10, 20].
    partial = req(1, 0.0, 0.0, 20.0, 201)
    lv = level([], [partial])
    assert lv.num_requests == 0 and lv.completed == 0          # it ended in no level yet: no record here
    assert lv.output_tokens == 101
    assert lv.output_throughput == pytest.approx(10.1)
    assert lv.tpot_ms.mean == pytest.approx(100.0)             # its gaps inside the window
    assert lv.achieved_concurrency == pytest.approx(1.0)


def test_requests_count_where_they_ended_and_the_e2e_needs_requests_that_began_in_the_level() -> None:
    carried = req(1, 0.0, 1.0, 12.0, 111)         # sent in an earlier level, ended in this one
    inside = [req(10 + k, 6.0 + k, 6.5 + k, 11.0 + k, 10) for k in range(10)]
    lv = level([carried, *inside], [])
    assert lv.num_requests == 11 and lv.completed == 11
    assert lv.e2e_ms.count == 10 and lv.e2e_ms.mean == pytest.approx(5000.0)   # the carried one left out
    few = level([carried, *inside[:3]], [])
    assert "E2E over requests ending in the window" in few.window_note


def test_a_request_that_failed_after_the_close_loses_its_tokens_and_a_drained_one_is_counted_once() -> None:
    partial_ok = req(1, 0.0, 0.0, 20.0, 201)
    partial_bad = req(2, 0.0, 0.0, 20.0, 201)
    drained_ok = req(1, 0.0, 0.0, 30.0, 301)
    drained_bad = req(2, 0.0, 0.0, 25.0, 251, error="truncated")
    lv = level([drained_ok, drained_bad], [partial_ok, partial_bad])
    assert lv.num_requests == 2 and lv.completed == 1 and lv.failed == 1
    assert lv.output_tokens == 101                             # request 1's tokens inside, once; none of 2's
    assert lv.achieved_concurrency == pytest.approx(2.0)        # each request counted once, not twice
    assert lv.peak_in_flight == 2


def test_ttft_comes_from_requests_sent_and_answered_inside_the_window() -> None:
    queued_before = [req(k, 1.0, 11.0, 15.0, 5) for k in range(12)]        # waited 10 s, sent before the window
    sent_inside = [req(100 + k, 12.0, 12.5, 16.0, 5) for k in range(12)]   # waited 0.5 s
    lv = level([*queued_before, *sent_inside], [])
    assert lv.ttft_ms.mean == pytest.approx(500.0)
    lv = level(queued_before, [])
    assert lv.ttft_ms.mean == pytest.approx(10_000.0) and "TTFT over every first token" in lv.window_note
