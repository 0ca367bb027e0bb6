"""Prefix caching in the engine: hit rates against the analytic value, skipped prefill, shared KV, LRU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, SimRequest
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.prefix_cache import PrefixCache, block_hashes
from plateau_bench.sim.replicas import ReplicaSet
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import LevelSpec, WorkloadSpec

BS = 16


def config(kv_tokens: int = 4_000_000, cap: int = 256, caching: bool = True, budget: int = 16384) -> EngineConfig:
    return EngineConfig(name="cache", step=StepModel(t0=5e-3, a=1e-4, b=2e-5, c=1e-8), max_num_seqs=cap,
                        max_num_batched_tokens=budget, kv_tokens=kv_tokens, prefix_caching=caching)


class Tokens:
    """Token ids: each group's prefix is the same, everything else is new (as different random text)."""

    def __init__(self) -> None:
        self.next_id = 10_000_000

    def fresh(self, n: int) -> list[int]:
        start = self.next_id
        self.next_id += n
        return list(range(start, start + n))


def prefix_ids(group: int, length: int) -> list[int]:
    return [group * 100_000 + i for i in range(length)]


def submit(engine: Engine, ids: list[int], output: int, tokens: Tokens, arrival: float = 0.0) -> SimRequest:
    full = ids + tokens.fresh(output)
    return engine.submit(len(ids), output, arrival=arrival, block_hashes=block_hashes(full, BS))


def test_block_keys_are_a_chain() -> None:
    a = block_hashes(list(range(40)), BS)
    assert len(a) == 2   # full blocks only
    b = block_hashes(list(range(32)) + [7] * 8, BS)
    assert a == b[:2]
    c = block_hashes([99, *range(1, 40)], BS)
    assert not set(a) & set(c)   # a change in block 0 changes every later key


@pytest.mark.parametrize(("groups", "n", "prefix", "suffix"), [(8, 2000, 500, 100), (64, 600, 1024, 40),
                                                               (1, 300, 100, 300)])
def test_hit_rate_for_g_groups_equals_the_analytic_value(groups: int, n: int, prefix: int, suffix: int) -> None:
    rng = np.random.default_rng(groups)
    engine = Engine(config())
    tokens = Tokens()
    for group in rng.integers(0, groups, n):
        submit(engine, prefix_ids(int(group), prefix) + tokens.fresh(suffix), 32, tokens)
    engine.run()
    state = engine.state()
    # The first request of each group computes its prefix; every later one finds its full blocks cached.
    seen = groups * (1 - (1 - 1 / groups) ** n)
    analytic = (n - seen) * (prefix // BS * BS) / (n * (prefix + suffix))
    measured = state.prefix_cache_hits / state.prefix_cache_queries
    assert state.prefix_cache_queries == n * (prefix + suffix)
    assert measured == pytest.approx(analytic, rel=0.02)
    assert state.kv_blocks_used == 0 and not engine._cache.refs  # type: ignore[union-attr]


def test_hits_skip_prefill() -> None:
    tokens = Tokens()
    ttft = {}
    for caching in (True, False):
        engine = Engine(config(caching=caching))
        first = submit(engine, prefix_ids(0, 4000) + tokens.fresh(16), 4, tokens)
        engine.run()
        second = submit(engine, prefix_ids(0, 4000) + tokens.fresh(16), 4, tokens, arrival=engine.now)
        engine.run()
        ttft[caching] = (second.first_token - second.arrival, first.first_token - first.arrival)
    cold, warm = ttft[True][1], ttft[True][0]
    assert ttft[False][0] == pytest.approx(cold)              # no cache: the second pays the full prefill
    # 4000 prefix tokens: 250 blocks, all cached; only the last 16 tokens are computed (b = 20 us/token).
    assert cold - warm == pytest.approx(4000 * 2e-5, rel=0.05)


def test_shared_prefixes_share_kv_blocks() -> None:
    tokens = Tokens()
    engine = Engine(config())
    for _ in range(10):
        submit(engine, prefix_ids(3, 1600) + tokens.fresh(32), 200, tokens)
    engine.run_until(0.05)   # admitted and decoding
    state = engine.state()
    assert state.running == 10
    # 100 shared prefix blocks once, plus per request 2 suffix blocks and the decoded tokens' blocks.
    per_request = math.ceil((32 + engine.sent_tokens(next(iter(engine._running.values())))) / BS)
    assert state.kv_blocks_used <= 100 + 10 * (per_request + 1)
    assert state.kv_blocks_used < 10 * 100


def _unique_run(kv_tokens: int, hashed: bool) -> tuple[list[tuple[float, float]], float]:
    """400 requests of all-different tokens: (first token, end) each, and the first preemption's time."""
    rng = np.random.default_rng(5)
    engine = Engine(config(kv_tokens=kv_tokens, cap=64, budget=2048), trace=True)
    tokens = Tokens()
    reqs = []
    for i, (p, o) in enumerate(zip(rng.integers(20, 900, 400), rng.integers(1, 200, 400), strict=True)):
        ids = tokens.fresh(int(p))
        hashes = block_hashes(ids + tokens.fresh(int(o)), BS) if hashed else None
        reqs.append(engine.submit(int(p), int(o), arrival=i * 0.01, block_hashes=hashes))
    engine.run()
    assert engine.trace is not None
    first_preemption = min((row.t_start for row in engine.trace if row.preempted), default=math.inf)
    return [(r.first_token, r.end) for r in reqs], first_preemption


def test_without_hits_the_cache_changes_nothing() -> None:
    plain, never = _unique_run(4_000_000, hashed=False)
    assert never == math.inf
    assert _unique_run(4_000_000, hashed=True)[0] == plain
    # Short of KV: the same schedule until the first preemption (after it, a preempted request finds
    # its own blocks cached when it comes back, as in vLLM, and recomputes less).
    plain, first = _unique_run(36_000, hashed=False)
    hashed, first_hashed = _unique_run(36_000, hashed=True)
    assert first == first_hashed < math.inf
    before = [i for i, (_, end) in enumerate(plain) if end <= first]
    assert len(before) > 40
    assert [hashed[i] for i in before] == [plain[i] for i in before]


def test_no_prefix_cache_turns_it_off() -> None:
    engine = Engine(config(caching=False))
    tokens = Tokens()
    for _ in range(20):
        submit(engine, prefix_ids(0, 320) + tokens.fresh(8), 8, tokens)
    engine.run()
    assert engine.state().prefix_cache_queries == 0 and engine.state().prefix_cache_hits == 0


def test_lru_evicts_the_least_recently_freed_tail_first() -> None:
    cache = PrefixCache()
    assert [cache.register(k) for k in (1, 2, 3)] == [True, True, True]
    assert cache.register(2) is False
    assert cache.release([1, 2, 3]) == 3
    assert list(cache.free) == [3, 2, 1]          # tail first
    cache.keep_freed([9])
    cache.evict(3)
    assert list(cache.free) == [2, 1, 9]
    assert cache.lookup([3, 2], 5) == 0 and cache.lookup([2, 1, 7], 5) == 2 and cache.lookup([2, 1], 1) == 1
    assert cache.acquire([2]) == 1 and cache.refs == {2: 1}


def test_a_small_cache_evicts_and_hits_less() -> None:
    rates = {}
    for kv in (4_000_000, 16_000):
        engine = Engine(config(kv_tokens=kv, cap=32))
        tokens = Tokens()
        rng = np.random.default_rng(1)
        for i, group in enumerate(rng.integers(0, 40, 800)):
            submit(engine, prefix_ids(int(group), 960) + tokens.fresh(64), 16, tokens, arrival=i * 0.002)
        engine.run()
        state = engine.state()
        rates[kv] = state.prefix_cache_hits / state.prefix_cache_queries
        assert state.kv_blocks_used == 0
    assert 0 < rates[16_000] < 0.8 * rates[4_000_000]   # 40 prefixes of 60 blocks, room for 1,000 blocks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 80), st.integers(1, 40), st.integers(1, 60)),
                min_size=1, max_size=40),
       st.integers(8, 40), st.integers(1, 8), st.sampled_from(["mixed", "prefill_first"]))
