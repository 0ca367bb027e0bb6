"""Sharing one level between load processes: exact splits, the open-loop schedule, the ``auto`` count.

* **Closed loop**: ``C`` workers over ``N`` processes as ``C // N`` each and one more for the first
  ``C % N``: the shares sum to ``C`` exactly (no process rounds a worker away). A burst's
  ``num_requests`` and the warm-up follow the same split, the requests in proportion to the workers
  (largest remainders), so with ``num_requests == C`` every process sends exactly its workers' one
  request each.
* **Open loop**: the arrival schedule is drawn once (``workload.arrivals``, the level's seed) up to
  the level's duration or request count, and dealt out round-robin: arrival ``n`` goes to process
  ``n % N`` and keeps index ``n``. A ``max_concurrency`` bound is split like ``C``; each process holds
  its part, which equals one global bound while the arrivals spread evenly.
* **auto**: one process per ``STREAMS_PER_WORKER`` streams of the level (its concurrency, its
  ``max_concurrency``, else its rate in requests/s), at most the pool's size, which is the usable cores.

Pure functions: the pool (``driver.pool``) calls them and sends each process its ``WorkerLevel``.
"""

from __future__ import annotations

import math
import os

import msgspec

from plateau_bench.driver.load_state import LoadShare
from plateau_bench.spec import LevelSpec
from plateau_bench.units import NS
from plateau_bench.workload.arrivals import iter_arrival_offsets_ns

STREAMS_PER_WORKER = 512   # a process streams a few thousand connections before its loop lags


class WorkerLevel(msgspec.Struct, frozen=True, kw_only=True):
    """What one load process runs of a level: its own ``LevelSpec`` and where its part lies."""

    level: LevelSpec
    share: LoadShare


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` into ``parts`` integers differing by at most one, summing to ``total``."""
    if parts <= 0:
        raise ValueError(f"parts must be >= 1 (got {parts})")
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_in_proportion(total: int, weights: list[int]) -> list[int]:
    """``total`` in proportion to ``weights`` (largest remainders), summing to ``total`` exactly."""
    whole = sum(weights)
    if whole <= 0:
        return split_evenly(total, len(weights))
    exact = [total * w / whole for w in weights]
    shares = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (shares[i] - exact[i], i))
    for i in by_remainder[: total - sum(shares)]:
        shares[i] += 1
    return shares


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def level_streams(level: LevelSpec) -> int:
    """How many streams a level holds at most, as far as its spec says."""
    if level.concurrency:
        return level.concurrency
    if level.max_concurrency:
        return level.max_concurrency
    return math.ceil(level.rate or 1.0)


def auto_workers(level: LevelSpec, pool_size: int) -> int:
    """The processes ``--workers auto`` gives a level: one per ``STREAMS_PER_WORKER`` streams, within the pool."""
    return max(1, min(pool_size, math.ceil(level_streams(level) / STREAMS_PER_WORKER)))


def schedule_ns(level: LevelSpec, seed: int) -> list[int]:
    """The open-loop level's arrival offsets, drawn once: up to its duration and its request count."""
    assert level.rate is not None
    limit = level.num_requests
    deadline = int(level.duration_s * NS) if level.duration_s is not None else None
    out: list[int] = []
    for offset in iter_arrival_offsets_ns(level.rate, burstiness=level.burstiness, seed=seed):
        if (limit is not None and len(out) >= limit) or (deadline is not None and offset >= deadline):
            break
        out.append(offset)
    return out


def split_level(level: LevelSpec, processes: int, seed: int) -> list[WorkerLevel]:
    """Each process's part of ``level`` (fewer parts than ``processes`` when the level is smaller)."""
    if level.mode == "rate":
        return _split_open(level, processes, seed)
    assert level.concurrency is not None
    n = max(1, min(processes, level.concurrency))
    workers = split_evenly(level.concurrency, n)
    total = level.total_requests()
    requests = split_in_proportion(total, workers) if total is not None else [None] * n
    warmups = split_in_proportion(level.warmup, workers)
    parts, worker_base = [], 0
    for i in range(n):
        part = msgspec.structs.replace(level, concurrency=workers[i], warmup=warmups[i],
                                       num_requests=requests[i] if level.num_requests is not None or
                                       level.mode == "burst" else None)
        parts.append(WorkerLevel(level=part, share=LoadShare(index_base=i, index_stride=n, worker_base=worker_base)))
        worker_base += workers[i]
    return [p for p in parts if p.level.total_requests() != 0]


def _split_open(level: LevelSpec, processes: int, seed: int) -> list[WorkerLevel]:
    arrivals = schedule_ns(level, seed)
    n = max(1, min(processes, len(arrivals), level.max_concurrency or processes))
    bounds = split_evenly(level.max_concurrency, n) if level.max_concurrency else [None] * n
    warmups = split_evenly(level.warmup, n)
    parts = []
    for i in range(n):
        mine = arrivals[i::n]
        part = msgspec.structs.replace(level, max_concurrency=bounds[i] or None, warmup=warmups[i],
                                       num_requests=len(mine) if level.num_requests is not None else None)
        parts.append(WorkerLevel(level=part, share=LoadShare(index_base=i, index_stride=n, arrivals=mine)))
    return parts
