"""NVIDIA AIPerf's profile exports (``aiperf profile ... --artifact-dir DIR``): one run's files.

* ``profile_export.jsonl``: one line per request, ``{"metadata": {...}, "metrics": {...}, "error": ...}``.
  ``metadata.request_start_ns``/``request_end_ns`` are epoch ns, ``benchmark_phase`` is ``warmup`` or
  ``profiling``; each metric is ``{"value": ..., "unit": ...}``: ``time_to_first_token``,
  ``inter_chunk_latency`` (a list: the gaps between chunks), ``request_latency``,
  ``output_sequence_length`` (or ``output_token_count``), ``input_sequence_length`` (``error_isl`` on
  failed requests), and, when the server sent usage, ``usage_completion_tokens``/``usage_prompt_tokens``;
  ``error`` is ``{"code", "type", "message"}``, null or absent. These become request records.
  ``profile_export_raw.jsonl`` lines share the metadata but carry the payload and the raw responses
  instead of ``metrics``: they are not read as records (``is_raw``).
* ``profile_export_aiperf.json``: the run's aggregate. Since 2025-10 each metric is a top-level block
  ``{"unit", "avg", "p1".."p99", "min", "max", "std"[, "count", "sum"]}`` (newer files add
  ``schema_version`` and ``aiperf_version``); before that the blocks sat under ``"records"`` with a
  ``tag`` and ``header``. The load: schema 1.x keeps it in ``input_config.phases`` (the phase of kind
  ``profiling``: ``type`` ``concurrency`` with ``concurrency``, or a rate type -- ``poisson``, ``gamma``,
  ``constant``, ``user_centric`` -- with ``rate``; ``requests`` and ``duration`` are its stop
  conditions); older files in ``input_config.loadgen`` (``concurrency``, ``request_rate``,
  ``request_count``, ``benchmark_duration``). ``run_config.json`` next to the exports holds the same
  configuration under ``cfg``.

A level's figures from the blocks: ``request_count`` (successful requests), ``error_request_count``,
``benchmark_duration``, ``request_throughput``, ``output_token_throughput``, ``total_output_tokens``,
``total_isl``, ``request_latency``, ``time_to_first_token``, ``inter_token_latency`` (AIPerf's ITL is
(latency - TTFT) / (OSL - 1): our TPOT) and ``inter_chunk_latency`` (our per-chunk ITL).

Token counts: AIPerf counts output tokens with the tokenizer it was given; the server's own count
(``usage_*``) is what the engine generated, so it is preferred where present and the notes say when the
two differ.

A records file and an aggregate in the same directory are one level.

GenAI-Perf, AIPerf's predecessor, writes the same blocks in ``profile_export_genai_perf.json`` with its own
configuration as ``input_config`` (``is_genai_perf``): the load in ``perf_analyzer.stimulus`` (0.0.16)
or flat in its arguments (older releases, 0.0.8 among them); perf_analyzer keeps a concurrency over its
measurement windows, so it is a steady level. Older releases (0.0.8) write no ``request_count`` block
(``importers.aiperf_runs`` counts perf_analyzer's export beside it).
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
RATE_PHASES = ("poisson", "gamma", "constant", "user_centric", "request_rate")
OUTPUT_COUNTS = ("usage_completion_tokens", "output_sequence_length", "output_token_count")
PROMPT_COUNTS = ("usage_prompt_tokens", "input_sequence_length", "error_isl")
TPOT_NOTE = ("TPOT: {tool}'s inter-token latency ((latency - TTFT) / (output tokens - 1)); ITL: its inter-chunk "
             "latency")
Load = tuple[str, int | None, float | None]    # mode, concurrency, rate


def is_raw(o: dict[str, Any]) -> bool:
    """A line of ``profile_export_raw.jsonl``: the request's payload and responses, no metrics."""
    return (isinstance(o.get("metadata"), dict) and "metrics" not in o
            and any(k in o for k in ("responses", "payload", "start_perf_ns")))


def is_record(o: dict[str, Any]) -> bool:
    return isinstance(o.get("metadata"), dict) and "request_start_ns" in o["metadata"] and not is_raw(o)


def part(o: Any, key: str) -> dict[str, Any]:
    """``o[key]`` when it is an object, else an empty one (a field absent or of another type says nothing)."""
    value = o.get(key) if isinstance(o, dict) else None
    return value if isinstance(value, dict) else {}


def blocks_of(o: dict[str, Any]) -> dict[str, Any]:
    return o["records"] if isinstance(o.get("records"), dict) else o


def is_aggregate(o: dict[str, Any]) -> bool:
    if "input_config" in o and ("records" in o or "request_latency" in o or "request_count" in o):
        return True
    block = blocks_of(o).get("request_latency")
    return isinstance(block, dict) and "unit" in block and "avg" in block


