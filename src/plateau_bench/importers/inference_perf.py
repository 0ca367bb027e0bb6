"""inference-perf's lifecycle reports (``reports-YYYYMMDD-HHMMSS/``), and which files of its run are results.

* ``stage_N_lifecycle_metrics.json`` (one per load stage) and ``summary_lifecycle_metrics.json`` (the whole
  run): ``load_summary`` (``count``; per stage ``requested_rate``, ``achieved_rate``, ``send_duration`` and,
  for concurrency stages, ``concurrency``), ``successes`` (``count``, ``latency.{request_latency,
  time_to_first_token, time_per_output_token, inter_token_latency}`` in seconds, ``throughput.{input_,
  output_, total_}tokens_per_sec`` and ``requests_per_sec``, ``prompt_len``/``output_len``, and since
  2025-08 ``prompt_tokens``/``output_tokens`` with ``total``) and ``failures`` (``count``,
  ``request_latency``, and lately ``by_label`` such as ``"504 - Gateway Timeout"``). Newer reports (0.5+)
  add ``benchmark_time_seconds`` (first send to last end) and, when the config sets SLOs,
  ``successes.goodput_metrics`` (``request_goodput`` req/s, ``good_requests``, ``total_requests``,
  ``<constraint>_attainment_percentage``); 0.6 adds ``request_size_bytes`` and media counts, 0.7
  ``client_fallback_requests``. Statistics are ``mean``, ``min``, ``max`` and percentiles: ``p10``/``p50``/
  ``p90`` in early reports, ``median`` and ``pNN`` (``p99``, ``p99.9``) later.
* Token counts: since 0.7 ``prompt_tokens``/``output_tokens`` are the server's usage counts (the client's
  where the server gave none) while ``throughput.*tokens_per_sec`` and ``output_len`` count the client's
  re-tokenized text, which can differ from what the server generated. A level's output tok/s is the
  server's count over ``benchmark_time_seconds`` where both are stated; the tool's own figure is kept in
  the notes when it differs.
* ``per_request_lifecycle_metrics.json``: ``importers.inference_perf_requests``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    error_class,
    latency,
    level_label,
    summary_level,
)
from plateau_bench.result import Latency

NAME = "inference-perf"


def is_summary(o: dict[str, Any]) -> bool:
    """A lifecycle report, or what is left of one (its ``load_summary`` and ``failures`` without its successes)."""
    return (isinstance(o.get("successes"), dict) and ("load_summary" in o or "failures" in o)) \
        or ("load_summary" in o and "failures" in o)


_ENTRY_PARTS = {"info", "request", "response", "error", "computed_metrics"}


def is_per_request(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and isinstance(v[0], dict) and {"start_time", "end_time"} <= v[0].keys() \
        and bool(_ENTRY_PARTS & v[0].keys())


def era(o: dict[str, Any]) -> str:
    """Which releases write a lifecycle report with these keys (for messages about a file we cannot read)."""
    ok = _dict(o.get("successes"))
    if "client_fallback_requests" in ok:
        return "0.7 or later"
    if "request_size_bytes" in ok or "images_per_sec" in _dict(ok.get("throughput")):
        return "0.6"
    failures = _dict(o.get("failures"))
    if "by_label" in failures or "uncached" in _dict(failures.get("prompt_tokens")):
        return "0.6 or later"
    if "benchmark_time_seconds" in o or "token_count_mismatches" in ok:
        return "0.5"
    return "0.2 to 0.4" if "send_duration" in _dict(o.get("load_summary")) else "0.1 or earlier"


def era_of_entry(entry: dict[str, Any]) -> str:
    """Which releases write a per-request entry with these keys."""
    info = _dict(entry.get("info"))
    if "computed_metrics" in entry or "graph_event_id" in info:
        return "0.7 or later"
    if "response_metrics" in info:
        return "0.6 or later"
    return "0.5" if "response_info" in info else "0.4 or earlier"


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _stat(d: Any, *keys: str) -> float | None:
    if not isinstance(d, dict):
        return None
    return next((float(d[k]) for k in keys if isinstance(d.get(k), int | float) and not isinstance(d.get(k), bool)),
                None)


def _count(d: Any, key: str) -> int | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _seconds(d: Any) -> Latency | None:
    if not isinstance(d, dict):
        return None

    def ms(*keys: str) -> float | None:
        v = _stat(d, *keys)
        return v * 1000 if v is not None else None
    return latency(ms("mean"), ms("median", "p50"), ms("p90"), ms("p99"), ms("max"))


def _shape(load: dict[str, Any], opts: ImportOptions) -> tuple[str, int | None, float | None]:
    concurrency = _count(load, "concurrency") or opts.concurrency
    rate = _stat(load, "requested_rate")
    if concurrency:
        return "steady", concurrency, None
    return "rate", None, rate


# -- stages and their goodput --------------------------------------------------------------------------
@dataclass(frozen=True)
class Goodput:
    """What inference-perf's ``goodput_metrics`` say about a stage (its SLOs are in its config)."""

    request_rate: float | None        # good requests per second
    good: int | None
    total: int | None
    attainment: dict[str, float] = field(default_factory=dict)   # constraint -> % of requests meeting it

    def note(self) -> str:
        share = f"{self.good} of {self.total} requests" if self.good is not None and self.total else "requests"
        met = ", ".join(f"{k} {v:.0f} %" for k, v in self.attainment.items())
        rate = f": {self.request_rate:.2f} good req/s" if self.request_rate is not None else ""
        return (f"goodput by inference-perf's SLOs (set in its config): {share} met every constraint{rate}"
                + (f" (per constraint: {met})" if met else ""))


