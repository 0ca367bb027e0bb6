"""Levels in the keys of ``vllm bench serve --save-result --save-detailed``, for people who stay in vLLM's tools.

One JSON object per level, one per line (the layout of ``--append-result``; ``plateau import`` reads it
back). Summary keys: ``duration`` (the level's measurement window), ``completed``, ``failed``,
``num_prompts``, ``request_rate`` (``"inf"`` unless the level was open loop), ``max_concurrency``,
``total_input_tokens``, ``total_output_tokens``, ``request_throughput``, ``output_throughput``,
``total_token_throughput``, ``max_output_tokens_per_s`` (peak output tok/s), ``max_concurrent_requests``
(peak in flight) and ``mean_``/``median_``/``p90_``/``p99_`` ``{ttft,tpot,itl,e2el}_ms``. Statistics the
level does not have (vLLM's ``std_*``, or any the source never measured) are left out, not written as 0.

With request records the per-request lists follow: ``start_times`` (s from the level start),
``queue_times``, ``ttfts``, ``itls`` (gaps between content chunks), ``latencies``, ``input_lens``,
``output_lens`` and ``errors`` (vLLM saves 0 output tokens for a failed request: the tokens it streamed
before failing are not carried). A record without chunk times gets its tokens as evenly spaced gaps from
first token to end: the spacing ``analysis.metrics`` assumes for it, so the figures come back unchanged.
vLLM's format has no measurement window: a steady level comes back as a burst over its whole level.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency, LevelResult, ResultFile

_LATENCIES = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("itl", "itl_ms"), ("e2el", "e2e_ms"))
_STATS = (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p99", "p99"))


def _gaps(r: RequestRecord) -> list[float]:
    if r.chunk_ns or not r.ok:
        return [(b - a) / 1e9 for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
    if r.first_token_ns is None or r.output_tokens < 2:
        return []
    step = (r.end_ns - r.first_token_ns) / (r.output_tokens - 1) / 1e9
    return [step] * (r.output_tokens - 1)


def _details(records: Sequence[RequestRecord]) -> dict[str, Any]:
    rs = [r for r in records if not r.warmup]
    return {
        "start_times": [r.sent_ns / 1e9 for r in rs],
        "queue_times": [(r.sent_ns - r.scheduled_ns) / 1e9 for r in rs],
        "ttfts": [(r.first_token_ns - r.sent_ns) / 1e9 if r.first_token_ns is not None else 0.0 for r in rs],
        "itls": [_gaps(r) for r in rs],
        "latencies": [(r.end_ns - r.sent_ns) / 1e9 for r in rs],
        "input_lens": [r.prompt_tokens for r in rs],
        "output_lens": [r.output_tokens if r.ok else 0 for r in rs],
        "errors": ["" if r.ok else (r.error_detail or str(r.error)) for r in rs],
    }


def _latency_keys(level: LevelResult) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, attr in _LATENCIES:
        lat: Latency = getattr(level, attr)
        for prefix, slot in _STATS:
            value = getattr(lat, slot)
            if value is not None:
                out[f"{prefix}_{name}_ms"] = value
    return out


def to_vllm_json(level: LevelResult, records: Sequence[RequestRecord] = (), result: ResultFile | None = None,
                 ) -> dict[str, Any]:
    """One level as a ``vllm bench serve`` result object (per-request lists when ``records`` are given)."""
    target = result.target if result is not None else None
    open_loop = level.mode == "rate" and level.rate is not None
    doc: dict[str, Any] = {
        "date": (result.created if result is not None else "") or "",
        "backend": (target.engine if target is not None else None) or "openai",
        "label": level.label,
        "model_id": target.model if target is not None else None,
        "num_prompts": level.num_requests,
        "request_rate": level.rate if open_loop else "inf",
        "max_concurrency": level.concurrency,
        "duration": level.duration_s,
        "completed": level.completed,
        "failed": level.failed,
        "total_input_tokens": level.input_tokens,
        "total_output_tokens": level.output_tokens,
        "request_throughput": level.request_throughput,
        "request_goodput": None,
        "output_throughput": level.output_throughput,
        **_latency_keys(level),
    }
    for key, value in (("total_token_throughput", level.total_throughput),
                       ("max_output_tokens_per_s", level.peak_output_throughput),
                       ("max_concurrent_requests", level.peak_in_flight)):
        if value:   # 0 is what a level holds when its source never measured it
            doc[key] = value
    if records:
        doc.update(_details(records))
    return doc


def vllm_json_lines(result: ResultFile, requests: Mapping[str, Sequence[RequestRecord]] | None = None) -> str:
    """Every level of ``result`` as vLLM result objects, one per line (``--format vllm-json``)."""
    requests = requests or {}
    lines = [json.dumps(to_vllm_json(lv, requests.get(lv.label, ()), result)) for lv in result.levels]
    return "\n".join(lines) + ("\n" if lines else "")
