"""NVIDIA AIPerf's profile exports (``aiperf profile ... --artifact-dir DIR``).

* ``profile_export.jsonl``: one line per request, ``{"metadata": {...}, "metrics": {...}, "error": ...}``.
  ``metadata.request_start_ns``/``request_end_ns`` are epoch ns, ``benchmark_phase`` is ``warmup`` or
  ``profiling``; each metric is ``{"value": ..., "unit": ...}``: ``time_to_first_token``,
  ``inter_chunk_latency`` (a list: the gaps between chunks), ``request_latency``,
  ``output_sequence_length`` (or ``output_token_count``), ``input_sequence_length`` (``error_isl`` on
  failed requests); ``error`` is ``{"code", "type", "message"}`` or null. These become request records.
* ``profile_export_aiperf.json``: the run's aggregate. Since 2025-10 each metric is a top-level block
  ``{"unit", "avg", "p1".."p99", "min", "max", "std"[, "count", "sum"]}`` (newer files add
  ``schema_version``); before that the blocks sat under ``"records"`` with a ``tag`` and ``header``.
  ``input_config.loadgen`` holds ``concurrency``, ``request_rate``, ``request_count`` and
  ``benchmark_duration``. Read for the level's load, and for its figures when no records are given:
  ``request_count``, ``error_request_count``, ``benchmark_duration``, ``request_throughput``,
  ``output_token_throughput``, ``total_output_tokens``, ``total_isl``, ``request_latency``,
  ``time_to_first_token``, ``inter_token_latency`` (AIPerf's ITL is (latency - TTFT) / (OSL - 1): our
  TPOT) and ``inter_chunk_latency`` (our per-chunk ITL).

A records file and an aggregate in the same directory are one level.
"""

from __future__ import annotations

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
    integer,
    latency,
    level_label,
    need,
    obj,
    records_level,
    spread_tokens,
    summary_level,
    to_ms,
)
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency

NAME = "aiperf"
MS_NS = 1_000_000


def is_record(o: dict[str, Any]) -> bool:
    return isinstance(o.get("metadata"), dict) and "request_start_ns" in o["metadata"]


def is_aggregate(o: dict[str, Any]) -> bool:
    if "input_config" in o and ("records" in o or "request_latency" in o or "request_count" in o):
        return True
    blocks = o.get("records") if isinstance(o.get("records"), dict) else o
    block = blocks.get("request_latency") if isinstance(blocks, dict) else None
    return isinstance(block, dict) and "unit" in block and "avg" in block


def _value(metrics: dict[str, Any], name: str, where: Where) -> tuple[Any, str | None] | None:
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise where.fail(f"metric '{name}' has no 'value'")
    return m["value"], m.get("unit")


def _ns(metrics: dict[str, Any], name: str, where: Where) -> int | None:
    found = _value(metrics, name, where)
    if found is None or not isinstance(found[0], int | float):
        return None
    return round(to_ms(float(found[0]), found[1], where, name) * MS_NS)


def _count(metrics: dict[str, Any], names: tuple[str, ...], where: Where) -> int:
    for name in names:
        found = _value(metrics, name, where)
        if found is not None and isinstance(found[0], int | float):
            return round(found[0])
    return 0


def _chunks(metrics: dict[str, Any], first: int | None, where: Where) -> list[int]:
    found = _value(metrics, "inter_chunk_latency", where)
    if first is None or found is None or not isinstance(found[0], list):
        return []
    out, t = [first], first
    for gap in found[0]:
        if not isinstance(gap, int | float):
            raise where.fail("metric 'inter_chunk_latency' has a value that is not a number")
        t += round(to_ms(float(gap), found[1], where, "inter_chunk_latency") * MS_NS)
        out.append(t)
    return out


def record(o: dict[str, Any], where: Where, index: int, t0: int) -> RequestRecord:
    md = obj(need(o, "metadata", where), where, "metadata")
    start = integer(md, "request_start_ns", where, required=True)
    end = integer(md, "request_end_ns", where, required=True)
    assert start is not None and end is not None
    metrics = o.get("metrics") or {}
    error = o.get("error")
    sent = start - t0
    warmup = md.get("benchmark_phase") == "warmup"
    prompt = _count(metrics, ("input_sequence_length", "error_isl"), where)
    if error:
        err = obj(error, where, "error")
        code = err.get("code") if isinstance(err.get("code"), int) else None
        text = f"{err.get('type') or ''}: {err.get('message') or ''}"
        return RequestRecord(index=index, scheduled_ns=sent, sent_ns=sent, end_ns=end - t0, prompt_tokens=prompt,
                             token_source=TOKEN_SOURCE_IMPORTED, error=error_class(text, code), http_status=code,
                             error_detail=text[:500], warmup=warmup)
    ttft = _ns(metrics, "time_to_first_token", where)
    first = sent + ttft if ttft is not None else None
    chunks = _chunks(metrics, first, where)
    out = _count(metrics, ("output_sequence_length", "output_token_count"), where)
    return RequestRecord(index=index, scheduled_ns=sent, sent_ns=sent, end_ns=max(end - t0, chunks[-1] if chunks
                         else sent), first_token_ns=first, chunk_ns=chunks,
                         chunk_tokens=spread_tokens(out, len(chunks)), prompt_tokens=prompt, output_tokens=out,
                         token_source=TOKEN_SOURCE_IMPORTED, warmup=warmup)


