"""Level metrics from request records: the one place each metric is defined.

Definitions (times in ns since the level start; ``W = [w0, w1]`` is the measurement window):

* **TTFT** = first content token received - request sent. Reasoning tokens count as content for
  TTFT only when no plain content precedes them (``first_token_ns`` is set by the driver to the
  first chunk that carries output tokens; ``first_reasoning_ns`` is kept apart).
* **E2E** = last byte received - request sent.
* **TPOT** = (E2E - TTFT) / (output_tokens - 1), per request with >= 2 output tokens.
* **ITL** = gap between consecutive content chunks; a chunk carrying k tokens contributes k gaps
  of (gap / k), so a multi-token chunk neither hides nor inflates latency (SGLang's convention).
* **Output throughput** = output tokens of *successful* requests whose arrival time lies in W / |W|.
  Tokens streamed by a request that then failed (reset, truncated, hung, ...) are not throughput:
  they are reported apart as ``failed_output_tokens``. Total throughput adds
  the prompt tokens of requests *sent* in W. **Peak output throughput** = the largest number of
  output tokens arriving in any 1 s bucket of W.
* **Achieved concurrency** (Little's law) = sum over requests of time in flight inside W / |W|.
  **Decoding concurrency** = the same from first token to end: requests past their first token.
  A server admission cap shows up here first.
* **Peak decoding** = the most requests between their first and last content token at one instant:
  a server that admits at most N requests at a time never exceeds N, so this reads a cap (the last
  content token, not the end of the stream, so the usage chunk and ``[DONE]`` arriving after the next
  request's first token do not count as overlap).
* **Request throughput** = successful requests ending in W / |W|.
* Latency statistics cover successful requests sent within W (see ``_latency_population`` for
  the fallback when a heavily queued level has too few of them).

When a record has no chunk list (the twin in fast mode), its tokens are taken as arriving
evenly from the first token to the end.

Windows: burst levels use [first send, last end]. Steady levels exclude ramp-up (until every
worker has received its first token) and drain (from the moment the first worker has finished
its last request), and end on a first token as they start on one; see ``steady_window``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from plateau_bench.analysis.stats import FloatArray, batch_means_ci_rel, summarize
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency, LevelResult
from plateau_bench.units import NS, NS_PER_MS

# A level is marked failed when at least this share of its requests failed.
LEVEL_FAILED_SHARE = 0.5


@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    note: str = ""

    @property
    def length_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / NS


def full_window(records: Sequence[RequestRecord]) -> Window:
    """[first send, last end] over the measured (non-warm-up) records."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return Window(0, 0, "no requests")
    return Window(min(r.sent_ns for r in measured), max(r.end_ns for r in measured), "whole level")


def steady_window(records: Sequence[RequestRecord]) -> Window:
    """Exclude ramp-up and drain of a closed-loop level.

    Ramp-up ends when every worker has received its first token; drain starts when the first
    worker has finished its last request, and the window ends on the last first token before that
    (``phase_matched_end``). Falls back to the full window (and says so) when the
    two cross, which happens when a level is too short for a steady state.
    """
    measured = [r for r in records if not r.warmup]
    if not measured:
        return Window(0, 0, "no requests")
    first_token_by_worker: dict[int, int] = {}
    last_end_by_worker: dict[int, int] = {}
    for r in measured:
        if r.first_token_ns is not None:
            prev = first_token_by_worker.get(r.worker)
            if prev is None or r.first_token_ns < prev:
                first_token_by_worker[r.worker] = r.first_token_ns
        last_end_by_worker[r.worker] = max(last_end_by_worker.get(r.worker, 0), r.end_ns)
    full = full_window(records)
    if not first_token_by_worker or len(first_token_by_worker) < len(last_end_by_worker):
        return Window(full.start_ns, full.end_ns, "no steady state: some workers never got a token")
    start = max(first_token_by_worker.values())
    end = phase_matched_end(sorted_first_tokens(measured), start, min(last_end_by_worker.values()))
    if end - start < 0.2 * (full.end_ns - full.start_ns):
        return Window(full.start_ns, full.end_ns, "level too short for a steady state: whole level used")
    return Window(start, end, "steady state: ramp-up and drain excluded")


def sorted_first_tokens(records: Sequence[RequestRecord]) -> npt.NDArray[np.int64]:
    return np.sort(np.array([r.first_token_ns for r in records if r.first_token_ns is not None], dtype=np.int64))


