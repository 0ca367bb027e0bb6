"""Sharing a level between load processes: exact splits, one open-loop schedule, the auto count."""

from __future__ import annotations

import asyncio
import time

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.driver.load import run_level
from plateau_bench.driver.load_state import LoadShare
from plateau_bench.driver.split import (
    STREAMS_PER_WORKER,
    auto_workers,
    schedule_ns,
    split_evenly,
    split_in_proportion,
    split_level,
)
from plateau_bench.records import RequestRecord
from plateau_bench.spec import LevelSpec
from plateau_bench.workload.arrivals import arrival_offsets_ns
from plateau_bench.workload.prompts import Prompt


class FakeSender:
    """Serves each request in ``service_s``."""

    def __init__(self, t0_ns: int, service_s: float) -> None:
        self.t0_ns = t0_ns
        self.service_s = service_s

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        sent = time.monotonic_ns() - self.t0_ns
        await asyncio.sleep(self.service_s)
        return RequestRecord(index=index, worker=worker, scheduled_ns=scheduled_ns, sent_ns=sent,
                             end_ns=time.monotonic_ns() - self.t0_ns, output_tokens=max_tokens, warmup=warmup)


@given(st.integers(0, 100_000), st.integers(1, 64))
def test_an_even_split_loses_nothing(total: int, parts: int) -> None:
    shares = split_evenly(total, parts)
    assert sum(shares) == total and len(shares) == parts
    assert max(shares) - min(shares) <= 1


@given(st.integers(0, 10_000), st.lists(st.integers(0, 500), min_size=1, max_size=32))
def test_a_proportional_split_loses_nothing(total: int, weights: list[int]) -> None:
    shares = split_in_proportion(total, weights)
    assert sum(shares) == total
    if sum(weights):
        for share, w in zip(shares, weights, strict=True):
            assert abs(share - total * w / sum(weights)) < 1.0


@given(st.integers(1, 20_000), st.integers(1, 16), st.sampled_from(["burst", "steady"]),
       st.integers(0, 50))
def test_closed_loop_parts_sum_to_the_level(concurrency: int, processes: int, mode: str, warmup: int) -> None:
    level = LevelSpec(mode=mode, concurrency=concurrency,  # type: ignore[arg-type]
                      duration_s=10.0 if mode == "steady" else None, warmup=warmup)
    parts = split_level(level, processes, seed=0)
    assert len(parts) == min(processes, concurrency)
    assert sum(p.level.concurrency or 0 for p in parts) == concurrency
    assert sum(p.level.warmup for p in parts) == warmup
    if mode == "burst":  # num-requests = C: each process sends exactly one request per worker
        assert [p.level.total_requests() for p in parts] == [p.level.concurrency for p in parts]
    else:
        assert all(p.level.num_requests is None and p.level.duration_s == 10.0 for p in parts)
    # closed-loop workers keep distinct numbers across processes: 0..C-1 in order
    bases = [p.share.worker_base for p in parts]
    assert bases == [sum(q.level.concurrency or 0 for q in parts[:i]) for i in range(len(parts))]
    for p in parts:
        p.level.validate()


def test_a_burst_of_fewer_requests_than_workers_skips_the_idle_processes() -> None:
    level = LevelSpec(mode="burst", concurrency=8, num_requests=3)
    parts = split_level(level, 4, seed=0)
    assert sum(p.level.total_requests() or 0 for p in parts) == 3
    assert all((p.level.total_requests() or 0) > 0 for p in parts)


@given(st.floats(1.0, 500.0), st.integers(1, 8), st.integers(1, 400), st.integers(0, 5))
def test_the_open_loop_schedule_is_drawn_once_and_dealt_out(rate: float, processes: int, n: int, seed: int) -> None:
    level = LevelSpec(mode="rate", rate=rate, num_requests=n)
    whole = schedule_ns(level, seed)
    assert whole == arrival_offsets_ns(n, rate, seed=seed)   # the single-process schedule, same seed
    parts = split_level(level, processes, seed)
    dealt = sorted((p.share.index_base + k * p.share.index_stride, t)
                   for p in parts for k, t in enumerate(p.share.arrivals or []))
    assert dealt == list(enumerate(whole))                   # every arrival once, index = its rank
    assert sum(p.level.num_requests or 0 for p in parts) == n


def test_a_duration_bounds_the_schedule_and_the_concurrency_bound_is_split() -> None:
    level = LevelSpec(mode="rate", rate=100.0, duration_s=2.0, max_concurrency=10)
    whole = schedule_ns(level, 3)
    assert whole and max(whole) < 2_000_000_000 and 150 < len(whole) < 250
    parts = split_level(level, 4, 3)
    assert sum(p.level.max_concurrency or 0 for p in parts) == 10
    assert all(p.level.num_requests is None for p in parts)
    # never a part without a bound
    assert len(split_level(msgspec.structs.replace(level, max_concurrency=2), 4, 3)) == 2


def test_auto_gives_one_process_per_share_of_streams_within_the_pool() -> None:
    assert auto_workers(LevelSpec(mode="burst", concurrency=1), 8) == 1
    assert auto_workers(LevelSpec(mode="burst", concurrency=STREAMS_PER_WORKER), 8) == 1
    assert auto_workers(LevelSpec(mode="burst", concurrency=STREAMS_PER_WORKER + 1), 8) == 2
    assert auto_workers(LevelSpec(mode="burst", concurrency=8192), 8) == 8
    assert auto_workers(LevelSpec(mode="burst", concurrency=8192), 2) == 2
    assert auto_workers(LevelSpec(mode="rate", rate=5000.0, duration_s=1.0), 4) == 4


PROMPTS = [Prompt(f"p{i}", 10, 5) for i in range(5)]


def test_shares_run_by_the_load_loop_give_disjoint_indices_and_workers() -> None:
    level = LevelSpec(mode="burst", concurrency=7, num_requests=20)
    parts = split_level(level, 3, seed=0)

    async def main() -> list[tuple[int, int]]:
        t0 = time.monotonic_ns()
        seen = []
        for part in parts:
            records = await run_level(FakeSender(t0, 0.001), PROMPTS, part.level, t0_ns=t0, share=part.share)
            seen += [(r.index, r.worker) for r in records]
        return seen

    seen = asyncio.run(main())
    indices = [i for i, _ in seen]
    assert len(indices) == 20 and len(set(indices)) == 20
    assert {w for _, w in seen} == set(range(7))


def test_an_open_loop_share_sends_at_its_arrivals() -> None:
    share = LoadShare(index_base=1, index_stride=3, arrivals=[0, 20_000_000, 40_000_000])
    level = LevelSpec(mode="rate", rate=1.0, num_requests=3)

    async def main() -> tuple[list[int], list[int]]:
        t0 = time.monotonic_ns()
        records = await run_level(FakeSender(t0, 0.001), PROMPTS, level, t0_ns=t0, share=share)
        return sorted(r.index for r in records), sorted(r.scheduled_ns for r in records)

    indices, scheduled = asyncio.run(main())
    assert indices == [1, 4, 7]
    assert [s - scheduled[0] for s in scheduled] == [0, 20_000_000, 40_000_000]
