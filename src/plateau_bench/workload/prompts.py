"""The prompts of a run: synthetic with exact lengths, or read from a dataset.

Lengths: fixed, spread by ``--range-ratio`` under a ``--length-convention``, or drawn from a
distribution; see ``lengths``.

Determinism: one ``numpy`` generator seeded with ``--seed`` draws, in this order, the input
lengths, the output lengths, then the text. The same seed and the same tokenizer (or the same
server answers) therefore give the same prompts, byte for byte. A ``prompt_salt`` (the CLI draws one
per run and records it) draws the text from a generator of its own: the same lengths, new text.

How text is made depends on the counter (see ``tokens``): ``tokenized`` for a local tokenizer
(exact), ``wordtext`` for the server's ``/tokenize`` (exact where verified) and for the estimate.
Datasets are shuffled with the seed and counted with the same counter (with ``/tokenize``, one call
per prompt used, minus the special tokens the endpoint adds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload.dataset import load_dataset
from plateau_bench.workload.lengths import LengthSampler
from plateau_bench.workload.prefixes import SharedPrefixes, shared_prefixes
from plateau_bench.workload.tokenized import exact_texts
from plateau_bench.workload.tokens import LocalTokenizer, RemoteCounter, TokenCounter
from plateau_bench.workload.wordtext import estimate_texts, remote_texts


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input. ``prompt_tokens`` is exact, or expected when the source is an estimate."""

    text: str
    prompt_tokens: int
    output_tokens: int
    prefix_group: int = -1   # which shared prefix it starts with (--prefix-groups), -1: none


@dataclass(frozen=True)
class Workload:
    """The prompts plus how their counts were obtained and how accurate they are."""

    prompts: list[Prompt]
    token_source: str
    accuracy: dict[str, Any] = field(default_factory=dict)
    prefixes: SharedPrefixes | None = None   # --prefix-groups: the shared prefixes, for prompts built later


async def synthesize(workload: WorkloadSpec, n: int, *, counter: TokenCounter) -> Workload:
    """Build the first ``n`` prompts; with a dataset, every entry of it in its shuffled order (``n``
    ignored: a run takes them in order, ``workload.feed``). Later synthetic prompts are built as the
    run needs them (``workload.feed``)."""
    workload.validate()
    rng = np.random.default_rng(workload.seed)
    if workload.dataset:
        return await _from_dataset(workload, counter, rng)
    inputs, outputs = LengthSampler(workload, rng).draw(n)
    rng = text_rng(workload, rng)
    texts, counts, accuracy = await make_texts(counter, inputs, rng)
    groups: list[int] = [-1] * len(texts)
    shared = None
    if workload.prefix_groups:
        shared = await shared_prefixes(counter, workload.prefix_groups, workload.prefix_len, rng, make_texts)
        texts, counts, groups = shared.attach(texts, counts, rng)
        accuracy = {**accuracy, **shared.accuracy}
    prompts = [Prompt(t, c, o, g) for t, c, o, g in zip(texts, counts, outputs, groups, strict=True)]
    return Workload(prompts, counter.source, accuracy, shared)


def text_rng(workload: WorkloadSpec, rng: np.random.Generator) -> np.random.Generator:
    """The generator the prompts' text is drawn from, once their lengths are drawn from ``rng``: ``rng``
    itself (everything from ``--seed``), or, with a ``prompt_salt``, one of the salt's own, so that each
    run sends text no earlier run sent (a server's prefix cache outlives a run) with the same lengths."""
    if workload.prompt_salt is None:
        return rng
    return np.random.default_rng([workload.seed, workload.prompt_salt])


async def make_texts(counter: TokenCounter, targets: list[int],
                     rng: np.random.Generator) -> tuple[list[str], list[int], dict[str, Any]]:
    """Texts of ``targets`` tokens each, their counts, and how exact the counts are."""
    accuracy: dict[str, Any]
    if isinstance(counter, LocalTokenizer):
        exact = exact_texts(counter, targets, rng)
        texts, counts = exact.texts, exact.counts
        accuracy = {
            "method": "token ids, exact by construction" if exact.rounds == 0
            else "token ids, decode/re-encode corrected",
            "misses": exact.misses,
            "rounds": exact.rounds,
            "verified": exact.verified,
            "pool_tokens": exact.pool_tokens,
            "candidate_tokens": exact.candidates,
        }
    elif isinstance(counter, RemoteCounter):
        texts, counts, accuracy = await remote_texts(counter, targets, rng)
    else:
        texts, counts = estimate_texts(targets, rng), list(targets)
        accuracy = {"method": "words, one token per word expected"}
    return texts, counts, accuracy


async def _from_dataset(
    workload: WorkloadSpec, counter: TokenCounter, rng: np.random.Generator
) -> Workload:
    assert workload.dataset is not None
    entries = load_dataset(workload.dataset)
    order = rng.permutation(len(entries))
    chosen = [entries[int(i)] for i in order]
    counts = await counter.count_many([e.prompt for e in chosen])
    if isinstance(counter, RemoteCounter):
        # /tokenize counts the special tokens the server adds; take them off, as for synthetic prompts.
        # Some one-character text is a single token in any vocabulary: the smallest count is 1 + specials.
        special = max(min(await counter.count_many(["a", "!", ".", ","])) - 1, 0)
        counts = [max(c - special, 1) for c in counts]
    prompts: list[Prompt] = []
    for entry, count in zip(chosen, counts, strict=True):
        output = entry.output_len
        if output is None and entry.reference_output is not None and isinstance(counter, LocalTokenizer):
            output = max(1, counter.count_text(entry.reference_output))
        prompts.append(Prompt(entry.prompt, count, output or workload.output_len))
    return Workload(prompts, counter.source, {"method": "dataset", "dataset": workload.dataset,
                                              "entries": len(entries)})


async def build_prompts(workload: WorkloadSpec, n: int, *, counter: TokenCounter) -> list[Prompt]:
    """The prompts alone; see ``synthesize`` for the accuracy report."""
    return (await synthesize(workload, n, counter=counter)).prompts