def phase_matched_end(first_tokens: npt.NDArray[np.int64], start_ns: int, end_ns: int) -> int:
    """The window's end moved back to the last first token at or before ``end_ns``.

    A window opens on a first token (the last worker's first one). Where the workers run in lock step
    (prefill waves, then decode phases: a cap admitting waves, a long prompt every worker sends at
    once) a window from a first token to an end holds one decode phase more than prefill phases and
    reads high by a prefill phase's share (+11 % over three cycles whose prefill is 30 % of each).
    Closed on a first token as well, it holds whole cycles. Where the requests are spread over the
    cycle the last first token before the end is moments before it, and the window barely shrinks.
    ``first_tokens`` sorted; the end is kept when no first token falls between start and end.
    """
    i = int(np.searchsorted(first_tokens, end_ns, side="right")) - 1
    matched = int(first_tokens[i]) if i >= 0 else start_ns
    return matched if matched > start_ns else end_ns


def token_arrays(records: Sequence[RequestRecord]) -> tuple[FloatArray, FloatArray]:
    """Output-token arrivals of the given records as (times_ns, counts), chunkless records spread evenly.

    Callers pass successful requests for throughput and failed ones for the tokens lost to failures.
    """
    times: list[FloatArray] = []
    counts: list[FloatArray] = []
    firsts: list[int] = []
    lasts: list[int] = []
    lengths: list[int] = []
    for r in records:
        if r.chunk_ns:
            times.append(np.asarray(r.chunk_ns, dtype=np.float64))
            counts.append(np.asarray(r.chunk_tokens, dtype=np.float64))
        elif r.first_token_ns is not None and r.output_tokens > 0:
            firsts.append(r.first_token_ns)
            lasts.append(r.end_ns)
            lengths.append(r.output_tokens)
    if lengths:
        spread = _spread_evenly(np.asarray(firsts, dtype=np.float64), np.asarray(lasts, dtype=np.float64),
                                np.asarray(lengths, dtype=np.int64))
        times.append(spread)
        counts.append(np.ones(spread.size))
    if not times:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(times), np.concatenate(counts)


def _spread_evenly(firsts: FloatArray, lasts: FloatArray, n: npt.NDArray[np.int64]) -> FloatArray:
    """``np.linspace(first, last, n)`` of every row at once, to the same floats (the twin's fast mode
    yields hundreds of thousands of chunkless records per level, and a Python loop over them was most
    of a sweep's wall time)."""
    starts = np.repeat(firsts, n)
    step = np.repeat(np.where(n > 1, (lasts - firsts) / np.maximum(n - 1, 1), 0.0), n)
    offsets = np.cumsum(n) - n
    k = np.arange(int(n.sum()), dtype=np.float64) - np.repeat(offsets, n).astype(np.float64)
    out: FloatArray = k * step + starts
    multi = n > 1
    out[(offsets + n - 1)[multi]] = lasts[multi]   # linspace ends exactly on its stop
    return out


def sorted_tokens(records: Sequence[RequestRecord]) -> tuple[FloatArray, FloatArray]:
    """``token_arrays`` sorted by time, with the tokens before each arrival (a leading 0, one longer):
    any interval's count is then a difference of two lookups (``counts_between``)."""
    times, counts = token_arrays(records)
    order = np.argsort(times, kind="stable")   # runs of one request each: timsort merges them, several times faster
    return times[order], np.concatenate([[0.0], np.cumsum(counts[order])])


def counts_between(times: FloatArray, cumulative: FloatArray, edges: FloatArray) -> FloatArray:
    """Tokens in each ``[edges[i], edges[i+1])``, the last interval closed: ``np.histogram``'s bins,
    the same integers, without sorting every token again for each window."""
    idx = np.concatenate([np.searchsorted(times, edges[:-1], side="left"),
                          np.searchsorted(times, edges[-1:], side="right")])
    return np.diff(cumulative[idx])


def batch_throughputs(times: FloatArray, cumulative: FloatArray, w: Window, batches: int = 10) -> list[float]:
    """Output tok/s in ``batches`` equal sub-windows of W (for the batch-means CI), from ``sorted_tokens``."""
    if w.end_ns <= w.start_ns or times.size == 0:
        return []
    edges = np.linspace(w.start_ns, w.end_ns, batches + 1)
    return _rates(counts_between(times, cumulative, edges), edges)


