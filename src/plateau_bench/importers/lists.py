"""Per-request records from the parallel lists vLLM's and SGLang's serving benchmarks save.

Both tools keep, per request and in send order: ``ttfts`` (s), ``itls`` (the gaps between consecutive
content chunks, s), ``output_lens``, ``input_lens`` and ``errors`` (empty string when it succeeded).
``vllm bench serve`` (2025 on) adds ``start_times`` (``perf_counter`` at the send), ``latencies`` (s) and
``queue_times`` (waiting for a ``--max-concurrency`` slot before the send). A request's chunks arrive at
``send + ttft + cumsum(itls)``; its end is ``send + latency`` when saved, else its last chunk (which is
what both tools take as the latency).

Older files have no send times. In a burst at an unlimited request rate without a concurrency limit the
tools send every request at once, so t=0 for all is what happened and the records are kept; anywhere
else the send times cannot be known and the caller falls back to the summaries.

How many tokens each chunk carried is not saved: when a request's output length differs from its chunk
count, its tokens are spread evenly over its chunks and the notes say so.
"""

from __future__ import annotations

from typing import Any

from plateau_bench.importers.checks import plausible
from plateau_bench.importers.common import (
    TOKEN_SOURCE_IMPORTED,
    Where,
    error_class,
    latency,
    ns,
    number,
    number_list,
    spread_tokens,
)
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency

DETAIL_KEYS = ("ttfts", "itls", "output_lens")


def has_details(o: dict[str, Any]) -> bool:
    return all(isinstance(o.get(k), list) for k in DETAIL_KEYS) and bool(o["ttfts"])


def _gaps(o: dict[str, Any], n: int, where: Where) -> list[list[float]]:
    raw = o["itls"]
    if len(raw) != n:
        raise where.fail(f"field 'itls' has {len(raw)} entries, 'ttfts' has {n}")
    out: list[list[float]] = []
    for i, gaps in enumerate(raw):
        if gaps is None:
            gaps = []
        if not isinstance(gaps, list) or any(isinstance(g, bool) or not isinstance(g, int | float) for g in gaps):
            raise where.fail(f"field 'itls' entry {i} is not a list of numbers")
        out.append([float(g) for g in gaps])
    return out


def _no_negative_times(where: Where, **lists: list[float]) -> None:
    """A request's times and counts go forward: a negative TTFT, gap or latency is refused, not read as
    "no token" (the tools write 0 for a request that streamed none)."""
    for key, values in lists.items():
        bad = next(((i, v) for i, v in enumerate(values) if v < 0 or not plausible(v)), None)
        if bad is not None:
            raise where.fail(f"field '{key}' entry {bad[0]} is {bad[1]:g}: it must be a finite number >= 0")


def _same_length(o: dict[str, Any], key: str, n: int, where: Where) -> list[float] | None:
    values = number_list(o, key, where)
    if values is not None and len(values) != n:
        raise where.fail(f"field '{key}' has {len(values)} entries, 'ttfts' has {n}")
    return values


def _errors(o: dict[str, Any], n: int, where: Where) -> list[str]:
    raw = o.get("errors")
    if raw is None:
        return [""] * n
    if not isinstance(raw, list) or len(raw) != n:
        raise where.fail(f"field 'errors' is not a list of {n} entries")
    return ["" if e is None else str(e) for e in raw]


def _record(i: int, sent: int, ttft: float, gaps: list[float], out: int, prompt: int, error: str,
            latency: float | None, queued: float | None) -> RequestRecord:
    scheduled = sent - ns(queued) if queued else sent
    chunks: list[int] = []
    if ttft > 0:
        t = sent + ns(ttft)
        chunks.append(t)
        for g in gaps:
            t += ns(g)
            chunks.append(t)
    end = sent + ns(latency) if latency and latency > 0 else (chunks[-1] if chunks else sent)
    end = max(end, chunks[-1] if chunks else sent)
    if error:   # the tools save 0 output tokens for a failed request, whatever it streamed
        return RequestRecord(index=i, scheduled_ns=scheduled, sent_ns=sent, end_ns=end,
                             first_token_ns=chunks[0] if chunks else None, chunk_ns=chunks,
                             chunk_tokens=[0] * len(chunks), prompt_tokens=prompt, output_tokens=0,
                             token_source=TOKEN_SOURCE_IMPORTED, error=error_class(error), error_detail=error[:500])
    return RequestRecord(index=i, scheduled_ns=scheduled, sent_ns=sent, end_ns=end,
                         first_token_ns=chunks[0] if chunks else None, chunk_ns=chunks,
                         chunk_tokens=spread_tokens(out, len(chunks)), prompt_tokens=prompt, output_tokens=out,
                         token_source=TOKEN_SOURCE_IMPORTED)


def detailed_records(o: dict[str, Any], where: Where, *, all_at_once: bool,
                     ) -> tuple[list[RequestRecord], list[str]] | None:
    """The records of one saved result and notes on what was assumed; None when send times are unknowable."""
    ttfts = number_list(o, "ttfts", where) or []
    n = len(ttfts)
    gaps = _gaps(o, n, where)
    outs = _same_length(o, "output_lens", n, where) or []
    ins = _same_length(o, "input_lens", n, where) or [0.0] * n
    starts = _same_length(o, "start_times", n, where)
    lats = _same_length(o, "latencies", n, where)
    queued = _same_length(o, "queue_times", n, where)
    errors = _errors(o, n, where)
    _no_negative_times(where, ttfts=ttfts, latencies=lats or [], queue_times=queued or [],
                       itls=[g for request in gaps for g in request], output_lens=outs, input_lens=ins)
    notes: list[str] = []
    if starts is None:
        if not all_at_once:
            return None
        notes.append("send times not saved: every request taken as sent at t=0 (a burst at an unlimited rate "
                     "without a concurrency limit sends them all at once)")
    t0 = min(starts) if starts else 0.0
    records = [_record(i, ns(starts[i] - t0) if starts else 0, ttfts[i], gaps[i], round(outs[i]), round(ins[i]),
                       errors[i], lats[i] if lats else None, queued[i] if queued else None) for i in range(n)]
    uneven = sum(1 for r in records if r.ok and r.chunk_ns and r.output_tokens != len(r.chunk_ns))
    if uneven:
        notes.append(f"tokens per chunk not saved: {uneven} request(s) streamed fewer chunks than tokens, their "
                     "tokens spread evenly over their chunks")
    return records, notes


STATS = (("mean", "mean"), ("median", "p50"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("max", "max"))


def ms_stats(o: dict[str, Any], name: str, where: Where) -> Latency | None:
    """``mean_<name>_ms``, ``median_<name>_ms``, ``p90_``, ``p99_``, ``max_`` as a summary (ms).

    Both tools write 0 for every statistic of a metric with no sample (TTFT without streaming): an
    all-zero block is taken as not measured.
    """
    found: dict[str, float] = {}
    for prefix, slot in STATS:
        value = number(o, f"{prefix}_{name}_ms", where)
        if value is not None and slot not in found:
            found[slot] = value
    if not found or all(v == 0 for v in found.values()):
        return None
    return latency(found.get("mean"), found.get("p50"), found.get("p90"), found.get("p99"), found.get("max"))


def error_counts(o: dict[str, Any]) -> dict[str, int]:
    raw = o.get("errors")
    out: dict[str, int] = {}
    if isinstance(raw, list):
        for e in raw:
            if e:
                cls = str(error_class(str(e)))
                out[cls] = out.get(cls, 0) + 1
    return out
