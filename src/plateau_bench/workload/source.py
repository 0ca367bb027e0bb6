"""Where a run's prompts come from: one recipe, made when the run is prepared and sent as is to every
load process, which builds the same prompts from it (``workload.feed`` for how a level takes them).

* ``synthetic``: the prepared prompts, the workload and what text making needs to go on (the server
  tokenizer's calibration, the shared prefixes); later chunks are built from the seed, exactly as the
  prepared ones (a local tokenizer: exact counts; the server's ``/tokenize``: the verified sample's
  calibration, no more calls during the run; no tokenizer: one word per token).
* ``given``: a list taken as it is: a dataset (in its shuffled order, across the run), the first turns
  of multi-turn sessions, a trace's requests, or a list handed in by a caller.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from typing import Literal

import msgspec
import numpy as np

from plateau_bench.records import TOKEN_SOURCE_TOKENIZER
from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload.feed import CHUNK, ChunkedFeed, LevelKey, ListFeed, PromptFeed
from plateau_bench.workload.lengths import LengthSampler
from plateau_bench.workload.prefixes import SharedPrefixes
from plateau_bench.workload.prompts import Prompt, Workload
from plateau_bench.workload.tokenized import Candidates, candidate_ids, exact_texts
from plateau_bench.workload.tokens import TOKEN_SOURCE_SERVER_TOKENIZER, EstimateCounter, LocalTokenizer
from plateau_bench.workload.wordtext import calibrated_texts, estimate_texts

# Tokens re-encoded to check each chunk built by the exact fast path (at least 16 prompts): the run's
# prepared prompts checked the method on 131k; a miss still sends the chunk through the full correction.
CHUNK_VERIFY_TOKENS = 16_384
_BASE, _LEVEL, _CANDIDATES = 1, 2, 3   # the seed streams: the prepared level's, a level's own, the vocabulary sample


class PromptRecipe(msgspec.Struct, frozen=True, kw_only=True):
    kind: Literal["synthetic", "given"] = "given"
    prompts: list[Prompt] = msgspec.field(default_factory=list)   # synthetic: the prepared ones; given: all
    workload: WorkloadSpec | None = None
    token_source: str = ""                 # how counts were made: a local tokenizer, the server's, an estimate
    tokens_per_word: float | None = None   # the server's /tokenize: the calibration its sample gave
    prefixes: list[Prompt] = msgspec.field(default_factory=list)  # --prefix-groups: each prefix's text and count
    by_design: str | None = None           # given: "sessions" | "trace" (cycled on purpose)
    reuse: bool = True                     # given: cycle past the end (counted) instead of running out
    dataset: bool = False                  # given: a dataset, taken in order across the run


def synthetic_recipe(workload: WorkloadSpec, built: Workload) -> PromptRecipe:
    per_word = built.accuracy.get("tokens_per_word") if built.token_source == TOKEN_SOURCE_SERVER_TOKENIZER else None
    prefixes = ([Prompt(t, c, 0) for t, c in zip(built.prefixes.texts, built.prefixes.counts, strict=True)]
                if built.prefixes is not None else [])
    return PromptRecipe(kind="synthetic", prompts=built.prompts, workload=workload, token_source=built.token_source,
                        tokens_per_word=float(per_word) if per_word else None, prefixes=prefixes)


class PromptSource:
    """The run's prompts: a feed per level (``feed``), built from the recipe (a tokenizer when it needs one)."""

    def __init__(self, recipe: PromptRecipe, tokenizer: LocalTokenizer | None = None) -> None:
        if recipe.kind == "synthetic" and recipe.workload is None:
            raise ValueError("a synthetic prompt recipe needs its workload")
        if recipe.kind == "given" and not recipe.prompts:
            raise ValueError("a prompt source needs at least one prompt")
        self.recipe = recipe
        self.tokenizer = tokenizer if recipe.token_source == TOKEN_SOURCE_TOKENIZER else None
        if recipe.kind == "synthetic" and recipe.token_source == TOKEN_SOURCE_TOKENIZER and self.tokenizer is None:
            assert recipe.workload is not None and recipe.workload.tokenizer is not None
            self.tokenizer = LocalTokenizer.load(recipe.workload.tokenizer)
        self._lock = threading.Lock()   # chunks are built in threads, one at a time
        self._candidates: Candidates | None = None
        self._sampler: LengthSampler | None = None

    @classmethod
    def given(cls, prompts: list[Prompt], *, by_design: str | None = None, reuse: bool = True,
              dataset: bool = False) -> PromptSource:
        return cls(PromptRecipe(prompts=prompts, by_design=by_design, reuse=reuse, dataset=dataset))

    @property
    def size(self) -> int | None:
        """How many prompts there are before a given list runs out or repeats (None: no end)."""
        return None if self.recipe.kind == "synthetic" else len(self.recipe.prompts)

    def feed(self, key: LevelKey, *, ahead: int) -> PromptFeed:
        r = self.recipe
        if r.kind == "given":
            return ListFeed(r.prompts, start=key.dataset_from if r.dataset else 0, reuse=r.reuse,
                            by_design=r.by_design, dataset=r.dataset)
        assert r.workload is not None
        words = ((r.workload.seed, _BASE) if key.base else
                 (r.workload.seed, _LEVEL, zlib.crc32(key.label.encode()), key.attempt, key.repeat))

        async def build(number: int) -> tuple[list[Prompt], int]:
            return await asyncio.to_thread(self.chunk, words, number)

        return ChunkedFeed(build, head=r.prompts if key.base else (), ahead=ahead,
                           prefix_counts=[p.prompt_tokens for p in r.prefixes])

    def chunk(self, stream: tuple[int, ...], number: int, size: int | None = None) -> tuple[list[Prompt], int]:
        """Chunk ``number`` of a stream: its prompts and how many missed their length (pure in its inputs)."""
        w = self.recipe.workload
        assert w is not None
        rng = np.random.default_rng([*stream, number])
        with self._lock:
            if self._sampler is None:
                self._sampler = LengthSampler(w, rng)
            self._sampler.reseed(rng)
            inputs, outputs = self._sampler.draw(size or CHUNK)
            if w.prompt_salt is not None:   # the lengths from the seed, the text from the run's salt too
                rng = np.random.default_rng([*stream, number, w.prompt_salt])
            texts, counts, misses = self._texts(inputs, rng)
            groups = [-1] * len(texts)
            if self.recipe.prefixes:
                texts, counts, groups = self._prefixes().attach(texts, counts, rng)
                wanted = [i + self.recipe.prefixes[g].prompt_tokens for i, g in zip(inputs, groups, strict=True)]
                misses = sum(c != t for c, t in zip(counts, wanted, strict=True))
        return [Prompt(t, c, o, g) for t, c, o, g in zip(texts, counts, outputs, groups, strict=True)], misses

    def _texts(self, targets: list[int], rng: np.random.Generator) -> tuple[list[str], list[int], int]:
        if self.tokenizer is not None:
            if self._candidates is None:
                assert self.recipe.workload is not None
                self._candidates = candidate_ids(self.tokenizer,
                                                 np.random.default_rng([self.recipe.workload.seed, _CANDIDATES]))
            exact = exact_texts(self.tokenizer, targets, rng, self._candidates, CHUNK_VERIFY_TOKENS)
            return exact.texts, exact.counts, exact.misses
        if self.recipe.tokens_per_word is not None:
            return calibrated_texts(targets, self.recipe.tokens_per_word, rng), list(targets), 0
        return estimate_texts(targets, rng), list(targets), 0

    def _prefixes(self) -> SharedPrefixes:
        p = self.recipe.prefixes
        return SharedPrefixes([x.text for x in p], [x.prompt_tokens for x in p], self.tokenizer or EstimateCounter(),
                              {})
