"""Automatic prefix caching, as vLLM v1 does it, counted in blocks.

A request's token sequence is cut into full blocks of ``block_size`` tokens; block ``i`` is keyed
by the hash of (key of block ``i - 1``, the tokens of block ``i``), so equal keys mean equal
prefixes (``block_hashes``). The cache maps keys to blocks:

* a block referenced by running requests counts once in the engine's used blocks, however many
  requests share it;
* a cached block nobody references sits in the free queue: it counts as free (vLLM's KV usage does
  not count it) but keeps its contents until a new allocation needs the room; the queue's head, the
  least recently freed, is evicted first, and a request's blocks are queued tail first, so its last
  blocks go before its first (as vLLM frees them in reverse order).

On admission the engine looks up the longest run of leading blocks that are cached, at most
``(tokens - 1) // block_size`` of them (the last token is always computed, to sample from it): those
tokens skip prefill and their blocks are shared. The blocks a request's prefill covers are
registered as it is scheduled, so a request admitted later in the same step already finds them; a
finished (or preempted) request's other full blocks (its generated tokens) join the free queue
cached. ``queries`` and ``hits`` count tokens of first admissions, as ``vllm:prefix_cache_queries``
and ``vllm:prefix_cache_hits`` do (vLLM counts the lookups of preempted requests apart).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The chain keys of the full blocks of ``token_ids``."""
    keys: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        keys.append(parent)
    return keys


class PrefixCache:
    """Keys of cached blocks: referenced ones with their reference counts, then the free queue."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()
        self.queries = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self.refs) + len(self.free)

    def lookup(self, keys: Sequence[int], limit: int) -> int:
        """How many of the first ``limit`` keys are cached, in a row from the first."""
        refs, free = self.refs, self.free
        n = 0
        for key in keys[:limit]:
            if key not in refs and key not in free:
                break
            n += 1
        return n

    def acquire(self, keys: Iterable[int]) -> int:
        """Reference cached blocks; returns how many came back from the free queue (now used again)."""
        refs, free = self.refs, self.free
        revived = 0
        for key in keys:
            count = refs.get(key)
            if count is None:
                del free[key]
                refs[key] = 1
                revived += 1
            else:
                refs[key] = count + 1
        return revived

    def register(self, key: int) -> bool:
        """A block just allocated to a request holds ``key``: cache it, referenced, unless cached already."""
        if key in self.refs or key in self.free:
            return False
        self.refs[key] = 1
        return True

    def release(self, keys: Sequence[int]) -> int:
        """Drop one reference to each block; returns how many nobody references any more (now free)."""
        refs, free = self.refs, self.free
        freed = 0
        for key in reversed(keys):
            count = refs[key] - 1
            if count:
                refs[key] = count
            else:
                del refs[key]
                free[key] = None
                freed += 1
        return freed

    def keep_freed(self, keys: Iterable[int]) -> None:
        """Blocks a request leaves behind unreferenced (its generated tokens): cache them as free."""
        refs, free = self.refs, self.free
        for key in keys:
            if key not in refs and key not in free:
                free[key] = None

    def evict(self, room: int) -> None:
        """Keep at most ``room`` blocks in the free queue (the rest of the free blocks are allocated)."""
        free = self.free
        while len(free) > room:
            free.popitem(last=False)
