"""A level's prompts, request by request: new ones built in chunks with a bounded memory, given lists
cycled with their repeats counted, a dataset taken in turn that runs out unless reuse was asked for."""

from __future__ import annotations

import asyncio

import pytest

from plateau_bench.result import PromptUse
from plateau_bench.spec import LevelSpec
from plateau_bench.workload.feed import ChunkedFeed, ListFeed, prompts_ahead, prompts_first
from plateau_bench.workload.prompts import Prompt


def _given(n: int) -> list[Prompt]:
    return [Prompt(f"given {i}", 10, 4) for i in range(n)]


async def test_a_list_is_cycled_and_every_repeat_counted() -> None:
    feed = ListFeed(_given(3))
    taken = [await feed.take(i) for i in range(7)]
    assert [p.text for p in taken if p] == [f"given {i % 3}" for i in range(7)]
    use = feed.use()
    assert (use.requests, use.repeated, use.repeated_tokens, use.prompt_tokens) == (7, 4, 40, 70)
    assert use.reusable_share == pytest.approx(4 / 7)


async def test_a_dataset_starts_where_the_last_level_stopped_and_runs_out_without_reuse() -> None:
    feed = ListFeed(_given(5), start=3, reuse=False, dataset=True)
    assert [(await feed.take(i)) for i in range(3)] == [*_given(5)[3:], None]
    use = feed.use()
    assert (use.requests, use.repeated, use.exhausted, use.dataset_from, use.span) == (2, 0, True, 3, 2)


async def test_a_cycled_design_counts_no_repeat() -> None:
    feed = ListFeed(_given(2), by_design="sessions")
    for i in range(5):
        await feed.take(i)
    assert (feed.use().repeated, feed.use().by_design) == (0, "sessions")


class _Builder:
    """Chunk ``k`` holds ``("k", j)`` texts; records which chunks were built and how many are alive."""

    def __init__(self, chunk: int, fail_at: int | None = None) -> None:
        self.chunk = chunk
        self.built: list[int] = []
        self.fail_at = fail_at

    async def __call__(self, number: int) -> tuple[list[Prompt], int]:
        await asyncio.sleep(0)
        if number == self.fail_at:
            raise RuntimeError("tokenizer broke")
        self.built.append(number)
        return [Prompt(f"{number}/{j}", 5, 1, prefix_group=j % 2) for j in range(self.chunk)], 1


async def test_chunks_follow_the_head_are_built_ahead_and_dropped_behind() -> None:
    build = _Builder(chunk=4)
    feed = ChunkedFeed(build, head=_given(2), chunk=4, ahead=8, prefix_counts=[3, 0])
    await feed.prime(6)          # the head and the first chunk
    assert build.built == [0]
    texts = [(p.text if (p := await feed.take(i)) else None) for i in range(40)]
    assert texts[:3] == ["given 0", "given 1", "0/0"]
    assert texts[2:] == [f"{k}/{j}" for k in range(10) for j in range(4)][:38]
    assert len(set(texts)) == 40                      # none repeated
    assert sorted(set(build.built)) == build.built    # each chunk built once, in order
    assert len(feed._chunks) <= 8 // 4 + 2            # the one in use and those ahead, nothing behind
    await asyncio.gather(*feed._chunks.values())      # the ones built ahead count their misses once done
    use = feed.use()
    assert (use.requests, use.repeated, use.length_misses) == (40, 0, len(build.built))
    # half the built prompts are in prefix group 0 (3 tokens each), none of the head's
    assert use.prefix_tokens == 3 * 19
    feed.close()


async def test_a_chunk_that_cannot_be_built_raises_from_take() -> None:
    feed = ChunkedFeed(_Builder(chunk=4, fail_at=1), chunk=4, ahead=4)
    assert (await feed.take(0)) is not None
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        await feed.take(4)
    feed.close()


def test_what_a_level_builds_first_and_ahead() -> None:
    steady = LevelSpec(mode="steady", concurrency=1000, duration_s=5.0, warmup=8)
    burst = LevelSpec(mode="burst", concurrency=64)
    rate = LevelSpec(mode="rate", rate=500.0, duration_s=5.0)
    assert (prompts_first(steady), prompts_ahead(steady)) == (1008, 1000)
    assert (prompts_first(burst), prompts_ahead(burst)) == (64, 256)
    assert (prompts_first(rate), prompts_ahead(rate)) == (1000, 1000)


def test_the_load_processes_parts_fold_into_one_level() -> None:
    total = PromptUse()
    for part in (PromptUse(requests=3, prompt_tokens=30, repeated=1, repeated_tokens=10, dataset_from=40, span=5),
                 PromptUse(requests=2, prompt_tokens=20, dataset_from=40, span=6, exhausted=True)):
        total.add(part)
    assert (total.requests, total.prompt_tokens, total.repeated, total.repeated_tokens) == (5, 50, 1, 10)
    assert (total.dataset_from, total.span, total.exhausted) == (40, 6, True)
