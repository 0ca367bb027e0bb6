"""GuideLLM's report (``benchmarks.json``, or ``benchmarks.yaml``: the same document in YAML).

``{"benchmarks": [...]}``, one entry per strategy of the profile (a sweep: synchronous, throughput,
then constant rates; a concurrent profile: one per stream count). Three generations, all read:

* v0.1-v0.3: ``args.strategy`` (``type_``: synchronous | concurrent (``streams``) | throughput |
  constant | poisson (``rate``)), ``start_time``/``end_time`` (the measured window, epoch s),
  ``request_totals``, ``requests.{successful,errored,incomplete}`` with ``start_time``, ``end_time``,
  ``first_token_time``, ``last_token_time``, ``prompt_tokens``, ``output_tokens``;
* v0.4-v0.7: ``config.strategy``, ``scheduler_metrics.measure_start_time``/``measure_end_time`` (and
  ``start_time``/``end_time``), ``metrics.request_totals``, requests with ``info.timings``
  (``request_start``, ``first_token_iteration``, ``last_token_iteration``, ``request_end``), the
  computed ``request_start_time``/``request_end_time``/``prompt_tokens``/``output_tokens``, and
  ``info.error``;
* v0.8 on (``guidellm run``): the same benchmarks under a ``metadata`` block (``version``: the report
  schema, 2 in 0.8; ``guidellm_version``) and the run's ``config.spec``; strategies may also be ``trace``
  (a replayed trace: open loop, no rate). ``config.sample_size`` set keeps that many requests per status.

GuideLLM timestamps a request's end (``request_end``) after the stream closes: after the usage chunk and
``[DONE]``, which on a fast engine come a step or more after the last token, while the server freed the
request's slot at its last token. So a request decodes from ``first_token_iteration`` to
``last_token_iteration``; ending it at ``request_end`` overlaps it with the request admitted in its place
and reads one or two above an admission cap. Token times are not saved: the tokens after the first are
placed on the straight line from first to last token (``_token_chunks``), so GuideLLM's own ITL
((last - first token) / (tokens - 1)) is every chunk's.

Closed-loop strategies become ``steady`` levels over GuideLLM's own window (warm-up and cool-down
excluded); rate strategies become ``rate`` levels. Incomplete requests (in flight when the window closed)
are not failures: they are counted in ``cut_off_at_stop``. When the request lists are sampled
(``--sample-requests``, ``sample_size``), or absent, the level is built from ``metrics`` (distribution
summaries): ``request_concurrency`` (achieved concurrency), ``request_latency`` (s),
``time_to_first_token_ms``, ``inter_token_latency_ms`` (GuideLLM's ITL: our TPOT; its own TPOT counts the
first token and is not used) and ``output_tokens_per_second``/``tokens_per_second``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from plateau_bench.analysis.metrics import Window
from plateau_bench.errors import ConfigError
from plateau_bench.importers.common import (
    TOKEN_SOURCE_IMPORTED,
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    dig,
    error_class,
    item_lines,
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

NAME = "guidellm"
STATUSES = ("successful", "errored", "incomplete")
# Chunks a request's saved first and last token times are spread into: enough for per-second token counts
# over any request worth measuring, few enough that a long run's records stay small.
TOKEN_CHUNKS = 32


def score(o: dict[str, Any]) -> int:
    if isinstance(dig(o, "metadata", "guidellm_version"), str) and "benchmarks" in o:
        return 5
    benches = o.get("benchmarks")
    if not isinstance(benches, list) or not benches or not isinstance(benches[0], dict):
        return 0
    first = benches[0]
    return 5 if first.get("type_") == "generative_benchmark" or ("metrics" in first and "requests" in first) else 0


def describe(doc: dict[str, Any]) -> str:
    """Which GuideLLM wrote a report, as error messages name it."""
    version = dig(doc, "metadata", "guidellm_version")
    schema = dig(doc, "metadata", "version")
    if isinstance(version, str | int | float):
        return f"GuideLLM {version}'s report" + (f" (metadata v{schema})" if isinstance(schema, int) else "")
    benches = doc.get("benchmarks")
    first = benches[0] if isinstance(benches, list) and benches and isinstance(benches[0], dict) else {}
    if "args" in first:
        return "a GuideLLM v0.1-v0.3 report (no version stated)"
    return "a GuideLLM v0.4-v0.7 report (no version stated)"


def _shape(b: dict[str, Any], where: Where) -> tuple[str, int | None, float | None]:
    strategy = dig(b, "config", "strategy") or dig(b, "args", "strategy")
    if not isinstance(strategy, dict) or "type_" not in strategy:
        raise where.missing("config.strategy.type_", "or args.strategy.type_ in older files")
    kind = str(strategy["type_"])
    cap = strategy.get("max_concurrency") if isinstance(strategy.get("max_concurrency"), int) else None
    if kind == "synchronous":
        return "steady", 1, None
    if kind == "concurrent":
        streams = strategy.get("streams")
        if not isinstance(streams, int):
            raise where.missing("strategy.streams")
        return "steady", streams, None
    if kind == "throughput":
        return "steady", cap, None
    if kind == "trace":              # a replayed trace: open loop at the trace's own times, no single rate
        return "rate", cap, None
    rate = strategy.get("rate")
    if not isinstance(rate, int | float):
        raise where.missing("strategy.rate", f"a {kind} strategy")
    return "rate", cap, float(rate)


def _window(b: dict[str, Any], where: Where) -> tuple[float, float]:
    start = b.get("start_time") or dig(b, "scheduler_metrics", "measure_start_time")
    end = b.get("end_time") or dig(b, "scheduler_metrics", "measure_end_time")
    if not isinstance(start, int | float):
        raise where.missing("start_time", "or scheduler_metrics.measure_start_time")
    if not isinstance(end, int | float):
        raise where.missing("end_time", "or scheduler_metrics.measure_end_time")
    return float(start), float(end)


def _first(*values: Any) -> float | None:
    return next((float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)), None)


def _token_chunks(first_ns: int, last_ns: int, tokens: int) -> tuple[list[int], list[int]]:
    """A request's tokens when only its first and last token times were saved: the first token alone,
    the rest in at most TOKEN_CHUNKS - 1 chunks on the straight line from first to last token (each chunk
    at the share of the tokens it completes, so every chunk's ITL is (last - first) / (tokens - 1))."""
    if tokens <= 0:
        return [], []
    if tokens == 1 or last_ns <= first_ns:
        return [first_ns], [tokens]
    rest = spread_tokens(tokens - 1, min(tokens - 1, TOKEN_CHUNKS - 1))
    times, done = [first_ns], 0
    for k in rest:
        done += k
        times.append(first_ns + round((last_ns - first_ns) * done / (tokens - 1)))
    return times, [1, *rest]


def _request(r: dict[str, Any], i: int, t0: float, status: str, where: Where) -> RequestRecord:
    t = dig(r, "info", "timings") or {}
    info = r.get("scheduler_info") or {}
    start = _first(r.get("request_start_time"), r.get("start_time"), t.get("request_start"), info.get("request_start"))
    end = _first(r.get("request_end_time"), r.get("end_time"), t.get("request_end"), t.get("resolve_end"),
                 info.get("request_end"))
    if start is None:
        raise where.missing(f"requests.{status}[{i}].request_start_time", "or start_time")
    if end is None:
        raise where.missing(f"requests.{status}[{i}].request_end_time", "or end_time")
    first = _first(r.get("first_token_time"), t.get("first_token_iteration"))
    last = _first(r.get("last_token_time"), t.get("last_token_iteration"))
    prompt = _first(r.get("prompt_tokens"), dig(r, "input_metrics", "text_tokens"))
    output = round(_first(r.get("output_tokens"), dig(r, "output_metrics", "text_tokens")) or 0)
    error = r.get("error") or dig(r, "info", "error")
    ok = status == "successful"
    sent, end_ns = ns(start - t0), ns(end - t0)
    # A failed request keeps what it streamed before it broke (GuideLLM counts it).
    first_ns = ns(first - t0) if first is not None and (ok or output) else None
    chunks: tuple[list[int], list[int]] = ([], [])
    if first_ns is not None and last is not None:
        # The last token lies between the first and the end: a value outside is held to them (the
        # first token and the end are checked with the record).
        chunks = _token_chunks(first_ns, min(max(ns(last - t0), first_ns), end_ns), output)
    return RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, end_ns=end_ns, first_token_ns=first_ns,
                         chunk_ns=chunks[0], chunk_tokens=chunks[1], prompt_tokens=round(prompt or 0),
                         output_tokens=output if ok or first_ns is not None else 0,
                         token_source=TOKEN_SOURCE_IMPORTED,
                         error=None if ok else error_class(str(error or "error")),
                         error_detail=str(error)[:500] if error and not ok else None)


