"""The prompts a level sends, request by request: each one new unless the workload repeats on purpose.

A server's prefix cache (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's prompt
cache) skips the prefill of a prompt it has seen. A load generator that cycles a fixed pool of prompts
therefore measures cache hits instead of the workload asked for, and more so the longer the prompts and
the higher the load. So every request of a run gets a prompt that no earlier request of the run sent:

* **Synthetic prompts** are built in chunks of ``CHUNK`` as a level needs them. A level's prompts form a
  stream of their own, keyed by the level (label, attempt, repeat: a level measured again after a
  crash, or repeated, draws new ones), and chunk ``k`` of a stream is drawn from
  ``numpy.random.default_rng([seed, *stream, k])``: the same seed gives the same prompt for the same
  level and request index, whichever load process builds it and in whatever order. The one level of
  ``plateau run`` begins with the prompts prepared before it (the first ``n`` of the seed's own stream,
  so a burst draws the same lengths as before and as ``--length-convention`` promises).
* **Memory is bounded**: a level keeps the chunks from the one in use to ``ahead`` requests beyond it
  (built in the background, off the event loop) and drops those behind it; a request holds its own text.
* **A dataset** is taken in its shuffled order across the whole run: a level starts where the previous
  one stopped (``LevelKey.dataset_from``). When it runs out the level sends nothing more and says so
  (``PromptUse.exhausted``), unless ``--allow-reuse`` was given: then it starts over and every repeated
  prompt is counted.
* **Deliberate reuse** keeps its meaning: shared prefixes (``--prefix-groups``) are counted in
  ``prefix_tokens``; sessions and traces repeat by design (``by_design``); a list given as is (tests,
  benchmarks of the load generator) is cycled with its repeats counted.

Each feed counts what it handed out (``PromptUse``), so a level records how much of its prompt tokens
the workload itself repeats: the verdict compares that with the cache hit rate the server reports.
"""

from __future__ import annotations

import abc
import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from plateau_bench.result_parts import PromptUse
from plateau_bench.spec import LevelSpec
from plateau_bench.workload.prompts import Prompt

CHUNK = 256   # prompts built at once: enough to amortise a tokenizer call, small enough to stay out of the way

BuildChunk = Callable[[int], Awaitable[tuple[list[Prompt], int]]]   # chunk number -> (prompts, length misses)


class LevelKey(msgspec.Struct, frozen=True, kw_only=True):
    """Which prompts a level gets: its own stream of synthetic ones, or where it starts in a dataset."""

    label: str
    attempt: int = 1
    repeat: int = 1
    base: bool = False       # the prepared prompts first (the one level of ``plateau run``, first measurement)
    dataset_from: int = 0    # a dataset's position (in its shuffled order) the level starts at


class PromptFeed(abc.ABC):
    """One level's prompts by request index; counts what it handed out."""

    def __init__(self, *, by_design: str | None = None, prefix_counts: Sequence[int] = ()) -> None:
        self._use = PromptUse(by_design=by_design)
        self._prefix_counts = list(prefix_counts)

    @abc.abstractmethod
    async def take(self, index: int) -> Prompt | None:
        """Request ``index``'s prompt, or None when there is none left to send (a dataset ran out)."""

    async def prime(self, count: int) -> None:
        """Have the first ``count`` prompts ready before the level starts (nothing to do for a list)."""
        return None

    def use(self) -> PromptUse:
        return msgspec.structs.replace(self._use)

    def close(self) -> None:
        """The level is over: let go of whatever is still being built."""
        return None

    def _count(self, index: int, prompt: Prompt, *, repeated: bool) -> Prompt:
        u = self._use
        u.requests += 1
        u.prompt_tokens += prompt.prompt_tokens
        u.span = max(u.span, index + 1)
        if repeated:
            u.repeated += 1
            u.repeated_tokens += prompt.prompt_tokens
        elif 0 <= prompt.prefix_group < len(self._prefix_counts):
            u.prefix_tokens += self._prefix_counts[prompt.prefix_group]
        return prompt


