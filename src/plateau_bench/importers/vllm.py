"""vLLM's serving benchmark results: ``benchmarks/benchmark_serving.py --save-result`` and
``vllm bench serve --save-result [--save-detailed] [--append-result]``.

One JSON object per run (``--append-result`` appends one per line). Keys read, by generation:

* all: ``duration`` (s), ``completed``, ``total_input_tokens``, ``total_output_tokens``,
  ``output_throughput``, ``mean_/median_/p99_{ttft,tpot,itl}_ms`` (``pNN`` as ``--metric-percentiles``
  asked), ``num_prompts``, ``request_rate`` (``"inf"`` for a burst), ``max_concurrency``, ``model_id``,
  ``backend``;
* v0.4-era: ``request_inthroughput`` (sic) and ``input_throughput`` (input tok/s);
* later: ``request_throughput``, ``total_token_throughput``, ``*_e2el_ms``, ``request_goodput`` (once
  spelled ``request_goodput:``);
* ``vllm bench serve``: ``failed``, ``max_output_tokens_per_s`` (peak output tok/s in 1 s buckets),
  ``max_concurrent_requests`` (peak in flight), ``endpoint_type``, ``label``;
* ``--save-detailed``: the per-request lists (``importers.lists``), and in ``vllm bench serve`` also
  ``start_times``, ``latencies`` and ``queue_times`` (0.32 writes ``latencies`` and ``queue_times`` even
  without it);
* 0.32: ``rtfx``, ``*_client_queue_time_ms``, ``probe_*``, ``ramp_up_*``; ``max_concurrent_requests`` counts
  the requests active within the busiest 1 s bucket (capped at the client's limit here);
* the Rust client ``vllm-bench`` and ``vllm bench sweep serve``'s files: ``importers.vllm_rust``,
  ``importers.vllm_sweep``.

A level is a burst when the rate is unlimited (C = ``max_concurrency``, else ``num_prompts``), open loop
(``rate``) otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers import vllm_rust
from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    cross_check,
    integer,
    level_label,
    number,
    obj,
    records_level,
    summary_level,
)
from plateau_bench.importers.lists import detailed_records, error_counts, has_details, ms_stats

NAME = "vllm"
ENGINES = {"vllm": "vllm", "openai": None, "sglang": "sglang", "tgi": "tgi", "llama.cpp": "llamacpp",
           "llamacpp": "llamacpp"}
MARKS = ("mean_e2el_ms", "median_e2el_ms", "request_inthroughput", "total_token_throughput", "num_prompts",
         "model_id", "tokenizer_id", "endpoint_type", "request_goodput", "request_goodput:", "burstiness", "rtfx",
         *vllm_rust.MARKS)


def score(o: dict[str, Any]) -> int:
    """How much ``o`` looks like a vLLM result (0: not at all)."""
    if "duration" not in o or "completed" not in o:
        return 0
    return 1 + sum(2 for k in MARKS if k in o)


def generation(o: dict[str, Any]) -> str | None:
    """Which vLLM client and version a result's keys say it came from (for error messages); None when
    it has none of the keys that tell."""
    if not any(k in o for k in MARKS):
        return None
    if vllm_rust.is_multi_turn(o):
        return "a multi-turn result of vLLM's Rust client vllm-bench"
    if "steady_state" in o or "failed_requests" in o:
        return "vLLM's Rust client vllm-bench"
    if "rtfx" in o or "queue_times" in o:
        return "vllm bench serve (0.1x or later, like 0.32)"
    if "max_concurrent_requests" in o or "endpoint_type" in o:
        return "vllm bench serve (2025)"
    if "request_inthroughput" in o:
        return "vLLM benchmarks/benchmark_serving.py (v0.4 era)"
    return "vLLM benchmarks/benchmark_serving.py"


def _peak_in_flight(o: dict[str, Any], where: Where, limit: int | None, notes: list[str]) -> int | None:
    """``max_concurrent_requests`` counts the requests active at any time within a 1 s bucket: more than
    were ever in flight at once on a short run, never more than the client let out."""
    peak = integer(o, "max_concurrent_requests", where)
    if peak is not None and limit and peak > limit:
        notes.append(f"peak in flight: vLLM's per-second count ({peak}) capped at the client's limit {limit}")
        return limit
    return peak


def shape(o: dict[str, Any], where: Where, opts: ImportOptions, sent: int | None,
          ) -> tuple[str, int | None, float, bool]:
    """(mode, concurrency, rate, all sent at once) of a saved level."""
    rate = number(o, "request_rate", where)
    rate = math.inf if rate is None or rate <= 0 else rate
    cap = integer(o, "max_concurrency", where)
    if not math.isinf(rate):
        return "rate", cap, rate, False
    concurrency = cap or sent or opts.concurrency
    if concurrency is None:
        raise where.missing("num_prompts", "or max_concurrency, or give --concurrency")
    return "burst", concurrency, rate, cap is None or (sent is not None and cap >= sent)


def _summary(o: dict[str, Any], where: Where, mode: str, concurrency: int | None, rate: float,
             sent: int | None) -> Summary:
    s = Summary(level_label(mode, concurrency, rate), mode, concurrency=concurrency, rate=rate, num_requests=sent,
                completed=integer(o, "completed", where, required=True), failed=integer(o, "failed", where),
                errors=error_counts(o) or vllm_rust.failed_errors(o),
                duration_s=number(o, "duration", where, required=True))
    s.output_tokens = number(o, "total_output_tokens", where)
    s.input_tokens = number(o, "total_input_tokens", where)
    s.output_throughput = number(o, "output_throughput", where)
    s.input_throughput = number(o, "input_throughput", where)
    s.total_throughput = number(o, "total_token_throughput", where)
    s.request_throughput = number(o, "request_throughput", where) or number(o, "request_inthroughput", where)
    s.peak_output_throughput = number(o, "max_output_tokens_per_s", where)
    s.peak_in_flight = _peak_in_flight(o, where, concurrency, s.notes)
    s.ttft, s.tpot = ms_stats(o, "ttft", where), ms_stats(o, "tpot", where)
    s.itl, s.e2e = ms_stats(o, "itl", where), ms_stats(o, "e2el", where)
    if s.itl is not None:
        s.notes.append("ITL as vLLM measures it: per chunk gap, not divided by the tokens a chunk carried")
    return s


def level(o: dict[str, Any], where: Where, opts: ImportOptions, tool: str = NAME) -> ImportedLevel:
    """One saved vLLM result as a level: from its per-request lists when it has them, else its summary."""
    if vllm_rust.is_multi_turn(o):
        return vllm_rust.multi_turn_level(o, where, opts)
    lv = _level(o, where, opts, tool)
    lv.level.notes.extend(vllm_rust.notes(o, where))
    goodput = number(o, "request_goodput", where) or number(o, "request_goodput:", where)
    if goodput is not None:
        lv.level.goodput_rps = goodput
        lv.level.notes.append(f"goodput (--goodput SLOs): {goodput:.2f} req/s met every SLO")
    return lv


def _level(o: dict[str, Any], where: Where, opts: ImportOptions, tool: str) -> ImportedLevel:
    for key in ("duration", "completed"):   # every generation writes both
        number(o, key, where, required=True)
    sent = integer(o, "num_prompts", where) or (len(o["ttfts"]) if has_details(o) else None)
    mode, concurrency, rate, at_once = shape(o, where, opts, sent)
    source = f"{tool}: {where}"
    if has_details(o):
        built = detailed_records(o, where, all_at_once=at_once)
        if built is not None:
            records, notes = built
            lv = records_level(records, label=level_label(mode, concurrency, rate), mode=mode,
                               concurrency=concurrency, rate=rate, source=source, notes=notes,
                               send_lag="queue_times" in o)
            check = cross_check(lv.level, number(o, "output_throughput", where))
            if check:
                lv.level.notes.append(check)
            return lv
    s = _summary(o, where, mode, concurrency, rate, sent)
    if has_details(o):
        s.notes.append("per-request lists without send times at a capped or rate-limited level: summaries used")
    return summary_level(s, source)


def load(path: Path, values: list[tuple[Any, Where]], opts: ImportOptions,
         ) -> tuple[list[ImportedLevel], dict[str, Any]]:
    """Every saved result in one file, and what they say about the run (engine, model)."""
    levels = []
    meta: dict[str, Any] = {}
    for value, where in values:
        o = obj(value, where, "a vLLM result")
        try:
            levels.append(level(o, where, opts))
        except ConfigError as exc:
            tool = generation(o)
            raise ConfigError(f"{exc} (the result looks like {tool})" if tool else str(exc)) from None
        backend = str(o.get("backend") or o.get("endpoint_type") or "")
        meta.setdefault("engine", ENGINES.get(backend))
        if o.get("model_id"):
            meta.setdefault("model", str(o["model_id"]))
    return levels, meta