def goodput(o: dict[str, Any]) -> Goodput | None:
    g = _dict(_dict(o.get("successes")).get("goodput_metrics"))
    if not g:
        return None
    suffix = "_attainment_percentage"
    attainment = {k[: -len(suffix)]: float(v) for k, v in g.items()
                  if k.endswith(suffix) and isinstance(v, int | float) and not isinstance(v, bool)}
    return Goodput(_stat(g, "request_goodput"), _count(g, "good_requests"), _count(g, "total_requests"), attainment)


@dataclass(frozen=True)
class Stage:
    """One load stage as its report states it."""

    number: int
    mode: str                 # steady (a concurrency stage) | rate
    concurrency: int | None
    rate: float | None
    count: int | None         # requests the stage sent
    goodput: Goodput | None
    source: str               # the report's file name


def stage(o: dict[str, Any], number: int, source: str) -> Stage:
    load = _dict(o.get("load_summary"))
    mode, concurrency, rate = _shape(load, ImportOptions())
    count = _count(load, "count")
    if count is None:
        ok, bad = _count(o.get("successes"), "count"), _count(o.get("failures"), "count")
        count = ok + (bad or 0) if ok is not None else None
    return Stage(number, mode, concurrency, rate, count, goodput(o), source)


def stage_of(path: Path) -> str | None:
    m = re.search(r"stage_(\d+)", path.name)
    return m.group(1) if m else None


# -- a level from a stage's (or the run's) summary ---------------------------------------------------------
def _tokens(s: Summary, ok: dict[str, Any], duration: float | None) -> None:
    """Throughputs from the server's token counts over the stage, the tool's client-side figures otherwise."""
    thr = _dict(ok.get("throughput"))
    s.output_tokens = _stat(ok.get("output_tokens"), "total")
    s.input_tokens = _stat(ok.get("prompt_tokens"), "total")
    if s.output_tokens is None and isinstance(ok.get("output_len"), dict):
        mean = _stat(ok["output_len"], "mean")
        s.output_tokens = mean * s.completed if mean is not None and s.completed else None
    s.request_throughput = _stat(thr, "requests_per_sec")
    stated = _stat(thr, "output_tokens_per_sec")
    if duration and s.output_tokens is not None and _stat(ok.get("output_tokens"), "total") is not None:
        s.output_throughput = s.output_tokens / duration
        if s.input_tokens is not None:
            s.total_throughput = (s.output_tokens + s.input_tokens) / duration
        if stated and s.output_throughput and abs(stated / s.output_throughput - 1) > 0.02:
            s.notes.append(f"output tok/s from the server's token counts ({s.output_tokens:,.0f} over "
                           f"{duration:.2f} s); inference-perf's own figure, {stated:,.1f}, counts the client's "
                           "re-tokenized text")
        return
    s.output_throughput = stated
    s.input_throughput = _stat(thr, "input_tokens_per_sec")
    s.total_throughput = _stat(thr, "total_tokens_per_sec")


