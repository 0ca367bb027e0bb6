"""SGLang's serving benchmark results: ``python -m sglang.benchmark.serving`` (before 0.5.x
``python -m sglang.bench_serving``, still an alias) appends one JSON line per run to ``--output-file``
(default ``{backend}_{MMDD}_{num_prompts}_{in}_{out}.jsonl``).

Keys read, by generation:

* 2024: ``backend``, ``dataset_name``, ``request_rate``, ``duration`` (s), ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, ``mean_/median_e2e_latency_ms``, ``median_ttft_ms``,
  ``median_itl_ms``, ``output_throughput``, ``random_input_len``, ``random_output_len``,
  ``random_range_ratio``;
* later: ``max_concurrency``, ``request_throughput``, ``input_throughput``, ``std_/p99_`` statistics,
  ``mean_/median_/p99_{ttft,tpot}_ms``, ``mean_/median_/p95_/p99_itl_ms``, ``concurrency`` (its
  "Concurrency": sum of E2E latencies / duration, i.e. achieved concurrency), ``accept_length``;
* 2025: ``total_throughput``, ``max_output_tokens_per_s`` (peak output tok/s),
  ``max_concurrent_requests`` (requests active within the busiest 1 s bucket: an instant's peak only
  up to the client's own limit, so it is capped there);
* 0.5.x (``sglang.benchmark.serving``): ``tag``, ``server_info`` (the server's ``/server_info`` for the
  sglang backends: its scheduler's ``effective_max_running_requests_per_dp`` per DP rank is the stated
  admission cap, ``max_total_num_tokens`` the KV cache), ``total_input_text_tokens``, ``p90_/p95_``
  statistics, ``request_rate: "trace"`` for a timestamped trace replay, ``--goodput`` SLOs
  (``goodput_slos_ms``, ``request_goodput``, ``slo_attainment``, ``slo_attainment_by_metric``) and
  ``--cache-report`` (``cache_report.cache_hit_rate_pct``);
* ``--output-details``: the per-request lists (``importers.lists``), without send times;
* SGLang's Rust client (``python -m sglang.benchmark.rust_client`` or ``serving --rust-client``, 0.5.x)
  appends the same keys, plus ``protocol`` (``http`` or ``grpc``) and ``request_rate: "inf"`` as text. Its
  requests are tasks on a multi-threaded runtime that reach the concurrency limit in no fixed order, so
  its send times cannot be rebuilt: a capped level keeps its summaries.

The file does not keep ``num_prompts`` (only its name does): a burst's concurrency is ``max_concurrency``
when set, else the number of requests in the per-request lists, else ``--concurrency``, else the
completed count (said in the notes). Under ``max_concurrency`` the send times of the per-request lists
are rebuilt from the client's closed loop (``importers.closed_loop``) when the replay fits the measured
duration; a rate-limited or trace-replay level keeps its summaries.

``sglang.benchmark.steady_state_serving --steady-state-output-file`` writes a line of its own per run
(``importers.sglang_steady``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.importers import sglang_steady
from plateau_bench.importers.closed_loop import (
    HELD_SHARE,
    closed_loop_sends,
    held_peak,
    replay_fits,
    request_latencies,
)
from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    cross_check,
    dig,
    integer,
    level_label,
    number,
    number_list,
    obj,
    records_level,
    summary_level,
)
from plateau_bench.importers.lists import detailed_records, error_counts, has_details, ms_stats

NAME = "sglang"
MARKS = ("mean_e2e_latency_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized", "accept_length",
         "dataset_name", "random_input_len", "random_output_len", "sharegpt_output_len", "concurrency",
         "total_throughput", "input_throughput", "total_input_text_tokens", "server_info", "slo_attainment")
# Datasets whose requests are not independent sends of a closed loop: conversations replayed turn by turn
# (one slot per conversation), or a trace's own timestamps.
NOT_CLOSED_LOOP = ("agentic-trace", "mooncake")


def score(o: dict[str, Any]) -> int:
    if "duration" not in o or "completed" not in o:
        return 0
    return 1 + sum(2 for k in (*MARKS, *sglang_steady.MARKS) if k in o)


def generation(o: dict[str, Any]) -> str | None:
    """Which SGLang client and version a line's keys say it came from (for error messages); None when it
    has none of the keys that tell."""
    if not any(k in o for k in (*MARKS, *sglang_steady.MARKS)):
        return None
    if sglang_steady.is_steady(o):
        return "SGLang's steady-state report (sglang.benchmark.steady_state_serving, 0.5.x)"
    if is_rust_client(o) and "total_input_text_tokens" in o:
        return "SGLang's Rust client (sglang.benchmark.rust_client, 0.5.x)"
    if "total_input_text_tokens" in o or "server_info" in o:
        return "SGLang sglang.benchmark.serving (0.5.x)"
    if "max_concurrent_requests" in o or "total_throughput" in o:
        return "SGLang bench_serving (2025)"
    return "SGLang bench_serving (2024)"


def is_rust_client(o: dict[str, Any]) -> bool:
    """A line of SGLang's Rust client: the only one that records its ``protocol``."""
    return "protocol" in o