def phase_edges(first_tokens: npt.NDArray[np.int64], w: Window, workers: int, batches: int = 10) -> FloatArray | None:
    """Batch edges where the workers' requests start in waves: each at the last first token of a wave.

    Equal sub-windows suit requests spread over their cycle. Where they run in lock step (prefill
    waves, then decode phases: a synchronised start, a cap admitting a wave as the last one ends, a
    KV cache that admits as it frees) an equal sub-window holds a phase mix that depends on where it
    cuts the waves, so the batches differ by a fixed periodic pattern, not by noise, and their spread
    shrinks only as the window grows (seed-b-fp4's levels ran ten request cycles and still read 3 to
    4 %). A wave ends where the first tokens fall silent for an eighth of a request cycle (the
    window's per-worker time between starts); a batch closes on the first such end at least a
    ``batches``-th of the window after the last, so it holds whole waves and what differs between
    batches is what differs between waves. Spread requests seldom leave such a silence, and where
    they do, an edge there is as good as any. Waves after the last whole batch are left out of the
    batches, not of the window. None under three batches (then the equal sub-windows serve).
    """
    inside = first_tokens[(first_tokens >= w.start_ns) & (first_tokens <= w.end_ns)]
    if workers < 1 or inside.size < 2:
        return None
    cycle_ns = workers * (w.end_ns - w.start_ns) / inside.size
    wave_ends = inside[:-1][np.diff(inside) >= cycle_ns / 8]
    edges = [float(w.start_ns)]
    for end in wave_ends:
        if end >= edges[-1] + (w.end_ns - w.start_ns) / batches:
            edges.append(float(end))
    if inside[-1] == w.end_ns and w.end_ns >= edges[-1] + (w.end_ns - w.start_ns) / batches:
        edges.append(float(w.end_ns))   # the window itself closes on a wave's last first token
    return np.array(edges) if len(edges) >= 4 else None


def steady_batches(times: FloatArray, cumulative: FloatArray, w: Window, first_tokens: npt.NDArray[np.int64],
                   workers: int, batches: int = 10) -> list[float]:
    """The batch throughputs of a steady closed-loop window: on whole waves where its requests start in
    waves (``phase_edges``), else ``batches`` equal sub-windows."""
    if w.end_ns <= w.start_ns or times.size == 0:
        return []
    edges = phase_edges(first_tokens, w, workers, batches)
    if edges is None:
        return batch_throughputs(times, cumulative, w, batches)
    # Every batch half-open: the first tokens a batch's closing edge falls on open the next wave's.
    return _rates(np.diff(cumulative[np.searchsorted(times, edges, side="left")]), edges)


def _rates(counts: FloatArray, edges: FloatArray) -> list[float]:
    return [float(h) / width for h, width in zip(counts, np.diff(edges) / NS, strict=True)]


def _overlap_s(starts: FloatArray, ends: FloatArray, w: Window) -> float:
    lo = np.maximum(starts, w.start_ns)
    hi = np.minimum(ends, w.end_ns)
    return float(np.clip(hi - lo, 0, None).sum()) / NS


