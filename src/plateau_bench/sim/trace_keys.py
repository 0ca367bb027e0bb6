"""Block keys for a trace replayed in virtual time: the reuse its hash ids record, as the engine sees it.

A Mooncake hash id names one 512-token block of a prompt (``workload.trace``), so requests that share
an id share those 512 tokens: here each of its 32 blocks of 16 tokens gets a key made of the id and
the block's place in it, the same for every request naming the id (a cut last block keeps the keys of
its leading blocks). Every other block (tokens beyond the named ones, the answer) gets a key of its
own. Rows without hash ids get none: nothing to reuse.
"""

from __future__ import annotations

from plateau_bench.workload.trace import HASH_BLOCK_TOKENS, Trace


def trace_block_keys(trace: Trace, block_size: int) -> list[list[int] | None]:
    """One list of keys per row (None: the row names no hash ids)."""
    per_id = HASH_BLOCK_TOKENS // block_size
    own = -1
    out: list[list[int] | None] = []
    for row in trace.rows:
        if not row.hash_ids:
            out.append(None)
            continue
        shared = min(row.input_len // block_size, len(row.hash_ids) * per_id)
        keys = [hash((row.hash_ids[i // per_id], i % per_id)) & ((1 << 62) - 1) for i in range(shared)]
        total = (row.input_len + row.output_len) // block_size
        keys.extend(range(own, own - (total - shared), -1))
        own -= max(total - shared, 0)
        out.append(keys)
    return out
