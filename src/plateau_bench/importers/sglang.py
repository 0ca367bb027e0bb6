"""SGLang's serving benchmark results: ``python -m sglang.bench_serving`` appends one JSON line per run
to ``--output-file`` (default ``{backend}_{MMDD}_{num_prompts}_{in}_{out}.jsonl``).

Keys read, by generation:

* 2024: ``backend``, ``dataset_name``, ``request_rate``, ``duration`` (s), ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``mean_/median_e2e_latency_ms``, ``median_ttft_ms``,
  ``median_itl_ms``, ``output_throughput``, ``random_input_len``, ``random_output_len``,
  ``random_range_ratio``;
* later: ``max_concurrency``, ``request_throughput``, ``input_throughput``, ``std_/p99_`` statistics,
  ``mean_/median_/p99_{ttft,tpot}_ms``, ``mean_/median_/p95_/p99_itl_ms``, ``concurrency`` (its
  "Concurrency": sum of E2E latencies / duration, i.e. achieved concurrency), ``accept_length``;
* 2025: ``total_throughput``, ``max_output_tokens_per_s`` (peak output tok/s), ``max_concurrent_requests``;
* ``--output-details``: the per-request lists (``importers.lists``), without send times.

The file does not keep ``num_prompts`` (only its name does): a burst's concurrency is ``max_concurrency``
when set, else the number of requests in the per-request lists, else ``--concurrency``, else the
completed count (said in the notes).
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

NAME = "sglang"
MARKS = ("mean_e2e_latency_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized", "accept_length",
         "dataset_name", "random_input_len", "random_output_len", "sharegpt_output_len", "concurrency",
         "total_throughput", "input_throughput")


def score(o: dict[str, Any]) -> int:
    if "duration" not in o or "completed" not in o:
        return 0
    return 1 + sum(2 for k in MARKS if k in o)


def _shape(o: dict[str, Any], where: Where, opts: ImportOptions) -> tuple[str, int | None, float, bool, list[str]]:
    rate = number(o, "request_rate", where)
    rate = math.inf if rate is None or rate <= 0 else rate
    cap = integer(o, "max_concurrency", where)
    if not math.isinf(rate):
        return "rate", cap, rate, False, []
    if cap:
        return "burst", cap, rate, False, []
    if has_details(o):
        return "burst", len(o["ttfts"]), rate, True, []
    if opts.concurrency:
        return "burst", opts.concurrency, rate, True, []
    completed = integer(o, "completed", where, required=True)
    return "burst", completed, rate, True, [f"num_prompts not saved by SGLang: concurrency taken as the {completed} "
                                            "completed requests"]


def workload(o: dict[str, Any], where: Where) -> tuple[int | None, int | None, bool]:
    """(input length, output length, every output exactly that long) of a random-dataset run."""
    if not str(o.get("dataset_name") or "").startswith("random"):
        return None, None, False
    ratio = number(o, "random_range_ratio", where)
    return integer(o, "random_input_len", where), integer(o, "random_output_len", where), ratio == 1.0


def _summary(o: dict[str, Any], where: Where, opts: ImportOptions, mode: str, concurrency: int | None,
             rate: float) -> Summary:
    s = Summary(level_label(mode, concurrency, rate), mode, concurrency=concurrency, rate=rate,
                completed=integer(o, "completed", where, required=True), errors=error_counts(o),
                duration_s=number(o, "duration", where, required=True))
    s.failed = sum(s.errors.values()) if isinstance(o.get("errors"), list) else None
    s.output_tokens = number(o, "total_output_tokens", where)
    s.input_tokens = number(o, "total_input_tokens", where)
    s.output_throughput = number(o, "output_throughput", where)
    s.input_throughput = number(o, "input_throughput", where)
    s.total_throughput = number(o, "total_throughput", where)
    s.request_throughput = number(o, "request_throughput", where)
    s.peak_output_throughput = number(o, "max_output_tokens_per_s", where)
    s.peak_in_flight = integer(o, "max_concurrent_requests", where)
    s.achieved_concurrency = number(o, "concurrency", where)
    if s.achieved_concurrency is not None:
        s.notes.append("achieved concurrency: SGLang's \"Concurrency\" (sum of E2E latencies / duration)")
    s.ttft, s.tpot = ms_stats(o, "ttft", where), ms_stats(o, "tpot", where)
    s.itl, s.e2e = ms_stats(o, "itl", where), ms_stats(o, "e2e_latency", where)
    inp, out, fixed = workload(o, where)
    output_len = opts.output_len or (out if fixed else None)
    input_len = opts.input_len or (inp if fixed else None)
    s.output_len = float(output_len) if output_len else None
    s.input_len = float(input_len) if input_len else None
    return s


def level(o: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    for key in ("duration", "completed"):   # every generation writes both
        number(o, key, where, required=True)
    mode, concurrency, rate, at_once, notes = _shape(o, where, opts)
    source = f"{NAME}: {where}"
    if has_details(o):
        built = detailed_records(o, where, all_at_once=at_once)
        if built is not None:
            records, more = built
            lv = records_level(records, label=level_label(mode, concurrency, rate), mode=mode,
                               concurrency=concurrency, rate=rate, source=source, notes=[*notes, *more])
            check = cross_check(lv.level, number(o, "output_throughput", where))
            if check:
                lv.level.notes.append(check)
            return lv
    s = _summary(o, where, opts, mode, concurrency, rate)
    s.notes[:0] = notes
    return summary_level(s, source)


def load(path: Path, values: list[tuple[Any, Where]], opts: ImportOptions,
         ) -> tuple[list[ImportedLevel], dict[str, Any]]:
    levels = []
    meta: dict[str, Any] = {}
    for value, where in values:
        o = obj(value, where, "an SGLang result")
        levels.append(level(o, where, opts))
        backend = str(o.get("backend") or "sglang")
        meta.setdefault("engine", next((e for e in ("sglang", "vllm") if backend.startswith(e)), None))
        inp, out, fixed = workload(o, where)
        if fixed and inp:
            meta.setdefault("input_len", inp)
        if fixed and out:
            meta.setdefault("output_len", out)
    return levels, meta
