"""When new closed-loop workers join a running load, and how long a request cycle will be there.

Warm levels (``analysis.warm``) change the number of workers while the server stays loaded. Workers
that join all at once would start their requests together, and a deterministic engine (the twin) or a
scheduler that batches admissions (a real one) keeps such a wave: prefills together, short contexts
together, ends together. These pure functions spread the joins over one request cycle instead, for the
twin's loop (``sim.warm``) and the HTTP driver's alike.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

JOIN_SPAN_MAX = 1.5   # joins spread over at most this many predicted request cycles


def join_times(now: float, restarts: Sequence[float], joining: int, cycle: float) -> list[float]:
    """When ``joining`` new workers should send their first requests, so that with the ``restarts`` of the
    workers already running (when each will send its next request, estimated) the starts are as evenly
    spread over one request cycle as they can be: each goes into the widest gap left between the starts
    planned so far (cyclically: a gap running past ``now + cycle`` wraps round to the cycle's start).

    Requests that start together prefill together, decode with contexts of the same length and end
    together, and a deterministic engine repeats the wave every cycle; spread like this, the batch holds
    every age of request in its steady share once the last worker joined, whatever the old workers' spread
    was (all in one wave after a synchronised start, or already even).
    """
    if joining <= 0:
        return []
    # The running requests' restarts stretch the span to the latest of them, but not past 1.5 predicted
    # cycles: one request slowed early (its pace read from a few tokens) would spread the joins over minutes.
    latest = max(restarts, default=now) - now
    cycle = max(cycle, min(latest, JOIN_SPAN_MAX * cycle) if cycle > 0 else latest, 1e-9)
    points = sorted(min(max(r, now), now + cycle) for r in restarts) or [now]
    gaps = [(b - a, a) for a, b in zip(points, [*points[1:], points[0] + cycle], strict=True)]
    heap = [(-length, i, 0) for i, (length, _) in enumerate(gaps)]   # (-sub-gap, gap, joiners in it)
    heapq.heapify(heap)
    placed = [0] * len(gaps)
    for _ in range(joining):
        _, i, k = heapq.heappop(heap)
        placed[i] = k + 1
        heapq.heappush(heap, (-gaps[i][0] / (k + 2), i, k + 1))
    times: list[float] = []
    for (length, start), k in zip(gaps, placed, strict=True):
        for j in range(1, k + 1):
            t = start + length * j / (k + 1)
            times.append(t - cycle if t >= now + cycle else t)
    return sorted(times)


def predict_cycle(measured: Sequence[tuple[int, float]], concurrency: int) -> float:
    """The request cycle (a request's time, sent to end) expected at ``concurrency``, from the cycles
    measured at other concurrencies (the latest last): by Little's law the cycle is the concurrency over
    the request rate, and the rate is taken to grow with the concurrency as it did between the two
    measured levels nearest below (a power law, between no growth and proportional growth)."""
    if not measured:
        return 0.0
    known = sorted({c: t for c, t in measured}.items())
    below = [(c, t) for c, t in known if c <= concurrency] or known[:1]
    c1, t1 = below[-1]
    if c1 == concurrency or len(below) < 2:
        return t1 * (concurrency / c1 if c1 < concurrency else 1.0) if len(below) < 2 else t1
    c0, t0 = below[-2]
    rate_slope = math.log((c1 / t1) / (c0 / t0)) / math.log(c1 / c0) if t0 > 0 and t1 > 0 else 1.0
    return float(t1 * (concurrency / c1) ** (1.0 - min(1.0, max(0.0, rate_slope))))


def retirees(by_progress: Sequence[int], count: int) -> list[int]:
    """``count`` of the workers, ordered by how far their requests have come, spread evenly over that order:
    the ones left are as spread over their request cycle as before, so the batch keeps the same mix of
    short and long contexts (retiring those nearest their end would be quicker, and would leave a batch
    of young requests, lighter than the steady state's for a whole cycle)."""
    n = len(by_progress)
    return [by_progress[(2 * k + 1) * n // (2 * count)] for k in range(count)] if count > 0 else []