def _rate(o: dict[str, Any], where: Where) -> tuple[float | None, bool]:
    """(requests/s, None for a trace replay; whether it was a trace replay)."""
    raw = o.get("request_rate")
    if isinstance(raw, str) and raw.strip().lower() == "trace":
        return None, True
    rate = number(o, "request_rate", where)
    return (math.inf if rate is None or rate <= 0 else rate), False


def _shape(o: dict[str, Any], where: Where, opts: ImportOptions,
           ) -> tuple[str, int | None, float | None, bool, list[str]]:
    rate, trace = _rate(o, where)
    cap = integer(o, "max_concurrency", where)
    if trace:
        return "rate", cap, None, False, ["a trace replay (request_rate 'trace'): requests sent at the trace's times"]
    assert rate is not None
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
             rate: float | None) -> Summary:
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
    s.peak_in_flight = _peak_in_flight(o, where, concurrency, s.notes)
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


def _peak_in_flight(o: dict[str, Any], where: Where, limit: int | None, notes: list[str]) -> int | None:
    """``max_concurrent_requests`` counts the requests active at any time within a 1 s bucket: more than
    were ever in flight at once on a short run, never more than the client let out."""
    peak = integer(o, "max_concurrent_requests", where)
    if peak is not None and limit and peak > limit:
        notes.append(f"peak in flight: SGLang's per-second count ({peak}) capped at the client's limit {limit}")
        return limit
    return peak


def _closed_loop(o: dict[str, Any], where: Where, limit: int) -> dict[str, Any] | None:
    """``o`` with the send times its client's closed loop implies, when the replay fits (``closed_loop``)."""
    if str(o.get("dataset_name") or "") in NOT_CLOSED_LOOP or is_rust_client(o):
        return None
    ttfts = number_list(o, "ttfts", where) or []
    gaps = [[] if g is None else g for g in o["itls"]]
    if len(gaps) != len(ttfts) or not all(isinstance(g, list) for g in gaps) \
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for g in gaps for x in g):
        return o   # as it is: detailed_records names the malformed field
    latencies = request_latencies(ttfts, [[float(x) for x in g] for g in gaps])
    sends = closed_loop_sends(latencies, limit)
    if not replay_fits(sends, latencies, number(o, "duration", where, required=True) or 0.0):
        return None
    return {**o, "start_times": sends}


def _records_level(o: dict[str, Any], where: Where, mode: str, concurrency: int | None, rate: float | None,
                   at_once: bool, notes: list[str]) -> ImportedLevel | None:
    source = f"{NAME}: {where}"
    detailed: dict[str, Any] | None = o
    rebuilt = False
    if not at_once and mode == "burst" and concurrency:
        detailed, rebuilt = _closed_loop(o, where, concurrency), True
    built = detailed_records(detailed, where, all_at_once=at_once) if detailed is not None else None
    if built is None:
        return None
    records, more = built
    if rebuilt:
        more.insert(0, f"send times not saved by SGLang: rebuilt from its closed loop (the first {concurrency} "
                       "sent at once, each later one as one in flight ended), which fits its measured duration")
    lv = records_level(records, label=level_label(mode, concurrency, rate), mode=mode, concurrency=concurrency,
                       rate=rate, source=source, notes=[*notes, *more])
    if rebuilt:
        _held_decoding_peak(lv)
    check = cross_check(lv.level, number(o, "output_throughput", where))
    if check:
        lv.level.notes.append(check)
    return lv


def _held_decoding_peak(lv: ImportedLevel) -> None:
    """Peak decoding over rebuilt send times: the count held, not an instant's blip (``held_peak``)."""
    decoding = [(r.first_token_ns, r.chunk_ns[-1] if r.chunk_ns else r.end_ns) for r in lv.records
                if r.first_token_ns is not None]
    held = held_peak(decoding)
    if held and held < lv.level.peak_decoding:
        lv.level.notes.append(f"peak decoding: {held}, the most requests past their first token for at least "
                              f"{HELD_SHARE:.0%} of the time (an instant's peak, {lv.level.peak_decoding}, counts "
                              "the milliseconds by which rebuilt send times are off)")
        lv.level.peak_decoding = held


