"""inference-perf's lifecycle reports (``reports-YYYYMMDD-HHMMSS/``).

* ``stage_N_lifecycle_metrics.json`` (one per load stage) and ``summary_lifecycle_metrics.json`` (the whole
  run): ``load_summary`` (``count``; per stage ``requested_rate``, ``achieved_rate``, ``send_duration`` and,
  for concurrency stages, ``concurrency``), ``successes`` (``count``, ``latency.{request_latency,
  time_to_first_token, time_per_output_token, inter_token_latency}`` in seconds, ``throughput.{input_,
  output_, total_}tokens_per_sec`` and ``requests_per_sec``, ``prompt_len``/``output_len``, and since
  2025-08 ``prompt_tokens``/``output_tokens`` with ``total``) and ``failures`` (``count``,
  ``request_latency``, and lately ``by_label`` such as ``"504 - Gateway Timeout"``). Newer reports add
  ``benchmark_time_seconds``. Statistics are ``mean``, ``min``, ``max`` and percentiles: ``p10``/``p50``/
  ``p90`` in early reports, ``median`` and ``pNN`` (``p99``, ``p99.9``) later.
* ``per_request_lifecycle_metrics.json``: a list of ``{start_time, end_time, request, response, info,
  error}``; ``info.output_token_times`` (early) or ``info.response_metrics.{output_token_times,
  chunk_times, output_tokens}`` and ``info.request_metrics.text.input_tokens`` (later). The file mixes all
  stages, so it is imported as one level.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from plateau_bench.analysis.metrics import Window, full_window
from plateau_bench.importers.common import (
    TOKEN_SOURCE_IMPORTED,
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    dig,
    error_class,
    latency,
    level_label,
    ns,
    obj,
    records_level,
    spread_tokens,
    summary_level,
)
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency

NAME = "inference-perf"


def is_summary(o: dict[str, Any]) -> bool:
    return isinstance(o.get("successes"), dict) and ("load_summary" in o or "failures" in o)


def is_per_request(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], dict) and {"start_time", "end_time"} <= v[0].keys() \
        and ("info" in v[0] or "request" in v[0])


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _stat(d: Any, *keys: str) -> float | None:
    if not isinstance(d, dict):
        return None
    return next((float(d[k]) for k in keys if isinstance(d.get(k), int | float)), None)


def _seconds(d: Any) -> Latency | None:
    if not isinstance(d, dict):
        return None

    def ms(*keys: str) -> float | None:
        v = _stat(d, *keys)
        return v * 1000 if v is not None else None
    return latency(ms("mean"), ms("median", "p50"), ms("p90"), ms("p99"), ms("max"))


def _shape(load: dict[str, Any], opts: ImportOptions) -> tuple[str, int | None, float | None]:
    concurrency = load.get("concurrency") if isinstance(load.get("concurrency"), int) else opts.concurrency
    rate = _stat(load, "requested_rate")
    if concurrency:
        return "steady", concurrency, None
    return "rate", None, rate


def summary(o: dict[str, Any], where: Where, opts: ImportOptions, stage: str | None) -> ImportedLevel:
    load = _dict(o.get("load_summary"))
    ok = obj(o["successes"], where, "successes")
    bad = _dict(o.get("failures"))
    if not isinstance(ok.get("count"), int):
        raise where.missing("successes.count")
    mode, concurrency, rate = _shape(load, opts)
    label = level_label(mode, concurrency, rate)
    s = Summary(label if label != "level" else (f"stage {stage}" if stage else "summary"), mode,
                concurrency=concurrency, rate=rate, completed=ok["count"],
                failed=bad.get("count") if isinstance(bad.get("count"), int) else None,
                duration_s=_stat(o, "benchmark_time_seconds"))
    thr = ok.get("throughput") or {}
    s.output_throughput = _stat(thr, "output_tokens_per_sec")
    s.input_throughput = _stat(thr, "input_tokens_per_sec")
    s.total_throughput = _stat(thr, "total_tokens_per_sec")
    s.request_throughput = _stat(thr, "requests_per_sec")
    s.output_tokens = _stat(ok.get("output_tokens"), "total")
    s.input_tokens = _stat(ok.get("prompt_tokens"), "total")
    if s.output_tokens is None and isinstance(ok.get("output_len"), dict):
        mean = _stat(ok["output_len"], "mean")
        s.output_tokens = mean * s.completed if mean is not None and s.completed else None
    lat = ok.get("latency") or {}
    s.e2e, s.ttft = _seconds(lat.get("request_latency")), _seconds(lat.get("time_to_first_token"))
    s.tpot, s.itl = _seconds(lat.get("time_per_output_token")), _seconds(lat.get("inter_token_latency"))
    labels = bad.get("by_label")
    if isinstance(labels, dict):
        for name, entry in labels.items():
            n = entry.get("count") if isinstance(entry, dict) else None
            if isinstance(n, int) and n:
                cls = str(error_class(str(name)))
                s.errors[cls] = s.errors.get(cls, 0) + n
    if mode == "rate" and rate is None:
        s.notes.append("the report does not say the stage's rate or concurrency")
    return summary_level(s, f"{NAME}: {where}")


def _request(r: dict[str, Any], i: int, t0: float, where: Where) -> RequestRecord:
    start, end = r.get("start_time"), r.get("end_time")
    if not isinstance(start, int | float):
        raise where.missing(f"[{i}].start_time")
    if not isinstance(end, int | float):
        raise where.missing(f"[{i}].end_time")
    info = _dict(r.get("info"))
    resp = _dict(info.get("response_metrics"))
    out = resp.get("output_tokens", info.get("output_tokens"))
    out = out if isinstance(out, int) else 0
    prompt = dig(info, "request_metrics", "text", "input_tokens") or info.get("input_tokens") or 0
    token_times = resp.get("output_token_times") or info.get("output_token_times") or []
    chunk_times = resp.get("chunk_times") or []
    times = token_times if token_times and (len(token_times) == out or not chunk_times) else chunk_times
    sent = ns(float(start) - t0)
    err = r.get("error")
    if err:
        text = f"{dig(err, 'error_type') or ''}: {dig(err, 'error_msg') or ''}"
        return RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, end_ns=ns(float(end) - t0),
                             prompt_tokens=int(prompt), token_source=TOKEN_SOURCE_IMPORTED, error=error_class(text),
                             error_detail=text[:500])
    chunks = [ns(float(t) - t0) for t in times if isinstance(t, int | float)]
    return RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, end_ns=max(ns(float(end) - t0), *chunks[-1:]),
                         first_token_ns=chunks[0] if chunks else None, chunk_ns=chunks,
                         chunk_tokens=spread_tokens(out, len(chunks)), prompt_tokens=int(prompt), output_tokens=out,
                         token_source=TOKEN_SOURCE_IMPORTED)


def per_request(items: list[Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    rows = [obj(r, where, f"entry {i}") for i, r in enumerate(items)]
    starts = [float(r["start_time"]) for r in rows if isinstance(r.get("start_time"), int | float)]
    if not starts:
        raise where.missing("[0].start_time")
    t0 = min(starts)
    records = [_request(r, i, t0, where) for i, r in enumerate(rows)]
    mode = "steady" if opts.concurrency else "rate"
    notes = ["the per-request report mixes every stage of the run: one level"]
    window: Window | None = None
    if mode == "steady":
        whole = full_window(records)
        window = Window(whole.start_ns, whole.end_ns, "whole level: ramp-up and drain not excluded")
    return records_level(records, label=level_label(mode, opts.concurrency, None), mode=mode,
                         concurrency=opts.concurrency, rate=None, source=f"{NAME}: {where}", notes=notes,
                         window=window)


def stage_of(path: Path) -> str | None:
    m = re.search(r"stage_(\d+)", path.name)
    return m.group(1) if m else None