def peak_overlap(intervals: list[tuple[int, int]]) -> int:
    """Most intervals open at one instant (an interval ending when another starts does not overlap)."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    peak = cur = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return peak


def _itl(records: Sequence[RequestRecord]) -> tuple[FloatArray, FloatArray]:
    """Per-token ITL values (ms) with weights (tokens sharing each value)."""
    values: list[FloatArray] = []
    weights: list[FloatArray] = []
    for r in records:
        if len(r.chunk_ns) >= 2:
            t = np.asarray(r.chunk_ns, dtype=np.float64)
            k = np.asarray(r.chunk_tokens[1:], dtype=np.float64)
            k = np.where(k < 1, 1.0, k)
            values.append(np.diff(t) / k / NS_PER_MS)
            weights.append(k)
        elif not r.chunk_ns and r.first_token_ns is not None and r.output_tokens > 1:
            gap = (r.end_ns - r.first_token_ns) / (r.output_tokens - 1) / NS_PER_MS
            values.append(np.array([gap]))
            weights.append(np.array([float(r.output_tokens - 1)]))
    if not values:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(values), np.concatenate(weights)


MIN_LATENCY_SAMPLE = 10


def _latency_population(ok: list[RequestRecord], w: Window, mode: str) -> tuple[list[RequestRecord], str]:
    """Which successful requests the latency statistics cover.

    Steady levels: those sent inside the window. When requests are long against the window (a
    heavily queued level), fewer than ``MIN_LATENCY_SAMPLE`` are, and the statistics fall back to
    the requests that ended inside it, then to every successful request; the note says which.
    """
    if mode != "steady":
        return ok, ""
    sent = [r for r in ok if w.start_ns <= r.sent_ns <= w.end_ns]
    if len(sent) >= min(MIN_LATENCY_SAMPLE, len(ok)):
        return sent, ""
    ended = [r for r in ok if w.start_ns <= r.end_ns <= w.end_ns]
    if len(ended) >= min(MIN_LATENCY_SAMPLE, len(ok)):
        return ended, "; latency over requests ending in the window (few were sent inside it)"
    return ok, "; latency over every request (the window holds too few whole requests)"


def bucket_output_tokens(records: Sequence[RequestRecord], w: Window, bucket_s: float = 1.0) -> FloatArray:
    """Output tokens arriving in consecutive ``bucket_s`` buckets from the window start."""
    times, cumulative = sorted_tokens([r for r in records if not r.warmup and r.error is None])
    return _buckets(times, cumulative, w, bucket_s)


MAX_BUCKETS = 100_000   # a window longer than this many buckets (a day of 1 s ones) gets wider buckets


def _buckets(times: FloatArray, cumulative: FloatArray, w: Window, bucket_s: float) -> FloatArray:
    """Tokens per bucket; at most ``MAX_BUCKETS`` of them, so that the memory stays bounded whatever the
    window (a calibrated step of 10^6 s made a virtual window of 10^8 s and asked for 5.7 GiB)."""
    if w.end_ns <= w.start_ns:
        return np.zeros(0)
    bucket_s = max(bucket_s, (w.end_ns - w.start_ns) / NS / MAX_BUCKETS)
    n_buckets = max(1, int(np.ceil((w.end_ns - w.start_ns) / (bucket_s * NS))))
    edges: FloatArray = w.start_ns + np.arange(n_buckets + 1, dtype=np.float64) * bucket_s * NS
    edges[-1] = max(edges[-1], w.end_ns)
    return counts_between(times, cumulative, edges)


def _latencies(pool: Sequence[RequestRecord]) -> dict[str, Latency]:
    """TTFT, TPOT, ITL and E2E statistics over the latency population (ms)."""
    ttft = [(r.first_token_ns - r.sent_ns) / NS_PER_MS for r in pool if r.first_token_ns is not None]
    e2e = [(r.end_ns - r.sent_ns) / NS_PER_MS for r in pool]
    tpot = [(r.end_ns - r.first_token_ns) / NS_PER_MS / (r.output_tokens - 1)
            for r in pool if r.first_token_ns is not None and r.output_tokens > 1]
    itl_values, itl_weights = _itl(pool)
    return {"ttft_ms": summarize(ttft), "tpot_ms": summarize(tpot), "e2e_ms": summarize(e2e),
            "itl_ms": summarize(itl_values, itl_weights) if itl_values.size else summarize([])}


def _throughputs(measured: Sequence[RequestRecord], ok: Sequence[RequestRecord], w: Window,
                 mode: str) -> dict[str, float | int | None]:
    """Output/total/peak/request throughput of the successful requests over the window."""
    length = w.length_s
    times, cumulative = sorted_tokens(ok)
    out_tokens = (int(counts_between(times, cumulative, np.array([w.start_ns, w.end_ns], dtype=np.float64))[0])
                  if w.end_ns >= w.start_ns else 0)
    in_tokens = sum(r.prompt_tokens for r in ok if w.start_ns <= r.sent_ns <= w.end_ns)
    buckets = _buckets(times, cumulative, w, 1.0)
    done_in_window = sum(1 for r in ok if w.start_ns <= r.end_ns <= w.end_ns)
    return {
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "output_throughput": out_tokens / length if length > 0 else 0.0,
        "total_throughput": (out_tokens + in_tokens) / length if length > 0 else 0.0,
        "peak_output_throughput": float(buckets.max()) if buckets.size else 0.0,
        "request_throughput": done_in_window / length if length > 0 else 0.0,
        "throughput_ci_rel": _ci_rel(measured, times, cumulative, w) if mode == "steady" else None,
    }


def _ci_rel(measured: Sequence[RequestRecord], times: FloatArray, cumulative: FloatArray, w: Window) -> float | None:
    workers = len({r.worker for r in measured})
    return batch_means_ci_rel(steady_batches(times, cumulative, w, sorted_first_tokens(measured), workers))


def _concurrency(measured: Sequence[RequestRecord], w: Window) -> dict[str, float | int]:
    """Little's-law concurrency (all requests in flight, and those past their first token), and peaks."""
    length = w.length_s
    decoding = [r for r in measured if r.first_token_ns is not None]
    starts = np.array([r.sent_ns for r in measured], dtype=np.float64)
    ends = np.array([r.end_ns for r in measured], dtype=np.float64)
    d_starts = np.array([r.first_token_ns for r in decoding], dtype=np.float64)
    d_ends = np.array([r.end_ns for r in decoding], dtype=np.float64)
    return {
        "achieved_concurrency": _overlap_s(starts, ends, w) / length if length > 0 else 0.0,
        "decoding_concurrency": _overlap_s(d_starts, d_ends, w) / length if length > 0 else 0.0,
        "peak_in_flight": peak_overlap([(r.sent_ns, r.end_ns) for r in measured]),
        "peak_decoding": peak_overlap([(r.first_token_ns, r.chunk_ns[-1] if r.chunk_ns else r.end_ns)
                                        for r in decoding if r.first_token_ns is not None]),
    }