def _scaled(lat: Latency | None, factor: float) -> Latency | None:
    if lat is None:
        return None
    def times(v: float | None) -> float | None:
        return v * factor if v is not None else None

    return msgspec.structs.replace(lat, mean=times(lat.mean), p50=times(lat.p50), p90=times(lat.p90),
                                   p99=times(lat.p99), max=times(lat.max))


def _errors(s: Summary, bad: dict[str, Any]) -> None:
    labels = bad.get("by_label")
    for name, entry in labels.items() if isinstance(labels, dict) else ():
        n = _count(entry, "count")
        if n:
            cls = str(error_class(str(name)))
            s.errors[cls] = s.errors.get(cls, 0) + n


def summary(o: dict[str, Any], where: Where, opts: ImportOptions, stage_id: str | None) -> ImportedLevel:
    load = _dict(o.get("load_summary"))
    ok = _dict(o.get("successes"))
    bad = _dict(o.get("failures"))
    if _count(ok, "count") is None:
        field = "successes.count" if ok else "successes"
        raise where.fail(f"an inference-perf lifecycle report ({era(o)}, by its keys): missing field '{field}'")
    mode, concurrency, rate = _shape(load, opts)
    label = level_label(mode, concurrency, rate)
    duration = _stat(o, "benchmark_time_seconds")
    s = Summary(label if label != "level" else (f"stage {stage_id}" if stage_id else "summary"), mode,
                concurrency=concurrency, rate=rate, completed=ok["count"], failed=_count(bad, "count"),
                duration_s=duration)
    _tokens(s, ok, duration)
    lat = _dict(ok.get("latency"))
    s.e2e, s.ttft = _seconds(lat.get("request_latency")), _seconds(lat.get("time_to_first_token"))
    s.tpot, s.itl = _seconds(lat.get("time_per_output_token")), _seconds(lat.get("inter_token_latency"))
    _errors(s, bad)
    client, server = _stat(ok.get("output_len"), "mean"), _stat(ok.get("output_tokens"), "mean")
    server_counted = duration and _stat(ok.get("output_tokens"), "total") is not None   # as _tokens reads tok/s
    if client and server and abs(client / server - 1) > 0.05 and server_counted:
        # Output tok/s counts the server's tokens: TPOT and ITL are put per server token too, so that tok/s x
        # TPOT (the decoding batch by Little's law) holds. Exact when every request has the same length.
        scale = client / server
        s.tpot, s.itl = _scaled(s.tpot, scale), _scaled(s.itl, scale)
        s.notes.append(f"TPOT and ITL per server token: inference-perf states them per token of its client's "
                       f"re-tokenized count ({client:.1f} a request on average; the server counted {server:.1f}), "
                       f"so they are multiplied by {scale:.2f}")
    if mode == "rate" and rate is None:
        s.notes.append("the report does not say the stage's rate or concurrency"
                       + ("" if stage_id else ": a whole-run summary holds every stage together"))
    good = goodput(o)
    if good is not None:
        s.notes.append(good.note())
    level = summary_level(s, f"{NAME}: {where}")
    level.level.goodput_rps = good.request_rate if good is not None else None
    return level


def lengths(o: dict[str, Any]) -> dict[str, Any]:
    """The prompt and output lengths a report states, where every request of it had the same."""
    ok = _dict(o.get("successes"))
    out: dict[str, Any] = {}
    for key, name in (("input_len", "prompt_tokens"), ("output_len", "output_tokens")):
        d = _dict(ok.get(name))
        low, high = _stat(d, "min"), _stat(d, "max")
        if low is not None and low == high and low > 0:
            out[key] = round(low)
    return out
