"""A warm level's figures: everything counted inside its window by when it happened.

A warm level's records are the requests that *ended* in it (some were sent in an earlier level), and
``in_flight`` holds what the requests still streaming at the window's close had streamed by then.
Every request sent is in exactly one level's records, so the counts (``num_requests == completed +
failed``) are those of ``metrics.compute_level``; the figures differ in what they read:

* **Throughput**: output tokens arriving inside the window, from finished and streaming requests
  alike (a request longer than the window counts the part of it inside); a streaming request's
  tokens are counted as it stood at the close (one that failed later is counted as failed where it
  ended). Input tokens: the prompts of the requests sent inside the window.
* **TTFT**: the requests sent inside the window whose first token came in it (when too few were, every
  first token inside it, and the window note says so).
* **TPOT / ITL**: the gaps between tokens inside the window (a request's TPOT from its tokens there,
  when it has at least two).
* **E2E**: the requests sent after the level started and ended inside its window; when fewer than
  ``MIN_LATENCY_SAMPLE`` did (requests longer than the level), those that ended in it, and the
  window note says so.
* **Concurrency** (Little's law) and the peaks: every request's time in flight inside the window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

from plateau_bench.analysis.metrics import (
    MIN_LATENCY_SAMPLE,
    Window,
    compute_level,
    counts_between,
    peak_overlap,
    sorted_first_tokens,
    sorted_tokens,
    steady_batches,
)
from plateau_bench.analysis.stats import batch_means_ci_rel, summarize
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult
from plateau_bench.units import NS, NS_PER_MS


def compute_warm_level(records: Sequence[RequestRecord], in_flight: Sequence[RequestRecord], *, label: str,
                       concurrency: int | None, window: Window, level_start_ns: int) -> LevelResult:
    """Every metric of one warm level (see the module docstring)."""
    base = compute_level(records, label=label, mode="steady", concurrency=concurrency, window=window)
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.error is None]
    streams = _streams(ok, measured, in_flight)
    e2e, e2e_note = _e2e(ok, window, level_start_ns)
    ttft, ttft_note = _ttft(streams, window)
    return msgspec.structs.replace(
        base, window_note=window.note + ttft_note + e2e_note,
        **_throughputs(streams, measured, window, concurrency or 1),
        **_in_flight(_each_once(measured, in_flight), window),
        **_latencies(streams, window), ttft_ms=summarize(ttft), e2e_ms=e2e)


def _streams(ok: Sequence[RequestRecord], measured: Sequence[RequestRecord],
             in_flight: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Whose tokens count: the successful finished requests, and what the requests in flight at the close
    had streamed by then (the same tokens their final records hold, if the level is built again once
    they ended: their partial records stay the ones counted, unless the request then failed)."""
    partial = {r.index for r in in_flight}
    failed_later = {r.index for r in measured if r.error is not None and r.index in partial}
    return ([r for r in ok if r.index not in partial]
            + [r for r in in_flight if not r.warmup and r.index not in failed_later])