def _totals(b: dict[str, Any]) -> dict[str, int]:
    raw = dig(b, "metrics", "request_totals") or b.get("request_totals") or {}
    return {k: int(v) for k, v in raw.items() if isinstance(v, int)} if isinstance(raw, dict) else {}


def _lists(b: dict[str, Any], where: Where) -> dict[str, list[dict[str, Any]]] | None:
    """The request lists by status, or None when they are absent or sampled."""
    raw = b.get("requests")
    if not isinstance(raw, dict):
        return None
    lists = {s: [x for x in raw.get(s) or [] if isinstance(x, dict)] for s in STATUSES}
    totals = _totals(b)
    if not lists["successful"] or any(len(lists[s]) < totals.get(s, 0) for s in STATUSES):
        return None
    return lists


def _dist(b: dict[str, Any], key: str) -> dict[str, Any] | None:
    d = dig(b, "metrics", key, "successful")
    return d if isinstance(d, dict) and d.get("count") else None


def _dist_latency(d: dict[str, Any] | None, scale: float = 1.0) -> Latency | None:
    if d is None:
        return None
    p = d.get("percentiles") or {}

    def get(v: Any) -> float | None:
        return float(v) * scale if isinstance(v, int | float) else None
    return latency(get(d.get("mean")), get(d.get("median", p.get("p50"))), get(p.get("p90")), get(p.get("p99")),
                   get(d.get("max")), int(d.get("count") or 0))