def _block(agg: dict[str, Any], tag: str) -> dict[str, Any] | None:
    blocks = agg.get("records") if isinstance(agg.get("records"), dict) else agg
    b = blocks.get(tag) if isinstance(blocks, dict) else None
    return b if isinstance(b, dict) and "unit" in b else None


def _avg(agg: dict[str, Any], tag: str) -> float | None:
    b = _block(agg, tag)
    return float(b["avg"]) if b and isinstance(b.get("avg"), int | float) else None


def _latency(agg: dict[str, Any], tag: str, where: Where) -> Latency | None:
    b = _block(agg, tag)
    if b is None:
        return None

    def ms(key: str) -> float | None:
        v = b.get(key)
        return to_ms(float(v), str(b.get("unit")), where, tag) if isinstance(v, int | float) else None
    return latency(ms("avg"), ms("p50"), ms("p90"), ms("p99"), ms("max"), int(b.get("count") or 0))


def shape(agg: dict[str, Any] | None, opts: ImportOptions, where: Where) -> tuple[str, int | None, float | None]:
    loadgen = dig(agg or {}, "input_config", "loadgen") or {}
    rate = loadgen.get("request_rate") if isinstance(loadgen.get("request_rate"), int | float) else None
    concurrency = loadgen.get("concurrency") if isinstance(loadgen.get("concurrency"), int) else opts.concurrency
    if rate:
        return "rate", concurrency, float(rate)
    if concurrency is None:
        raise where.missing("input_config.loadgen.concurrency", "pass profile_export_aiperf.json too, or "
                            "--concurrency")
    return ("steady" if loadgen.get("benchmark_duration") else "burst"), concurrency, None


def summary(agg: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    mode, concurrency, rate = shape(agg, opts, where)
    count = _avg(agg, "request_count")
    if count is None:
        raise where.missing("request_count")
    errors = _avg(agg, "error_request_count")
    classes: dict[str, int] = {}
    for entry in agg.get("error_summary") or []:
        details = dig(entry, "error_details") or {}
        n = dig(entry, "count")
        if isinstance(n, int) and n:
            code = details.get("code") if isinstance(details.get("code"), int) else None
            cls = str(error_class(f"{details.get('type') or ''}: {details.get('message') or ''}", code))
            classes[cls] = classes.get(cls, 0) + n
    s = Summary(level_label(mode, concurrency, rate), mode, concurrency=concurrency, rate=rate,
                completed=round(count), failed=round(errors) if errors is not None else 0, errors=classes,
                duration_s=_avg(agg, "benchmark_duration"), request_throughput=_avg(agg, "request_throughput"),
                output_throughput=_avg(agg, "output_token_throughput"),
                output_tokens=_avg(agg, "total_output_tokens") or _avg(agg, "total_osl"),
                input_tokens=_avg(agg, "total_isl"), e2e=_latency(agg, "request_latency", where),
                ttft=_latency(agg, "time_to_first_token", where), tpot=_latency(agg, "inter_token_latency", where),
                itl=_latency(agg, "inter_chunk_latency", where))
    s.notes.append("TPOT: AIPerf's inter-token latency ((latency - TTFT) / (output tokens - 1)); ITL: its "
                   "inter-chunk latency")
    return summary_level(s, f"{NAME}: {where}")


def records_run(lines: list[tuple[Any, Where]], agg: dict[str, Any] | None, agg_where: Where | None,
                opts: ImportOptions) -> ImportedLevel:
    """One level from the per-request lines (and the aggregate's load settings)."""
    first = lines[0][1]
    objs = [(obj(v, w, "an AIPerf record"), w) for v, w in lines]
    starts = [integer(need(o, "metadata", w), "request_start_ns", w, required=True) for o, w in objs]
    profiled = [s for (o, _), s in zip(objs, starts, strict=True)
                if s is not None and o["metadata"].get("benchmark_phase") != "warmup"]
    if not profiled:
        raise first.fail("no profiling-phase request in the AIPerf records")
    t0 = min(profiled)
    records = [record(o, w, i, t0) for i, (o, w) in enumerate(objs)]
    mode, concurrency, rate = shape(agg, opts, agg_where or first)
    source = f"{NAME}: {first.path}" + (f" with {agg_where.path}" if agg_where else "")
    window: Window | None = None
    if mode == "steady":
        whole = full_window(records)
        window = Window(whole.start_ns, whole.end_ns, "whole level: ramp-up and drain not excluded (the records do "
                        "not say which concurrency slot sent each request)")
    return records_level(records, label=level_label(mode, concurrency, rate), mode=mode, concurrency=concurrency,
                         rate=rate, source=source, window=window)


def model(agg: dict[str, Any] | None) -> str | None:
    names = dig(agg or {}, "input_config", "endpoint", "model_names")
    return str(names[0]) if isinstance(names, list) and names else None