def level(o: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    if sglang_steady.is_steady(o):
        return sglang_steady.level(o, where, opts)
    for key in ("duration", "completed"):   # every generation writes both
        number(o, key, where, required=True)
    mode, concurrency, rate, at_once, notes = _shape(o, where, opts)
    lv = _records_level(o, where, mode, concurrency, rate, at_once, notes) if has_details(o) else None
    if lv is None:
        s = _summary(o, where, opts, mode, concurrency, rate)
        s.notes[:0] = notes
        if has_details(o) and is_rust_client(o) and not at_once:
            s.notes.append("per-request lists without send times, from SGLang's Rust client, whose requests reach "
                           "its concurrency limit in no fixed order (they cannot be rebuilt): summaries used")
        elif has_details(o):
            s.notes.append("per-request lists without send times that can be rebuilt (a rate-limited, trace or "
                           "multi-turn level, or a replay that does not fit the measured duration): summaries used")
        lv = summary_level(s, f"{NAME}: {where}")
    _extras(o, where, lv)
    return lv


def _extras(o: dict[str, Any], where: Where, lv: ImportedLevel) -> None:
    """What 0.5.x adds beside the level's figures: goodput, the prefix cache, the server's own limits."""
    level = lv.level
    goodput = number(o, "request_goodput", where)
    if goodput is not None:
        level.goodput_rps = goodput
        slos = o.get("goodput_slos_ms")
        said = " ".join(f"{k}:{v:g}" for k, v in slos.items() if isinstance(v, int | float)) \
            if isinstance(slos, dict) else "?"
        met = number(o, "slo_attainment", where)
        level.notes.append(f"goodput (--goodput {said} ms): {goodput:.2f} req/s"
                           + (f", {met:.0%} of requests met every SLO" if met is not None else ""))
    hit = number(o["cache_report"], "cache_hit_rate_pct", where) if isinstance(o.get("cache_report"), dict) else None
    if hit is not None:
        level.notes.append(f"prefix cache (--cache-report): {hit:g} % of prompt tokens were cached")
    accept = number(o, "accept_length", where)
    if accept:
        level.notes.append(f"speculative decoding: {accept:.2f} tokens accepted per step (SGLang's accept_length)")
    cap, kv_tokens = server_limits(o)
    if cap or kv_tokens:
        level.telemetry = msgspec.structs.replace(level.telemetry, engine=level.telemetry.engine or "sglang",
                                                  cap=float(cap) if cap else None,
                                                  kv_capacity_tokens=float(kv_tokens) if kv_tokens else None)
        level.notes.append("server_info: " + ", ".join(
            part for part in (f"the scheduler admits {cap} requests at once" if cap else "",
                              f"KV cache of {kv_tokens:,} tokens" if kv_tokens else "") if part))


def server_limits(o: dict[str, Any]) -> tuple[int | None, int | None]:
    """(admission cap, KV tokens) the SGLang server stated in ``server_info``: the cap summed over its
    data-parallel ranks (each one's scheduler reports its own)."""
    info = o.get("server_info")
    if not isinstance(info, dict):
        return None, None
    states = info.get("internal_states")
    caps = [dig(s, "effective_max_running_requests_per_dp") for s in states] if isinstance(states, list) else []
    cap = sum(caps) if caps and all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in caps) \
        else None
    kv = info.get("max_total_num_tokens")
    kv_tokens = kv if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 else None
    return cap, kv_tokens


def load(path: Path, values: list[tuple[Any, Where]], opts: ImportOptions,
         ) -> tuple[list[ImportedLevel], dict[str, Any]]:
    levels = []
    meta: dict[str, Any] = {}
    for value, where in values:
        o = obj(value, where, "an SGLang result")
        try:
            levels.append(level(o, where, opts))
        except ConfigError as exc:
            tool = generation(o)
            raise ConfigError(f"{exc} (the line looks like {tool})" if tool else str(exc)) from None
        backend = str(o.get("backend") or "sglang")
        meta.setdefault("engine", next((e for e in ("sglang", "vllm") if backend.startswith(e)), None))
        inp, out, fixed = workload(o, where)
        if fixed and inp:
            meta.setdefault("input_len", inp)
        if fixed and out:
            meta.setdefault("output_len", out)
    return levels, meta
