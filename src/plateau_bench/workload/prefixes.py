"""Shared prefixes (``--prefix-groups G --prefix-len P``): G system prompts of P tokens each.

Every request starts with one of the G prefixes, picked uniformly at random (seeded), and goes on
with its own suffix of ``--input-len`` tokens, so its prompt has P + suffix tokens. This is vLLM's
``--random-prefix-len`` (G = 1) and SGLang's generated-shared-prefix dataset (G system prompts):
a server with prefix caching computes each prefix once and reuses it.

Exact lengths: the prefixes and the suffixes are each built to their exact lengths, the way every
prompt is (a local tokenizer, the server's ``/tokenize``, or words; see ``prompts``), then joined
with one space when the suffix does not start with whitespace. With a local tokenizer the joined
text is re-encoded and its true count kept; joins whose count is not P + suffix (a token merged
across the boundary) are reported as ``prefix_join_misses``. With ``/tokenize`` and the estimate
the count is the sum of the parts: words separated by spaces are tokens of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from plateau_bench.workload.tokens import LocalTokenizer, TokenCounter

MakeTexts = Callable[[TokenCounter, list[int], np.random.Generator],
                     Awaitable[tuple[list[str], list[int], dict[str, Any]]]]


def join(prefix: str, suffix: str) -> str:
    return prefix + suffix if suffix[:1].isspace() else f"{prefix} {suffix}"


@dataclass(frozen=True)
class SharedPrefixes:
    """The G prefix texts and their exact counts; ``attach`` puts one in front of each prompt."""

    texts: list[str]
    counts: list[int]
    counter: TokenCounter
    accuracy: dict[str, Any]

    def attach(self, texts: list[str], counts: list[int],
               rng: np.random.Generator) -> tuple[list[str], list[int], list[int]]:
        """(joined texts, their counts, each prompt's group)."""
        groups = [int(g) for g in rng.integers(0, len(self.texts), len(texts))]
        joined = [join(self.texts[g], t) for g, t in zip(groups, texts, strict=True)]
        expected = [self.counts[g] + c for g, c in zip(groups, counts, strict=True)]
        if isinstance(self.counter, LocalTokenizer):
            measured = self.counter.encode_lengths(joined)
            self.accuracy["prefix_join_misses"] = sum(m != e for m, e in zip(measured, expected, strict=True))
            return joined, measured, groups
        return joined, expected, groups


async def shared_prefixes(counter: TokenCounter, groups: int, length: int, rng: np.random.Generator,
                          make_texts: MakeTexts) -> SharedPrefixes:
    """G prefixes of ``length`` tokens, each different from the others from its first tokens on."""
    texts, counts, built = await make_texts(counter, [length] * groups, rng)
    accuracy: dict[str, Any] = {
        "prefix_groups": groups,
        "prefix_len": length,
        "prefix_exact": sum(c == length for c in counts),
        "prefix_method": built.get("method", ""),
    }
    return SharedPrefixes(texts, counts, counter, accuracy)