def identity(o: dict[str, Any] | None, what: str) -> str:
    """``AIPerf 0.13.0 <what> (schema 1.4)``: the tool and the version a file says it came from."""
    o = o or {}
    if is_genai_perf(part(o, "input_config")):
        return f"GenAI-Perf {what}"
    version = o.get("aiperf_version")
    schema = o.get("schema_version")
    return (f"AIPerf{f' {version}' if isinstance(version, str) else ''} {what}"
            + (f" (schema {schema})" if isinstance(schema, str | int) else ""))


# -- the load a run was measured at --------------------------------------------------------------
def _profiling_phases(config: dict[str, Any]) -> list[dict[str, Any]]:
    phases = config.get("phases")
    if not isinstance(phases, list):
        return []
    return [p for p in phases if isinstance(p, dict) and (p.get("kind") or p.get("name")) == "profiling"]


def is_genai_perf(config: dict[str, Any] | None) -> bool:
    """An ``input_config`` GenAI-Perf wrote (AIPerf's predecessor, the same metric blocks): its configuration
    object (0.0.16: ``perf_analyzer.stimulus``) or its command-line arguments (older ones, 0.0.8 among them: a flat
    ``concurrency``/``request_rate`` beside ``service_kind``)."""
    config = config or {}
    return "stimulus" in part(config, "perf_analyzer") or ("service_kind" in config and "loadgen" not in config)


def _genai_perf_load(config: dict[str, Any], opts: ImportOptions) -> Load | None:
    """GenAI-Perf's load: perf_analyzer keeps the concurrency (or the request rate) over its measurement
    windows, so a concurrency is a steady level."""
    stimulus = part(part(config, "perf_analyzer"), "stimulus") or config
    rate, concurrency = stimulus.get("request_rate"), stimulus.get("concurrency")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0:
        return "rate", None, float(rate)
    if isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency > 0:
        return "steady", concurrency, None
    return ("steady", opts.concurrency, None) if opts.concurrency else None


def config_load(config: dict[str, Any] | None, opts: ImportOptions) -> Load | None:
    """The load an AIPerf configuration (``input_config`` or ``run_config.json``'s ``cfg``) states, or
    GenAI-Perf's (``is_genai_perf``)."""
    config = config or {}
    if is_genai_perf(config):
        return _genai_perf_load(config, opts)
    phases = _profiling_phases(config)
    if phases:
        phase = phases[0]
        concurrency = phase.get("concurrency") if isinstance(phase.get("concurrency"), int) else None
        rate = phase.get("rate") if isinstance(phase.get("rate"), int | float) else None
        if phase.get("type") in RATE_PHASES or rate:
            return "rate", concurrency, float(rate) if rate else None
        if phase.get("type") == "fixed_schedule":
            return "rate", concurrency, None
        concurrency = concurrency or opts.concurrency
        if concurrency is None:
            return None
        return ("steady" if phase.get("duration") else "burst"), concurrency, None
    loadgen = part(config, "loadgen")
    rate = loadgen.get("request_rate") if isinstance(loadgen.get("request_rate"), int | float) else None
    concurrency = loadgen.get("concurrency") if isinstance(loadgen.get("concurrency"), int) else opts.concurrency
    if rate:
        return "rate", concurrency, float(rate)
    if concurrency is None:
        return None
    return ("steady" if loadgen.get("benchmark_duration") else "burst"), concurrency, None


def missing_load(config: dict[str, Any] | None, where: Where, what: str, hint: str) -> Exception:
    """The one-line error for a run whose load no file states: the field its layout keeps it in."""
    config = config or {}
    key = ("input_config.perf_analyzer.stimulus.concurrency" if "perf_analyzer" in config
           else "input_config.concurrency" if is_genai_perf(config)
           else "input_config.loadgen.concurrency" if "loadgen" in config or "phases" not in config
           else "input_config.phases[profiling].concurrency")
    return where.fail(f"{what}: missing field '{key}' ({hint})")


# -- per-request records ------------------------------------------------------------------------
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
    prompt = _count(metrics, PROMPT_COUNTS, where)
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
    out = _count(metrics, OUTPUT_COUNTS, where)
    return RequestRecord(index=index, scheduled_ns=sent, sent_ns=sent, end_ns=max(end - t0, chunks[-1] if chunks
                         else sent), first_token_ns=first, chunk_ns=chunks,
                         chunk_tokens=spread_tokens(out, len(chunks)), prompt_tokens=prompt, output_tokens=out,
                         token_source=TOKEN_SOURCE_IMPORTED, warmup=warmup)


