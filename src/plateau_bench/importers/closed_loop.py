"""Send times of a closed-loop client that saved none: rebuilt from its concurrency limit and the latencies.

A client run at an unlimited request rate with a concurrency limit C (SGLang's ``--max-concurrency``, an
``asyncio.Semaphore``) sends its first C requests at once and each later one, in send order, the moment
one in flight ends: the waiters take the freed slot first come, first served. Given each request's
latency (its first chunk plus the gaps between chunks, when the tool saved no latency of its own), the
send times follow by replaying that queue (``closed_loop_sends``).

The replay is only as good as that model. It is checked against the duration the tool measured itself:
when the replayed run would outlast it, or fill far less of it than a closed loop does, the requests
were not sent that way (a trace replay, multi-turn conversations, a request that failed after a wait the
file does not keep) and the caller falls back to the summaries.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

# The replayed run must fill the tool's own duration to within these bounds: the tool's clock also
# counts its set-up and the last response's tail, so the replay comes out a little shorter, never longer.
FILL_MIN = 0.80
FILL_MAX = 1.02
SLACK_S = 0.005   # timer resolution and the client's own work between a slot's release and the next send


def closed_loop_sends(latencies: Sequence[float], limit: int) -> list[float]:
    """Send time (s from the first send) of each request, in send order, under ``limit`` in flight."""
    free_at: list[float] = []   # when each busy slot frees, as a heap
    sends: list[float] = []
    for latency in latencies:
        sent = heapq.heappop(free_at) if len(free_at) >= limit else 0.0
        sends.append(sent)
        heapq.heappush(free_at, sent + max(0.0, latency))
    return sends


def request_latencies(ttfts: Sequence[float], gaps: Sequence[Sequence[float]]) -> list[float]:
    """Each request's latency as its last chunk's arrival: first chunk plus the gaps after it."""
    return [ttft + sum(g) for ttft, g in zip(ttfts, gaps, strict=True)]


def replay_fits(sends: Sequence[float], latencies: Sequence[float], duration_s: float) -> bool:
    """Whether the replayed run fills the tool's own measured duration (module docstring)."""
    if duration_s <= 0 or not sends:
        return False
    span = max(s + max(0.0, lat) for s, lat in zip(sends, latencies, strict=True))
    return FILL_MIN * duration_s <= span <= FILL_MAX * duration_s + SLACK_S


HELD_SHARE = 0.10   # of the time any interval is open (see held_peak)


def held_peak(intervals: Sequence[tuple[int, int]], share: float = HELD_SHARE) -> int:
    """Most intervals open at once for at least ``share`` of the time any is open.

    With rebuilt send times each request's interval sits off its true place by the client's unrecorded
    overheads (milliseconds, adding up along a slot's chain of requests), so an interval that ended just
    before another began may appear to overlap it for those few milliseconds: the instant's peak reads a
    request or two high. A count that the load really held lasts much longer than such a blip.
    """
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    time_at: dict[int, int] = {}
    open_now, last = 0, None
    for t, delta in events:
        if last is not None and open_now > 0:
            time_at[open_now] = time_at.get(open_now, 0) + (t - last)
        open_now, last = open_now + delta, t
    busy = sum(time_at.values())
    if busy <= 0:
        return max(time_at, default=0)
    held, at_least = 0, 0
    for count in sorted(time_at, reverse=True):
        at_least += time_at[count]
        if at_least >= share * busy:
            held = count
            break
    return held
