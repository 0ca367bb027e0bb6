"""Per-turn figures of multi-turn sessions: TTFT and latency by turn index.

Turn k of a conversation carries the history of turns 0..k-1, so its prompt grows with k. Without
prefix caching the server prefills that history again on every turn and TTFT grows with k; with it,
only the new message is computed and TTFT stays flat. Figures are over each level's successful,
non-warm-up requests of that turn, measurement window or not (a turn index is a property of the
request, not of the time it ran).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from plateau_bench.analysis.stats import summarize
from plateau_bench.records import RequestRecord
from plateau_bench.result import TurnMetrics
from plateau_bench.units import NS

_MS = NS / 1000


def turn_metrics(records: Sequence[RequestRecord]) -> list[TurnMetrics]:
    """One entry per turn index seen, in order; empty for single-turn requests."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.turn >= 0 and r.error is None and not r.warmup:
            by_turn[r.turn].append(r)
    out: list[TurnMetrics] = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ttft = [(r.first_token_ns - r.sent_ns) / _MS for r in rs if r.first_token_ns is not None]
        out.append(TurnMetrics(
            turn=turn, requests=len(rs), prompt_tokens_mean=float(np.mean([r.prompt_tokens for r in rs])),
            ttft_ms=summarize(ttft), e2e_ms=summarize([(r.end_ns - r.sent_ns) / _MS for r in rs])))
    return out