def _token_note(objs: list[tuple[dict[str, Any], Where]]) -> str | None:
    """A note when AIPerf's own output token count differs from the server's by more than 5 % (measured
    requests)."""
    server = client = 0
    for o, w in objs:
        metrics = o.get("metrics") or {}
        measured = o["metadata"].get("benchmark_phase") != "warmup" and not o.get("error")
        if measured and isinstance(metrics, dict) and "usage_completion_tokens" in metrics:
            server += _count(metrics, OUTPUT_COUNTS[:1], w)
            client += _count(metrics, OUTPUT_COUNTS[1:], w)
    if not server or not client or abs(client / server - 1) <= 0.05:
        return None
    return (f"output tokens: the server's usage counts ({server:,} in all); AIPerf's tokenizer counted {client:,} "
            f"({client / server - 1:+.0%})")


def records_run(lines: list[tuple[Any, Where]], load: Load | None, source: str, opts: ImportOptions,
                ) -> ImportedLevel:
    """One level from the per-request lines, at ``load`` (from the aggregate or the run's configuration)."""
    first = lines[0][1]
    objs = [(obj(v, w, "an AIPerf record"), w) for v, w in lines]
    starts = [integer(need(o, "metadata", w), "request_start_ns", w, required=True) for o, w in objs]
    profiled = [s for (o, _), s in zip(objs, starts, strict=True)
                if s is not None and o["metadata"].get("benchmark_phase") != "warmup"]
    if not profiled:
        raise first.fail("no profiling-phase request in the AIPerf records")
    t0 = min(profiled)
    records = [record(o, w, i, t0) for i, (o, w) in enumerate(objs)]
    if load is None:
        vintage: dict[str, Any] = {"phases": []} if any("phase_kind" in o["metadata"] for o, _ in objs) \
            else {"loadgen": {}}
        raise missing_load(vintage, first, "AIPerf per-request records", "pass the run's profile export JSON too "
                           "(profile_export_aiperf.json, or <prefix>.json), or --concurrency")
    mode, concurrency, rate = load
    window: Window | None = None
    if mode == "steady":
        whole = full_window(records)
        window = Window(whole.start_ns, whole.end_ns, "whole level: ramp-up and drain not excluded (the records do "
                        "not say which concurrency slot sent each request)")
    note = _token_note(objs)
    return records_level(records, label=level_label(mode, concurrency, rate), mode=mode, concurrency=concurrency,
                         rate=rate, source=source, window=window, notes=[note] if note else [])


# -- level summaries from metric blocks ----------------------------------------------------------
def _avg(blocks: dict[str, Any], tag: str) -> float | None:
    b = blocks.get(tag)
    return float(b["avg"]) if isinstance(b, dict) and isinstance(b.get("avg"), int | float) else None


def _latency(blocks: dict[str, Any], tag: str, where: Where) -> Latency | None:
    b = blocks.get(tag)
    if not isinstance(b, dict):
        return None

    def ms(key: str) -> float | None:
        v = b.get(key)
        return to_ms(float(v), str(b.get("unit") or "ms"), where, tag) if isinstance(v, int | float) else None
    count = b.get("count")
    return latency(ms("avg"), ms("p50"), ms("p90"), ms("p99"), ms("max"), count if isinstance(count, int) else 0)


def _error_classes(error_summary: Any) -> dict[str, int]:
    classes: dict[str, int] = {}
    for entry in error_summary if isinstance(error_summary, list) else []:
        details = dig(entry, "error_details") or {}
        n = dig(entry, "count")
        if isinstance(n, int) and n > 0 and isinstance(details, dict):
            code = details.get("code") if isinstance(details.get("code"), int) else None
            cls = str(error_class(f"{details.get('type') or ''}: {details.get('message') or ''}", code))
            classes[cls] = classes.get(cls, 0) + n
    return classes


def _output_tokens(blocks: dict[str, Any], duration: float | None) -> tuple[float | None, float | None, float]:
    """Output tokens, tok/s, and the factor to bring AIPerf's ITL to the server's count (1: AIPerf's own count).

    The server's usage count is taken where it differs from AIPerf's own by more than 5 %. AIPerf's ITL
    per request is decode time / (its output tokens - 1), so it is scaled by (own - 1) / (usage - 1) per
    request, exact when every request has the same lengths (the notes say so).
    """
    own = _avg(blocks, "total_output_tokens") or _avg(blocks, "total_osl")
    rate = _avg(blocks, "output_token_throughput")
    usage = _avg(blocks, "total_usage_completion_tokens")
    if not usage or not own or abs(own / usage - 1) <= 0.05:
        return own or usage, rate, 1.0
    per_own, per_usage = _avg(blocks, "output_sequence_length"), _avg(blocks, "usage_completion_tokens")
    factor = (per_own - 1) / (per_usage - 1) if per_own and per_usage and per_usage > 1 else 0.0
    return usage, usage / duration if duration else None, factor


