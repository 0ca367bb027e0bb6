"""Levels as llm-d Benchmark Reports (schema 0.2), for teams that compare runs in llm-d's tooling.

One report per level (llm-d keeps one per load point), as YAML documents separated by ``---``
(``plateau report --format llm-d``; ``plateau import`` reads them back, see ``importers.llmd``). What a
report carries and a level has is written; what the level did not measure is left out, never written as 0:

* ``run``: ``uid`` (a hash of the result's creation time, the level's label and attempt), ``eid`` (of the
  creation time: common to the levels of one result), ``time`` (the level's start, end and length);
* ``scenario.load.standardized``: ``tool`` plateau-bench and its version, ``source`` (``random``, or
  ``sampled`` from a dataset or trace), ``stage`` (the level's index), ``input_seq_len`` /
  ``output_seq_len`` (the workload's lengths: ``fixed``, or ``other`` when drawn from a distribution),
  ``concurrency`` or ``rate_qps``;
* ``results.request_performance.aggregate``: requests (total, failures, mean lengths), throughput (mean
  output, input, total token and request rates over the level's window), latency (TTFT, TPOT, ITL and
  request latency in ms: mean, p50, p90, p99, max);
* ``results.observability.components``: the server's running and waiting requests, KV-cache usage
  (``fraction``) and GPU power (``Watts``) when ``/metrics`` or the GPUs were read.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

import yaml

from plateau_bench.result import Latency, LevelResult, ResultFile

SCHEMA_VERSION = "0.2"
_LATENCIES = (("time_to_first_token", "ttft_ms", "ms"), ("time_per_output_token", "tpot_ms", "ms/token"),
              ("inter_token_latency", "itl_ms", "ms/token"), ("request_latency", "e2e_ms", "ms"))


def _hash(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:32]


def _stat(units: str, mean: float | None, low: float | None = None, high: float | None = None,
          ) -> dict[str, Any] | None:
    if mean is None:
        return None
    out: dict[str, Any] = {"units": units, "mean": mean}
    out.update({k: v for k, v in (("min", low), ("max", high)) if v is not None})
    return out


def _latency(lat: Latency, units: str) -> dict[str, Any] | None:
    if lat.mean is None:
        return None
    stat: dict[str, Any] = {"units": units, "mean": lat.mean}
    stat.update({k: v for k, v in (("p50", lat.p50), ("p90", lat.p90), ("p99", lat.p99), ("max", lat.max))
                 if v is not None})
    return stat


def _length(nominal: int, drawn: bool) -> dict[str, Any]:
    return {"distribution": "other" if drawn else "fixed", "value": nominal}


def _time(level: LevelResult) -> dict[str, str]:
    out = {"duration": f"PT{level.duration_s:.6f}S"}
    if level.started_at:
        try:
            start = datetime.fromisoformat(level.started_at)
        except ValueError:
            return out
        out["start"] = start.isoformat()
        out["end"] = (start + timedelta(seconds=level.wall_s)).isoformat()
    return out


def _load(level: LevelResult, stage: int, result: ResultFile) -> dict[str, Any]:
    w = result.spec.workload
    standardized: dict[str, Any] = {
        "tool": "plateau-bench", "tool_version": result.tool.version or "unknown",
        "source": "sampled" if w.dataset or w.trace else "random", "stage": stage,
        "input_seq_len": _length(w.input_len, w.input_dist is not None or w.range_ratio > 0),
        "output_seq_len": _length(w.output_len, w.output_dist is not None or w.range_ratio > 0),
    }
    if level.concurrency is not None and level.concurrency >= 1:
        standardized["concurrency"] = level.concurrency
    if level.rate is not None and level.rate > 0:
        standardized["rate_qps"] = level.rate
    return {"metadata": {"schema_version": "0.0.1", "cfg_id": _hash(result.created, "load", level.label)},
            "standardized": standardized, "native": {"config": {"mode": level.mode, "label": level.label}}}


def _requests(level: LevelResult) -> dict[str, Any]:
    out: dict[str, Any] = {"total": level.num_requests, "failures": level.failed}
    if level.completed:
        if level.input_tokens:
            out["input_length"] = _stat("count", level.input_tokens / level.completed)
        if level.output_tokens:
            out["output_length"] = _stat("count", level.output_tokens / level.completed)
    return out


def _throughput(level: LevelResult) -> dict[str, Any]:
    input_rate = level.total_throughput - level.output_throughput if level.total_throughput else None
    rates = (("output_token_rate", "tokens/s", level.output_throughput or None),
             ("input_token_rate", "tokens/s", input_rate),
             ("total_token_rate", "tokens/s", level.total_throughput or None),
             ("request_rate", "queries/s", level.request_throughput or None))
    return {key: _stat(units, value) for key, units, value in rates if value is not None}


def _observability(level: LevelResult, result: ResultFile) -> dict[str, Any] | None:
    t = level.telemetry
    power = level.gpu_metrics.power_w_mean if level.gpu_metrics is not None else None
    figures = {"running_requests": _stat("count", t.running_mean, t.running_min, t.running_max),
               "waiting_requests": _stat("count", t.waiting_mean, t.waiting_min, t.waiting_max),
               "kv_cache_usage": _stat("fraction", t.kv_usage_mean, t.kv_usage_min, t.kv_usage_max),
               "power_consumption": _stat("Watts", power if power is not None else t.gpu_power_w_mean,
                                          None, t.gpu_power_w_max)}
    aggregate = {k: v for k, v in figures.items() if v is not None}
    if not aggregate:
        return None
    label = result.target.engine or result.target.server or "server"
    return {"components": [{"component_label": label, "aggregate": aggregate}]}


def to_llmd_report(level: LevelResult, stage: int, result: ResultFile) -> dict[str, Any]:
    """One level as an llm-d Benchmark Report 0.2 (a plain dict, ready for YAML or JSON)."""
    latency = {key: stat for key, attr, units in _LATENCIES
               if (stat := _latency(getattr(level, attr), units)) is not None}
    aggregate = {"requests": _requests(level), "throughput": _throughput(level), "latency": latency}
    results: dict[str, Any] = {"request_performance": {"aggregate": aggregate}}
    if (observability := _observability(level, result)) is not None:
        results["observability"] = observability
    model = result.target.model
    return {
        "version": SCHEMA_VERSION,
        "run": {"uid": _hash(result.created, level.label, level.attempt), "eid": _hash(result.created),
                "time": _time(level),
                "description": f"plateau-bench level {level.label}" + (f" of {model}" if model else "")},
        "scenario": {"load": _load(level, stage, result)},
        "results": results,
    }


def llmd_yaml(result: ResultFile) -> str:
    """Every level of ``result`` as an llm-d Benchmark Report, YAML documents separated by ``---``."""
    docs = [to_llmd_report(lv, i, result) for i, lv in enumerate(result.levels)]
    return yaml.safe_dump_all(docs, sort_keys=False) if docs else ""