def _summary(b: dict[str, Any], where: Where, label: str, mode: str, concurrency: int | None,
             rate: float | None) -> Summary:
    start, end = _window(b, where)
    totals = _totals(b)
    s = Summary(label, mode, concurrency=concurrency, rate=rate, completed=totals.get("successful"),
                failed=totals.get("errored"), duration_s=end - start)
    if s.completed is None:
        raise where.missing("metrics.request_totals.successful", "or request_totals in older files")
    s.num_requests = s.completed + (s.failed or 0)
    for key, attr in (("output_tokens_per_second", "output_throughput"), ("tokens_per_second", "total_throughput"),
                      ("request_concurrency", "achieved_concurrency"), ("requests_per_second", "request_throughput")):
        d = _dist(b, key)
        if d is not None and isinstance(d.get("mean"), int | float):
            setattr(s, attr, float(d["mean"]))
    for key, attr in (("output_token_count", "output_tokens"), ("prompt_token_count", "input_tokens")):
        d = _dist(b, key)
        if d is not None and isinstance(d.get("total_sum"), int | float):
            setattr(s, attr, float(d["total_sum"]))
    s.e2e = _dist_latency(_dist(b, "request_latency"), 1000.0)
    s.ttft = _dist_latency(_dist(b, "time_to_first_token_ms"))
    s.tpot = _dist_latency(_dist(b, "inter_token_latency_ms"))
    s.notes.append("TPOT: GuideLLM's inter-token latency ((last - first token) / (tokens - 1)); its own TPOT "
                   "counts the first token and is not used; achieved concurrency and throughputs are the means of "
                   "GuideLLM's time series")
    return s


