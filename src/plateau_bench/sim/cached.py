"""The engine's side of prefix caching: admission with cache hits, registration, release.

Only requests that carry their block keys (``SimRequest.hashes``) go through here; every other
request takes the scheduler's plain path unchanged. A request's blocks split in two: those it holds
through the cache (``shared``, counted once in the used blocks however many requests share them)
and its private ones (``blocks - len(shared)``). See ``prefix_cache`` for the model.
"""

from __future__ import annotations

from plateau_bench.sim.core import EngineCore
from plateau_bench.sim.request import SimRequest


class PrefixCaching(EngineCore):
    """Cache-aware admission and release, mixed into the scheduler and the committer."""

    def _admit_cached(self, req: SimRequest, budget: int, free: int) -> tuple[int, int, int] | None:
        """Admit ``req`` with its cached prefix: ``(chunk, blocks taken from the free ones, hit tokens)``,
        or None when its blocks do not fit (``self._need`` then says how many it needed)."""
        cache = self._cache
        hashes = req.hashes
        assert cache is not None and hashes is not None
        bs = self._bs
        cache.evict(free)
        total = req.prompt + req.sent
        hit_blocks = cache.lookup(hashes, (total - 1) // bs)
        hit = hit_blocks * bs
        chunk = min(total - hit, budget)
        keys = hashes[:hit_blocks]
        revived = sum(1 for k in keys if k in cache.free)
        new_blocks = -(-(hit + chunk) // bs) - hit_blocks
        if new_blocks + revived > free:
            self._need = new_blocks + revived
            return None
        cache.acquire(keys)
        cache.evict(free - new_blocks - revived)
        if req.preemptions == 0:
            cache.queries += total
            cache.hits += hit
        req.shared = list(keys)
        req.registered = hit_blocks
        req.computed = hit
        req.blocks = hit_blocks + new_blocks
        self._register(req, hit + chunk)
        return chunk, new_blocks + revived, hit

    def _register(self, req: SimRequest, covered: int) -> None:
        """Cache the blocks that the tokens up to ``covered`` fill, as their prefill is scheduled."""
        cache = self._cache
        hashes = req.hashes
        assert cache is not None and hashes is not None
        full = min(covered // self._bs, len(hashes))
        shared = req.shared
        for i in range(req.registered, full):
            if cache.register(hashes[i]):
                shared.append(hashes[i])
        if full > req.registered:
            req.registered = full

    def _freed(self, req: SimRequest, blocks: int, computed: int) -> int:
        """A request gives up its ``blocks`` (``computed`` tokens in KV): the used blocks this frees.

        Shared blocks free only when nobody else holds them; its other full blocks stay cached.
        """
        cache = self._cache
        hashes = req.hashes
        if hashes is None or cache is None:
            return blocks
        full = min(computed // self._bs, len(hashes))
        if full > req.registered:
            cache.keep_freed(reversed(hashes[req.registered:full]))
        shared = req.shared
        freed = blocks - len(shared) + cache.release(shared)
        req.shared = []
        req.registered = 0
        return freed

    def _trim_cache(self) -> None:
        """Evict what the step's allocations took from the free queue."""
        cache = self._cache
        if cache is not None and cache.free:
            cache.evict(self._num_blocks - self._blocks_used)
