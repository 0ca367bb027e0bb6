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
  ``start_times``, ``latencies`` and ``queue_times``.

A level is a burst when the rate is unlimited (C = ``max_concurrency``, else ``num_prompts``), open loop
(``rate``) otherwise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

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
         "model_id", "tokenizer_id", "endpoint_type", "request_goodput", "request_goodput:", "burstiness")


def score(o: dict[str, Any]) -> int:
    """How much ``o`` looks like a vLLM result (0: not at all)."""
    if "duration" not in o or "completed" not in o:
        return 0
    return 1 + sum(2 for k in MARKS if k in o)


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
                errors=error_counts(o), duration_s=number(o, "duration", where, required=True))
    s.output_tokens = number(o, "total_output_tokens", where)
    s.input_tokens = number(o, "total_input_tokens", where)
    s.output_throughput = number(o, "output_throughput", where)
    s.input_throughput = number(o, "input_throughput", where)
    s.total_throughput = number(o, "total_token_throughput", where)
    s.request_throughput = number(o, "request_throughput", where) or number(o, "request_inthroughput", where)
    s.peak_output_throughput = number(o, "max_output_tokens_per_s", where)
    s.peak_in_flight = integer(o, "max_concurrent_requests", where)
    s.ttft, s.tpot = ms_stats(o, "ttft", where), ms_stats(o, "tpot", where)
    s.itl, s.e2e = ms_stats(o, "itl", where), ms_stats(o, "e2el", where)
    if s.itl is not None:
        s.notes.append("ITL as vLLM measures it: per chunk gap, not divided by the tokens a chunk carried")
    return s


def level(o: dict[str, Any], where: Where, opts: ImportOptions, tool: str = NAME) -> ImportedLevel:
    """One saved vLLM result as a level: from its per-request lists when it has them, else its summary."""
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
        levels.append(level(o, where, opts))
        backend = str(o.get("backend") or o.get("endpoint_type") or "")
        meta.setdefault("engine", ENGINES.get(backend))
        if o.get("model_id"):
            meta.setdefault("model", str(o["model_id"]))
    return levels, meta