def test_accounting_holds_under_sharing_and_preemption(requests: list[tuple[int, int, int, int]],
                                                       kv_blocks: int, cap: int, policy: str) -> None:
    longest = max(p + s + o for _, p, s, o in requests)
    kv = max(kv_blocks, math.ceil(longest / BS) + 1) * BS
    cfg = EngineConfig(name="prop", step=StepModel(t0=1e-3, a=1e-4, b=1e-5, c=0.0), max_num_seqs=cap,
                       max_num_batched_tokens=cap + 64, kv_tokens=kv, policy=policy)  # type: ignore[arg-type]
    engine = Engine(cfg, trace=True)
    tokens = Tokens()
    reqs = [submit(engine, prefix_ids(g, p) + tokens.fresh(s), o, tokens, arrival=i * 1e-3)
            for i, (g, p, s, o) in enumerate(requests)]
    engine.run()
    assert engine.trace is not None
    assert all(0 <= row.kv_blocks_used <= cfg.num_gpu_blocks for row in engine.trace)
    assert all(r.end >= r.first_token >= r.arrival for r in reqs)
    assert [engine.sent_tokens(r) for r in reqs] == [o for _, _, _, o in requests]
    cache = engine._cache
    assert cache is not None and not cache.refs and engine.state().kv_blocks_used == 0
    assert len(cache.free) <= cfg.num_gpu_blocks


def test_virtual_time_prefix_groups_hit_as_analysed_and_run_faster() -> None:
    workload = WorkloadSpec(input_len=100, output_len=32, prefix_groups=16, prefix_len=1000, seed=3)
    level = LevelSpec(mode="burst", concurrency=64, num_requests=1500)
    cached = simulate_level(config(), level, workload)
    state = cached.state
    assert {r.prompt_tokens for r in cached.records} == {1100}
    seen = 16 * (1 - (1 - 1 / 16) ** 1500)
    analytic = (1500 - seen) * (1000 // BS * BS) / (1500 * 1100)
    assert state.prefix_cache_queries == 1500 * 1100
    assert state.prefix_cache_hits / state.prefix_cache_queries == pytest.approx(analytic, rel=0.02)
    uncached = simulate_level(config(caching=False), level, workload)
    assert uncached.state.prefix_cache_hits == 0
    assert max(r.end_ns for r in cached.records) < 0.6 * max(r.end_ns for r in uncached.records)


def test_each_replica_caches_what_was_sent_to_it() -> None:
    replicas = ReplicaSet(config(), 2, "round_robin")
    tokens = Tokens()
    for _ in range(8):
        ids = prefix_ids(0, 320) + tokens.fresh(16)
        req = replicas.submit(len(ids), 4)
        replicas.set_block_hashes(req, block_hashes(ids + tokens.fresh(4), BS))
    replicas.run()
    state = replicas.state()
    # round robin: each replica's first request of the prefix misses, its other three hit all 20 blocks
    assert state.prefix_cache_queries == 8 * 336 and state.prefix_cache_hits == 6 * 320
