"""Block keys for shared prefixes in virtual time (``plateau sim --prefix-groups G --prefix-len P``).

The virtual-time runner has token counts, not tokens, so it gives the engine the block keys those
tokens would have (``prefix_cache``): every request of group g starts with the same ``P // block``
keys, one per full block of the group's prefix, and every later block of its prompt and answer has
a key of its own (the block that straddles prefix and suffix holds the request's own tokens, so it
is its own too). Groups are drawn uniformly with the workload's seed, as over HTTP.
"""

from __future__ import annotations

import numpy as np

_DRAWS = 4096
_GROUP_STRIDE = 1 << 32   # group g's prefix keys are g * stride + i + 1: positive, never a request's own


class SharedPrefixKeys:
    def __init__(self, groups: int, prefix_len: int, block_size: int, seed: int) -> None:
        self.prefix_len = prefix_len
        self.block_size = block_size
        self.prefix_blocks = prefix_len // block_size
        self.groups = groups
        self._keys = [[g * _GROUP_STRIDE + i + 1 for i in range(self.prefix_blocks)] for g in range(groups)]
        self._rng = np.random.default_rng(seed)
        self._drawn: list[int] = []
        self._own = -1   # keys of a request's own blocks count down from -1

    def keys(self, prompt_tokens: int, output_tokens: int) -> list[int]:
        """The keys of the full blocks of a request whose prompt (shared prefix included) and answer
        have these many tokens."""
        if not self._drawn:
            self._drawn = [int(g) for g in self._rng.integers(0, self.groups, _DRAWS)][::-1]
        group = self._drawn.pop()
        own = (prompt_tokens + output_tokens) // self.block_size - self.prefix_blocks
        start = self._own
        self._own -= max(own, 0)
        return self._keys[group] + list(range(start, self._own, -1))