def _token_notes(blocks: dict[str, Any], factor: float) -> list[str]:
    if factor == 1.0:
        return []
    own = _avg(blocks, "total_output_tokens") or _avg(blocks, "total_osl") or 0.0
    usage = _avg(blocks, "total_usage_completion_tokens") or 0.0
    notes = [f"output tokens: the server's usage counts ({usage:,.0f}); AIPerf's tokenizer counted {own:,.0f} "
             f"({own / usage - 1:+.0%})"]
    notes.append("TPOT: AIPerf's inter-token latency x (its tokens - 1) / (the server's - 1) per request on average"
                 if factor else "TPOT: not stated (AIPerf's is per its own token count, unlike the server's)")
    return notes


def _scaled(lat: Latency | None, factor: float) -> Latency | None:
    if lat is None or factor == 1.0:
        return lat
    if not factor:
        return None

    def f(v: float | None) -> float | None:
        return v * factor if v is not None else None
    return latency(f(lat.mean), f(lat.p50), f(lat.p90), f(lat.p99), f(lat.max), lat.count)


def _sweep_line(blocks: dict[str, Any], tag: str) -> tuple[float | None, int | None]:
    """AIPerf's time-weighted average and peak of a concurrency curve (``effective_*``: start or first token
    to end of each request, swept over the run)."""
    b = blocks.get(tag)
    if not isinstance(b, dict):
        return None, None
    peak = b.get("max")
    return _avg(blocks, tag), round(peak) if isinstance(peak, int | float) and peak >= 0 else None


def blocks_summary(blocks: dict[str, Any], load: Load, where: Where, source: str, *, errors: Any = None,
                   notes: tuple[str, ...] = (), tool: str = "AIPerf") -> ImportedLevel:
    """A level from AIPerf's metric blocks (``{tag: {"unit", "avg", "p50", ...}}``) at ``load`` (``tool``: which
    wrote them; GenAI-Perf's are the same)."""
    mode, concurrency, rate = load
    count = _avg(blocks, "request_count")
    if count is None:
        raise where.missing("request_count", "the number of successful requests")
    failed = _avg(blocks, "error_request_count")
    duration = _avg(blocks, "benchmark_duration")
    output_tokens, output_rate, factor = _output_tokens(blocks, duration)
    in_flight, peak_in_flight = _sweep_line(blocks, "effective_concurrency")
    decoding, peak_decoding = _sweep_line(blocks, "effective_decode_concurrency")
    s = Summary(level_label(mode, concurrency, rate), mode, concurrency=concurrency, rate=rate,
                completed=round(count), failed=round(failed) if failed is not None else 0,
                errors=_error_classes(errors), duration_s=duration,
                request_throughput=_avg(blocks, "request_throughput"), output_throughput=output_rate,
                output_tokens=output_tokens, input_tokens=_avg(blocks, "total_usage_prompt_tokens")
                or _avg(blocks, "total_isl"), e2e=_latency(blocks, "request_latency", where),
                ttft=_latency(blocks, "time_to_first_token", where),
                tpot=_scaled(_latency(blocks, "inter_token_latency", where), factor),
                itl=_latency(blocks, "inter_chunk_latency", where), achieved_concurrency=in_flight,
                decoding_concurrency=decoding, peak_in_flight=peak_in_flight, peak_decoding=peak_decoding)
    s.notes.extend([*notes, TPOT_NOTE.format(tool=tool), *_token_notes(blocks, factor)])
    if peak_decoding is not None:
        s.notes.append("concurrency (time-average and peak, in flight and decoding): AIPerf's effective concurrency "
                       "curves")
    return summary_level(s, f"{tool.lower()}: {source}")


def summary(agg: dict[str, Any], where: Where, opts: ImportOptions, load: Load | None = None) -> ImportedLevel:
    """The level of one run's ``profile_export_aiperf.json`` (``load``: from elsewhere when it has none)."""
    config = part(agg, "input_config")
    load = config_load(config, opts) or load
    if load is None:
        raise missing_load(config, where, identity(agg, "profile export"), "pass --concurrency")
    return blocks_summary(blocks_of(agg), load, where, str(where), errors=agg.get("error_summary"),
                          tool="GenAI-Perf" if is_genai_perf(config) else "AIPerf")


def model(agg: dict[str, Any] | None) -> str | None:
    """The model a run's configuration names (schema 1.x ``models.items``, older ``endpoint.model_names``)."""
    config = agg or {}
    items = dig(config, "models", "items")
    if isinstance(items, list) and items and isinstance(items[0], dict) and items[0].get("name"):
        return str(items[0]["name"])
    names = dig(config, "endpoint", "model_names") or config.get("model_names") or config.get("model")
    return str(names[0]) if isinstance(names, list) and names else None