DETAILS_KEPT = 3      # a level keeps its failed requests' most common messages, each cut to DETAIL_CHARS
DETAIL_CHARS = 160


def _failures(measured: Sequence[RequestRecord]) -> dict[str, object]:
    errors = Counter(str(r.error) for r in measured if r.error is not None)
    failed = sum(errors.values())
    return {
        "failed": failed,
        "hung": errors.get(ErrorClass.HUNG, 0),
        "errors": dict(errors),
        "dominant_error": errors.most_common(1)[0][0] if errors else None,
        "error_details": dict(Counter(r.error_detail[:DETAIL_CHARS] for r in measured
                                      if r.error is not None and r.error_detail).most_common(DETAILS_KEPT)),
        "level_failed": bool(measured) and failed / len(measured) >= LEVEL_FAILED_SHARE,
        "failed_output_tokens": sum(r.output_tokens for r in measured if r.error is not None),
        "token_mismatches": sum(1 for r in measured if r.token_mismatch),
        "http_statuses": dict(Counter(str(r.http_status) for r in measured
                                      if r.error is not None and r.http_status not in (None, 200))),
        "retry_after_s_max": max((r.retry_after_s for r in measured if r.retry_after_s is not None), default=None),
    }


def compute_level(
    records: Sequence[RequestRecord],
    *,
    label: str,
    mode: str,
    concurrency: int | None = None,
    rate: float | None = None,
    window: Window | None = None,
) -> LevelResult:
    """Every metric of one level from its records (warm-up records are ignored).

    Every request sent is counted once: ``num_requests == completed + failed`` (hung included in
    failed). Throughput and latency count successful requests only.
    """
    measured = [r for r in records if not r.warmup]
    w = window or (steady_window(measured) if mode == "steady" else full_window(measured))
    ok = [r for r in measured if r.error is None]
    latency_pool, pool_note = _latency_population(ok, w, mode)
    sources = Counter(r.token_source for r in ok)
    connects = [r.connect_ns / NS_PER_MS for r in measured if r.connect_ns is not None]
    return msgspec.convert({
        "label": label, "mode": mode, "concurrency": concurrency, "rate": rate,
        "num_requests": len(measured), "completed": len(ok), **_failures(measured),
        "duration_s": w.length_s,
        "wall_s": (max(r.end_ns for r in measured) - min(r.sent_ns for r in measured)) / NS if measured else 0.0,
        "window_start_s": w.start_ns / NS, "window_end_s": w.end_ns / NS, "window_note": w.note + pool_note,
        **_throughputs(measured, ok, w, mode), **_concurrency(measured, w),
        **{k: msgspec.to_builtins(v) for k, v in _latencies(latency_pool).items()},
        "send_lag_ms": msgspec.to_builtins(summarize([(r.sent_ns - r.scheduled_ns) / NS_PER_MS for r in measured])),
        "connect_ms": msgspec.to_builtins(summarize(connects)),
        "token_source": sources.most_common(1)[0][0] if sources else "usage",
    }, LevelResult)
