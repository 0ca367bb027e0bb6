"""The twin's live closed loop: workers join spread over a cycle, leave as their requests end, and every
request is handed over once."""

from __future__ import annotations

import pytest

from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.warm import WarmDriver
from plateau_bench.spec import WorkloadSpec
from plateau_bench.units import NS

WORKLOAD = WorkloadSpec(input_len=64, output_len=64)


def driver(chunks: bool = False) -> WarmDriver:
    return WarmDriver(get_preset("tiny"), WORKLOAD, chunks=chunks)


def test_joins_are_spread_over_the_cycle_and_the_concurrency_settles() -> None:
    d = driver()
    d.set_workers(4)
    d.advance(5.0)
    d.learn(4, d.finished())
    d.plan_cycle(8)
    start = d.engine.now
    d.set_workers(8)
    assert d.settled_at is None and len(d.joins) == 4
    times = [t for t, _ in d.joins]
    assert all(start <= t <= start + 2 * d.cycle_s for t in times) and len(set(times)) == 4
    d.advance(start + 3 * d.cycle_s)
    assert d.settled_at is not None and d.settled_at >= max(times)
    assert len(d.live) == 8 and len({r.worker for r in d.live.values()}) == 8


def test_retired_workers_finish_their_request_and_send_no_more() -> None:
    d = driver()
    d.set_workers(8)
    d.advance(3.0)
    d.set_workers(3)
    assert len(d.workers) == 3 and d.settled_at is None
    d.advance(6.0)
    assert d.settled_at is not None
    assert len(d.live) == 3 and {r.worker for r in d.live.values()} == d.workers


@pytest.mark.parametrize("chunks", [False, True])
def test_every_request_is_handed_over_once_and_partials_hold_what_streamed_so_far(chunks: bool) -> None:
    d = driver(chunks)
    d.set_workers(6)
    seen: list[int] = []
    streamed = 0
    for t in (1.0, 2.0, 3.0):
        d.advance(t)
        finished = d.finished()
        seen += [r.index for r in finished]
        streamed += sum(r.output_tokens for r in finished)
        for p in d.partials():
            assert p.end_ns == round(d.engine.now * NS) and p.error is None
            assert p.output_tokens <= WORKLOAD.output_len
            assert sum(p.chunk_tokens) == p.output_tokens          # every token streamed so far has a time
            assert p.chunk_ns == sorted(p.chunk_ns) and all(t <= p.end_ns for t in p.chunk_ns)
    # The records and partials hold exactly the tokens the engine generated.
    assert streamed + sum(p.output_tokens for p in d.partials()) == d.engine.state().generation_tokens_total
    drained = d.drain()
    seen += [r.index for r in drained]
    assert len(seen) == len(set(seen)) == d.issued
    assert not d.live and d.partials() == []


def test_cancel_drops_what_is_in_flight_and_counts_it() -> None:
    d = driver()
    d.set_workers(5)
    d.advance(1.0)
    finished = len(d.finished())
    assert d.cancel() == 5
    assert finished + 5 == d.issued
    d.advance(5.0)
    assert d.finished() == []