def _each_once(measured: Sequence[RequestRecord], in_flight: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Every request once: its final record where it has one, else what it had streamed at the close."""
    final = {r.index for r in measured}
    return [*measured, *(r for r in in_flight if not r.warmup and r.index not in final)]


def _throughputs(streams: Sequence[RequestRecord], measured: Sequence[RequestRecord], w: Window,
                 workers: int) -> dict[str, object]:
    length = w.length_s
    times, cumulative = sorted_tokens(streams)
    edges = np.array([w.start_ns, w.end_ns], dtype=np.float64)
    out_tokens = int(counts_between(times, cumulative, edges)[0]) if length > 0 else 0
    in_tokens = sum(r.prompt_tokens for r in streams if w.start_ns <= r.sent_ns <= w.end_ns)
    n_buckets = max(1, math.ceil(length))
    bucket_edges = np.minimum(w.start_ns + np.arange(n_buckets + 1, dtype=np.float64) * NS, w.end_ns)
    buckets = counts_between(times, cumulative, bucket_edges) if length > 0 else np.zeros(0)
    ended = sum(1 for r in measured if r.error is None and w.start_ns <= r.end_ns <= w.end_ns)
    batches = steady_batches(times, cumulative, w, sorted_first_tokens(streams), workers)
    return {"output_tokens": out_tokens, "input_tokens": in_tokens,
            "output_throughput": out_tokens / length if length > 0 else 0.0,
            "total_throughput": (out_tokens + in_tokens) / length if length > 0 else 0.0,
            "peak_output_throughput": float(buckets.max()) if buckets.size else 0.0,
            "request_throughput": ended / length if length > 0 else 0.0,
            "throughput_ci_rel": batch_means_ci_rel(batches)}


def _clipped(pairs: Sequence[tuple[int, int]], w: Window) -> list[tuple[int, int]]:
    return [(max(a, w.start_ns), min(b, w.end_ns)) for a, b in pairs if min(b, w.end_ns) > max(a, w.start_ns)]


def _in_flight(requests: Sequence[RequestRecord], w: Window) -> dict[str, object]:
    length = w.length_s
    whole = _clipped([(r.sent_ns, r.end_ns) for r in requests], w)
    decoding = _clipped([(r.first_token_ns, r.chunk_ns[-1] if r.chunk_ns else r.end_ns)
                         for r in requests if r.first_token_ns is not None], w)
    return {"achieved_concurrency": sum(b - a for a, b in whole) / NS / length if length > 0 else 0.0,
            "decoding_concurrency": sum(b - a for a, b in decoding) / NS / length if length > 0 else 0.0,
            "peak_in_flight": peak_overlap(whole), "peak_decoding": peak_overlap(decoding)}


def _gaps_inside(r: RequestRecord, w: Window) -> tuple[float, int] | None:
    """The request's mean gap between tokens inside the window (ms) and how many gaps, None under two tokens."""
    if r.first_token_ns is None or r.output_tokens < 2:
        return None
    if r.chunk_ns:
        t = np.asarray(r.chunk_ns, dtype=np.float64)
        k = np.asarray(r.chunk_tokens, dtype=np.float64)
        inside = (t >= w.start_ns) & (t <= w.end_ns)
        if inside.sum() < 2:
            return None
        tokens = int(k[inside].sum() - k[inside][0])
        return ((t[inside][-1] - t[inside][0]) / max(tokens, 1) / NS_PER_MS, max(tokens, 1))
    gap = (r.end_ns - r.first_token_ns) / (r.output_tokens - 1)
    if gap <= 0:
        return None
    lo = math.ceil((max(w.start_ns, r.first_token_ns) - r.first_token_ns) / gap)
    hi = math.floor((min(w.end_ns, r.end_ns) - r.first_token_ns) / gap)
    gaps = min(hi, r.output_tokens - 1) - lo
    return (gap / NS_PER_MS, gaps) if gaps >= 1 else None


def _ttft(streams: Sequence[RequestRecord], w: Window) -> tuple[list[float], str]:
    """TTFT of the requests sent inside the window whose first token came in it (their wait reflects the
    load as the window held it); when fewer than ``MIN_LATENCY_SAMPLE`` did, of every first token inside
    the window (some sent before it, while the queue was still building: the note says so)."""
    inside = [(r.first_token_ns - r.sent_ns, r.sent_ns) for r in streams
              if r.first_token_ns is not None and w.start_ns <= r.first_token_ns <= w.end_ns]
    sent = [wait / NS_PER_MS for wait, at in inside if at >= w.start_ns]
    if len(sent) >= min(MIN_LATENCY_SAMPLE, len(inside)):
        return sent, ""
    return ([wait / NS_PER_MS for wait, _ in inside],
            "; TTFT over every first token in the window (few requests were both sent and answered in it)")


def _latencies(streams: Sequence[RequestRecord], w: Window) -> dict[str, object]:
    gaps = [g for g in (_gaps_inside(r, w) for r in streams) if g is not None]
    values = np.array([g for g, _ in gaps], dtype=np.float64)
    weights = np.array([n for _, n in gaps], dtype=np.float64)
    return {"tpot_ms": summarize(values),
            "itl_ms": summarize(values, weights) if values.size else summarize([])}


def _e2e(finished: Sequence[RequestRecord], w: Window, level_start_ns: int) -> tuple[object, str]:
    whole = [(r.end_ns - r.sent_ns) / NS_PER_MS for r in finished
             if r.sent_ns >= level_start_ns and r.end_ns <= w.end_ns]
    if len(whole) >= MIN_LATENCY_SAMPLE:
        return summarize(whole), ""
    ended = [(r.end_ns - r.sent_ns) / NS_PER_MS for r in finished if w.start_ns <= r.end_ns <= w.end_ns]
    if not ended:
        return summarize([]), "; no request began and ended in the level: E2E unknown"
    return summarize(ended), "; E2E over requests ending in the window (few began in the level: requests outlive it)"
