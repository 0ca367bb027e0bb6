"""llm-d's Benchmark Report (schema 0.2.x): one report per load point, as YAML or JSON, written by llm-d's
benchmark harnesses to normalise the output of several load generators.

A report holds no per-request data, so it becomes a summary level (``importers.common.summary_level``):

* the load from ``scenario.load.standardized``: ``concurrency`` (``.inf`` or absent: an open-loop
  ``rate_qps``), ``stage``, ``tool`` and the mean ``input_seq_len`` / ``output_seq_len``;
* the figures from ``results.request_performance.aggregate``: ``requests`` (``total``, ``failures``,
  ``incomplete``), ``throughput`` (``output_token_rate``, ``input_token_rate``, ``total_token_rate``,
  ``request_rate``; their mean) and ``latency`` (``time_to_first_token``, ``time_per_output_token``,
  ``inter_token_latency``, ``request_latency``: mean, p50, p90, p99, max, in their stated ``units``,
  ``s``/``ms`` or ``s/token``/``ms/token``);
* the server's side from ``results.observability.components[].aggregate``: ``running_requests``,
  ``waiting_requests`` and ``kv_cache_usage`` (``percent`` or ``fraction``), summed over the engine
  components for the request counts (several replicas) and averaged for the cache, and ``power_consumption``;
* the run's length from ``run.time.duration`` (ISO 8601, e.g. ``PT49.97S``) or ``start``/``end``.

Each statistic needs its ``mean`` (the schema requires it); the others are read when present.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from plateau_bench.errors import ConfigError
from plateau_bench.importers.common import ImportedLevel, ImportOptions, Summary, Where, summary_level
from plateau_bench.result import Latency, ServerTelemetry

SCHEMA_VERSIONS = ("0.2",)
_TIME_SCALE = {"s": 1000.0, "ms": 1.0, "s/token": 1000.0, "ms/token": 1.0}
_LATENCIES = (("ttft", "time_to_first_token"), ("tpot", "time_per_output_token"),
              ("itl", "inter_token_latency"), ("e2e", "request_latency"))
_STAGE = re.compile(r"stage[-_ ]?(\d+)")
_DURATION = re.compile(r"^P(?:(?P<d>[\d.]+)D)?(?:T(?:(?P<h>[\d.]+)H)?(?:(?P<m>[\d.]+)M)?(?:(?P<s>[\d.]+)S)?)?$")


def is_report(doc: object) -> bool:
    """A Benchmark Report: a ``version`` and ``results`` with ``request_performance`` (or ``run``)."""
    return (isinstance(doc, dict) and "version" in doc and isinstance(doc.get("results"), dict)
            and ("request_performance" in doc["results"] or isinstance(doc.get("run"), dict)))


def _get(doc: object, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def _stat_value(stat: object, key: str) -> float | None:
    value = _get(stat, key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mean(stat: object) -> float | None:
    return _stat_value(stat, "mean")


def _latency(stat: object, where: Where, name: str) -> Latency | None:
    if not isinstance(stat, dict):
        return None
    units = stat.get("units")
    if units not in _TIME_SCALE:
        raise where.fail(f"{name}: units {units!r} are not a time (expected one of {', '.join(_TIME_SCALE)})")
    scale = _TIME_SCALE[units]

    def ms(key: str) -> float | None:
        value = stat.get(key)
        return float(value) * scale if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    if ms("mean") is None:
        raise where.missing(f"{name}.mean", "an llm-d Benchmark Report statistic")
    return Latency(mean=ms("mean"), p50=ms("p50"), p90=ms("p90"), p99=ms("p99"), max=ms("max"))


def duration_s(run: object) -> float | None:
    """The run's length: ``time.duration`` (ISO 8601) or ``time.end - time.start``."""
    text = _get(run, "time", "duration")
    if isinstance(text, str) and (m := _DURATION.match(text.strip())):
        parts = {k: float(v) for k, v in m.groupdict().items() if v}
        total = parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60 + parts.get("s", 0)
        if total > 0:
            return total
    start, end = _get(run, "time", "start"), _get(run, "time", "end")
    try:
        span = (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
    except ValueError:
        return None
    return span if span > 0 else None


def _engine_telemetry(doc: dict[str, Any]) -> ServerTelemetry:
    """Request counts summed over the components (replicas), the KV cache's usage averaged, power summed.

    A sum of per-replica minima or maxima is a bound, not the fleet's own extreme: with one component
    (the usual single engine) it is exact, and with several only the means are summed.
    """
    components = [c for c in _get(doc, "results", "observability", "components") or [] if isinstance(c, dict)]
    figures: dict[str, list[float]] = {}
    for comp in components:
        agg = _get(comp, "aggregate")
        usage_key = "kv_cache_usage" if _get(agg, "kv_cache_usage") else "gpu_cache_usage"
        for key, name in (("running_requests", "running"), ("waiting_requests", "waiting"),
                          (usage_key, "kv_usage"), ("power_consumption", "power")):
            stat = _get(agg, key)
            scale = 0.01 if name == "kv_usage" and _get(stat, "units") == "percent" else 1.0
            for part in ("mean", "min", "max"):
                if (value := _stat_value(stat, part)) is not None:
                    figures.setdefault(f"{name}_{part}", []).append(value * scale)

    def total(key: str) -> float | None:
        values = figures.get(key)
        if not values or (not key.endswith("_mean") and len(components) > 1):
            return None
        return sum(values) / len(values) if key.startswith("kv_usage") else sum(values)

    return ServerTelemetry(
        running_mean=total("running_mean"), running_min=total("running_min"), running_max=total("running_max"),
        waiting_mean=total("waiting_mean"), waiting_min=total("waiting_min"), waiting_max=total("waiting_max"),
        kv_usage_mean=total("kv_usage_mean"), kv_usage_min=total("kv_usage_min"),
        kv_usage_max=total("kv_usage_max"), gpu_power_w_mean=total("power_mean"), gpu_power_w_max=total("power_max"))


def _load(doc: dict[str, Any]) -> tuple[int | None, float | None, str]:
    """Concurrency, open-loop rate and a label from ``scenario.load.standardized``."""
    load = _get(doc, "scenario", "load", "standardized") or {}
    conc = load.get("concurrency") if isinstance(load, dict) else None
    rate = load.get("rate_qps") if isinstance(load, dict) else None
    concurrency = int(conc) if isinstance(conc, (int, float)) and math.isfinite(conc) and conc >= 1 else None
    rate_qps = float(rate) if isinstance(rate, (int, float)) and rate > 0 else None
    if concurrency is not None:
        return concurrency, None, f"C={concurrency}"
    if rate_qps is not None:
        return None, rate_qps, f"rate={rate_qps:g}/s"
    stage = load.get("stage") if isinstance(load, dict) else None
    if stage is None:   # a report without its scenario (inference-perf's partial reports) names it in its uid
        found = _STAGE.search(str(_get(doc, "run", "uid") or ""))
        stage = found.group(1) if found else None
    return None, None, f"stage {stage}" if stage is not None else "report"


def report_level(doc: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    """One Benchmark Report as a summary level, with the server figures its observability section holds."""
    version = str(doc.get("version"))
    if not version.startswith(SCHEMA_VERSIONS):
        raise where.fail(f"llm-d Benchmark Report version {version!r}: plateau import reads "
                         f"{', '.join(v + '.x' for v in SCHEMA_VERSIONS)}")
    agg = _get(doc, "results", "request_performance", "aggregate")
    if not isinstance(agg, dict):
        raise where.missing("results.request_performance.aggregate", f"an llm-d Benchmark Report {version}")
    concurrency, rate, label = _load(doc)
    if concurrency is None and rate is None and opts.concurrency is not None:
        concurrency, label = opts.concurrency, f"C={opts.concurrency}"
    requests, throughput, latency = agg.get("requests") or {}, agg.get("throughput") or {}, agg.get("latency") or {}
    total, failures = _get(requests, "total"), _get(requests, "failures")
    incomplete = _get(requests, "incomplete") or 0
    failed = (failures or 0) + incomplete if failures is not None or incomplete else None
    # A report written by plateau report --format llm-d says how the level ran (llm-d has no such field).
    native_mode = _get(doc, "scenario", "load", "native", "config", "mode")
    mode = native_mode if native_mode in ("burst", "steady", "rate") else "rate" if rate is not None else "burst"
    s = Summary(label=label, mode=mode, concurrency=concurrency, rate=rate,
                num_requests=int(total) if isinstance(total, (int, float)) else None,
                failed=int(failed) if failed is not None else None,
                duration_s=duration_s(doc.get("run")),
                output_throughput=_mean(_get(throughput, "output_token_rate")),
                input_throughput=_mean(_get(throughput, "input_token_rate")),
                total_throughput=_mean(_get(throughput, "total_token_rate")),
                request_throughput=_mean(_get(throughput, "request_rate")),
                output_len=_mean(_get(requests, "output_length")) or opts.output_len,
                input_len=_mean(_get(requests, "input_length")) or opts.input_len)
    for attr, key in _LATENCIES:
        setattr(s, attr, _latency(latency.get(key), where, f"latency.{key}"))
    tool = _get(doc, "scenario", "load", "standardized", "tool")
    imported = summary_level(s, f"an llm-d Benchmark Report {version}" + (f" of {tool}" if tool else "")
                             + f" ({where.path})")
    imported.level.telemetry = _engine_telemetry(doc)
    return imported


def model(doc: dict[str, Any]) -> str | None:
    for comp in _get(doc, "scenario", "stack") or []:
        name = _get(comp, "standardized", "model", "name")
        if isinstance(name, str):
            return name
    return None


def yaml_values(path: Path, text: str) -> list[tuple[Any, Where]]:
    """Every YAML document in ``text`` (``---`` separates several reports in one file), with its line."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    starts = [1] + [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("---") and i > 0]
    return [(doc, Where(str(path), starts[i] if i < len(starts) else 1)) for i, doc in enumerate(docs)]


def is_report_file(path: Path) -> bool:
    """A YAML file holding Benchmark Reports (a tool's YAML configuration beside its results is not one)."""
    try:
        values = yaml_values(path, path.read_text(errors="replace"))
    except (ConfigError, OSError):
        return False
    return bool(values) and all(is_report(v) for v, _ in values)
