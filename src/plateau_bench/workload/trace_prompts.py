"""Prompts for a trace: each row's recorded lengths, and shared blocks where it names hash ids.

A row without hash ids gets a prompt of its own of ``input_len`` tokens (built as every prompt is,
see ``prompts``). A row with hash ids (Mooncake's, one per 512-token block) is the concatenation of
one text per id, the same text wherever the id recurs, so equal ids give equal token blocks and a
server's prefix cache sees the reuse the trace recorded. The last block is cut to what is left of
``input_len`` (a prefix of that id's block: equal ids still share their leading tokens), and tokens
beyond the named blocks get a text of their own. Blocks are joined with a space; with a local
tokenizer the joined prompt is counted again (its true count is kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from plateau_bench.workload.prefixes import join
from plateau_bench.workload.prompts import Prompt, Workload, make_texts
from plateau_bench.workload.tokens import LocalTokenizer, TokenCounter
from plateau_bench.workload.trace import HASH_BLOCK_TOKENS, Trace, TraceRow


def _cut(counter: TokenCounter, text: str, tokens: int, per_word: float) -> str:
    """The first ``tokens`` tokens of ``text``."""
    if isinstance(counter, LocalTokenizer):
        return counter.decode_many([counter.encode(text)[:tokens]])[0]
    return " ".join(text.split()[:max(1, round(tokens / per_word))])


def _layout(row: TraceRow) -> tuple[list[int], int, int]:
    """(ids of the blocks used, tokens of the last one used, tokens beyond the named blocks)."""
    blocks = min(len(row.hash_ids), -(-row.input_len // HASH_BLOCK_TOKENS))
    beyond = max(0, row.input_len - blocks * HASH_BLOCK_TOKENS)
    last = row.input_len - (blocks - 1) * HASH_BLOCK_TOKENS - beyond if blocks else 0
    return list(row.hash_ids[:blocks]), last, beyond


async def trace_prompts(trace: Trace, *, counter: TokenCounter, seed: int | Sequence[int]) -> Workload:
    """One prompt per row of ``trace``, in its time order."""
    rng = np.random.default_rng(seed)
    layouts = [_layout(r) for r in trace.rows]
    own = [(i, r.input_len if not layouts[i][0] else layouts[i][2]) for i, r in enumerate(trace.rows)]
    own = [(i, n) for i, n in own if n > 0]
    own_texts, own_counts, accuracy = await make_texts(counter, [n for _, n in own], rng)
    ids = sorted({h for blocks, _, _ in layouts for h in blocks})
    block_texts, block_counts, block_accuracy = await make_texts(counter, [HASH_BLOCK_TOKENS] * len(ids), rng)
    per_word = float(block_accuracy.get("tokens_per_word", 1.0) or 1.0)
    by_id = dict(zip(ids, zip(block_texts, block_counts, strict=True), strict=True))
    mine = {i: (t, c) for (i, _), t, c in zip(own, own_texts, own_counts, strict=True)}
    prompts: list[Prompt] = []
    for i, (row, (blocks, last, _)) in enumerate(zip(trace.rows, layouts, strict=True)):
        parts: list[str] = []
        count = 0
        for k, h in enumerate(blocks):
            text, n = by_id[h]
            if k == len(blocks) - 1 and last < HASH_BLOCK_TOKENS:
                text, n = _cut(counter, text, last, per_word), last
            parts.append(text)
            count += n
        if i in mine:
            parts.append(mine[i][0])
            count += mine[i][1]
        text = parts[0]
        for part in parts[1:]:
            text = join(text, part)
        prompts.append(Prompt(text, count, row.output_len))
    if isinstance(counter, LocalTokenizer):
        measured = counter.encode_lengths([p.text for p in prompts])
        accuracy = {**accuracy, "trace_misses": sum(m != p.prompt_tokens for m, p in zip(measured, prompts,
                                                                                          strict=True))}
        prompts = [Prompt(p.text, m, p.output_tokens) for p, m in zip(prompts, measured, strict=True)]
    info: dict[str, Any] = {"trace_format": trace.format, "trace_requests": len(prompts), "trace_blocks": len(ids)}
    return Workload(prompts, counter.source, {**accuracy, **info})