def benchmark(b: dict[str, Any], where: Where, label: str) -> ImportedLevel:
    mode, concurrency, rate = _shape(b, where)
    source = f"{NAME}: {where}"
    lists = _lists(b, where)
    if lists is None:
        s = _summary(b, where, label, mode, concurrency, rate)
        s.notes.append("request lists absent or sampled: level summaries used")
        return summary_level(s, source)
    start, end = _window(b, where)
    cands = [_first(r.get("request_start_time"), r.get("start_time"), dig(r, "info", "timings", "request_start"))
             for r in lists["successful"] + lists["errored"]]
    t0 = min([start, *(c for c in cands if c is not None)])
    records = [_request(r, i, t0, status, where) for status in ("successful", "errored")
               for i, r in enumerate(lists[status])]
    lv = records_level(records, label=label, mode=mode, concurrency=concurrency, rate=rate, source=source,
                       window=Window(ns(start - t0), ns(end - t0), "GuideLLM's measured window (warm-up and "
                                     "cool-down excluded)"),
                       notes=["token times not saved: each request's tokens spread evenly from its first token to "
                              "its last (ITL and peak output tok/s are estimates)"],
                       missing=("per-chunk times",))
    lv.level.cut_off_at_stop = len(lists["incomplete"])
    if lists["incomplete"]:
        lv.level.notes.append(f"{len(lists['incomplete'])} request(s) still in flight when GuideLLM's window closed: "
                              "not counted")
    return lv


def _lengths(o: Any) -> tuple[int | None, int | None]:
    text = str(o or "")
    found = {k: int(v) for k, v in re.findall(r"\b(prompt_tokens|output_tokens)['\"]?\s*[=:]\s*(\d+)", text)}
    return found.get("prompt_tokens"), found.get("output_tokens")


def _run_facts(doc: dict[str, Any], b: dict[str, Any], meta: dict[str, Any]) -> None:
    """Model and fixed lengths, from the benchmark or (v0.8 on) the run's ``config.spec``."""
    sources = (b.get("request_loader") or dig(b, "config", "requests"), dig(doc, "config", "spec", "data"))
    for source in sources:
        for key, length in zip(("input_len", "output_len"), _lengths(source), strict=True):
            if length:
                meta.setdefault(key, length)
    model = dig(b, "worker", "backend_model") or dig(b, "config", "backend", "model") or \
        dig(doc, "config", "spec", "backend", "model")
    if model:
        meta.setdefault("model", str(model))


def report(doc: dict[str, Any], lines: list[Where], where: Where, meta: dict[str, Any]) -> list[ImportedLevel]:
    benches = doc.get("benchmarks")
    if not isinstance(benches, list):
        raise where.missing("benchmarks")
    if not benches:
        raise where.fail("no benchmarks in it (the run ended before its first one finished)")
    levels = []
    for i, b in enumerate(benches):
        at = lines[i] if i < len(lines) else where
        b = obj(b, at, f"benchmarks[{i}]")
        mode, concurrency, rate = _shape(b, at)
        label = level_label(mode, concurrency, rate)
        strategy = dig(b, "config", "strategy") or dig(b, "args", "strategy") or {}
        levels.append(benchmark(b, at, str(strategy.get("type_")) if label == "level" else label))
        _run_facts(doc, b, meta)
    return levels


def load(path: Path, text: str, values: list[tuple[Any, Where]], opts: ImportOptions,
         ) -> tuple[list[ImportedLevel], dict[str, Any]]:
    levels: list[ImportedLevel] = []
    meta: dict[str, Any] = {}
    for value, where in values:
        doc = obj(value, where, "a GuideLLM report")
        try:
            levels.extend(report(doc, item_lines(text, "benchmarks", where), where, meta))
        except ConfigError as exc:
            raise ConfigError(f"{exc}; the file looks like {describe(doc)}") from None
    return levels, meta