class ListFeed(PromptFeed):
    """Given prompts in order from ``start``; past the end cycled again (each repeat counted) when ``reuse``,
    else none: the level has run out."""

    def __init__(self, prompts: Sequence[Prompt], *, start: int = 0, reuse: bool = True,
                 by_design: str | None = None, dataset: bool = False) -> None:
        if not prompts:
            raise ValueError("a prompt feed needs at least one prompt")
        super().__init__(by_design=by_design)
        self.prompts = prompts
        self.start = start
        self.reuse = reuse
        if dataset:
            self._use.dataset_from = start

    async def take(self, index: int) -> Prompt | None:
        position = self.start + index
        repeated = position >= len(self.prompts)
        if repeated and not self.reuse:
            self._use.exhausted = True
            return None
        # by design (sessions, traces) the cycling is the workload's, not a repeat to count
        return self._count(index, self.prompts[position % len(self.prompts)],
                           repeated=repeated and self._use.by_design is None)


class ChunkedFeed(PromptFeed):
    """Prompts built chunk by chunk (``build``), after the ``head`` prompts given first; see the module
    docstring for the bound on what is kept."""

    def __init__(self, build: BuildChunk, *, head: Sequence[Prompt] = (), ahead: int = CHUNK,
                 chunk: int = CHUNK, prefix_counts: Sequence[int] = ()) -> None:
        super().__init__(prefix_counts=prefix_counts)
        self.build = build
        self.head = head
        self.chunk = chunk
        self.ahead = max(ahead, chunk)
        self._chunks: dict[int, asyncio.Task[tuple[list[Prompt], int]]] = {}
        self._in_use = -1   # the highest chunk a request has taken from: the others are handled once per chunk

    async def take(self, index: int) -> Prompt | None:
        if index < len(self.head):
            return self._count(index, self.head[index], repeated=False)
        position = index - len(self.head)
        number = position // self.chunk
        if number > self._in_use:   # a new chunk: forget those behind it, build those ahead
            self._in_use = number
            self._forget_before(number)
            for ahead in range(number, (position + self.ahead) // self.chunk + 1):
                self._start(ahead)
        task = self._chunks.get(number)
        if task is None:   # indices only grow within a process; rebuilt (same prompts) if one comes late
            self._start(number)
            task = self._chunks[number]
        prompts, _ = await task
        return self._count(index, prompts[position % self.chunk], repeated=False)

    async def prime(self, count: int) -> None:
        last = max(count - len(self.head), 0)
        numbers = range((last + self.chunk - 1) // self.chunk)
        for number in numbers:
            self._start(number)
        await asyncio.gather(*(self._chunks[n] for n in numbers))

    def _start(self, number: int) -> None:
        if number not in self._chunks:
            task = asyncio.ensure_future(self.build(number))
            task.add_done_callback(self._built)
            self._chunks[number] = task

    def _built(self, task: asyncio.Task[tuple[list[Prompt], int]]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._use.length_misses += task.result()[1]

    def _forget_before(self, number: int) -> None:
        """Drop the chunks below the one in use: indices only grow within a level (a request keeps its text)."""
        for old in [n for n in self._chunks if n < number]:
            del self._chunks[old]

    def close(self) -> None:
        """Cancel chunks still being built (the level is over)."""
        for task in self._chunks.values():
            task.cancel()
        self._chunks.clear()


def prompts_ahead(level: LevelSpec) -> int:
    """How many prompts a level keeps built ahead of the one it sends: one more of each stream in flight."""
    if level.rate is not None:
        return max(CHUNK, level.max_concurrency or 0, math.ceil(2 * level.rate))
    return max(CHUNK, level.concurrency or 1)


def prompts_first(level: LevelSpec) -> int:
    """The prompts a level sends first, at once: built before its clock starts."""
    total = level.total_requests()
    first = level.warmup + (level.concurrency if level.concurrency is not None else prompts_ahead(level))
    return min(first, level.warmup + total) if total is not None else first


def as_feed(prompts: Sequence[Prompt] | PromptFeed) -> PromptFeed:
    """A feed as given, or a list to cycle with its repeats counted."""
    return prompts if isinstance(prompts, PromptFeed) else ListFeed(prompts)
