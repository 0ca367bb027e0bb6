"""Inference-server metric names, mapped to the canonical quantities the diagnosis reads.

Canonical quantities (``CANONICAL``), the same for every engine:

* ``running``, ``waiting``   requests in the running batch / in the queue (gauges)
* ``kv_usage``               share of the KV cache in use, 0..1 (gauge)
* ``preemptions``, ``prompt_tokens``, ``generation_tokens``   cumulative counters
* ``cap``                    the server's admission cap on running requests, when it states it
* ``kv_capacity_tokens``     KV cache size in tokens (vLLM: ``num_gpu_blocks * block_size``)
* ``process_cpu``            CPU seconds of the process that answers ``/metrics`` (counter): for vLLM and
                             SGLang the API server (HTTP, tokenizer, detokenizer), whose rate near 1.0 is
                             a front end at one core (``analysis.diagnosis_front_end``)

Names were checked against each project's sources and documented exposition samples:
vLLM ``vllm/v1/metrics/loggers.py`` (v1) and its v0 predecessors, SGLang
``python/sglang/srt/metrics/collector.py``, llama.cpp ``tools/server`` (``--metrics``), TGI's
router (Rust ``metrics`` crate), and TensorRT-LLM ``tensorrt_llm/metrics/collector.py`` (``trtllm-serve``
publishes them on ``/prometheus/metrics``: its ``/metrics`` is JSON iteration statistics; Dynamo
republishes them as ``trtllm:``). Engine-specific quantities that help explain a plateau are kept
as "raw" keys (``swapped``, ``busy_slots_per_decode``, ``waiting_reason_capacity``, ...).

Matching rules, and why:

* Names match exactly: ``vllm:num_requests_waiting`` must not pick up
  ``vllm:num_requests_waiting_by_reason`` (a breakdown of the same requests, which would double them).
* Counters are named by their base name (gauges too may carry ``_total``, see ``_lookup``).
  prometheus_client's parser strips ``_total`` from a counter *family* name and adds it to a
  typed counter's *sample* name (TGI's ``tgi_request_count`` is read back as sample
  ``tgi_request_count_total``), while an untyped sample keeps whatever the server wrote.
  Lookups therefore try ``base_total`` first, then ``base``.
* A quantity lists alternative names (v1 before v0); the first one present wins, so a server that
  publishes both ``kv_cache_usage_perc`` and the deprecated ``gpu_cache_usage_perc`` is not doubled.
* Several label sets of one name (data-parallel engines, several models) are summed for counts and
  averaged for ratios; a ``breakdown`` label (vLLM's ``reason``) splits a quantity into one key per
  label value instead, and is never summed.

Histograms (``HISTOGRAMS``: the server's own time split, read by ``telemetry.histograms``) are kept
whole (``records.HistogramSnapshot``: cumulative bucket counts, count and sum), only those listed, and
summed over label sets with the same bounds (one per data-parallel engine):

* ``queue_s``      waiting before first scheduled    vLLM ``request_queue_time_seconds``, SGLang ``queue_time_seconds``
* ``prefill_s``    first scheduled -> first token    vLLM ``request_prefill_time_seconds``
* ``decode_s``     first token -> last token         vLLM ``request_decode_time_seconds``
* ``inference_s``  first scheduled -> last token     vLLM ``request_inference_time_seconds``
* ``e2e_s``        the server's end-to-end latency   vLLM/SGLang ``e2e_request_latency_seconds``
* ``ttft_s``       the server's time to first token  vLLM/SGLang ``time_to_first_token_seconds``
* ``step_tokens``  tokens per engine step            vLLM ``iteration_tokens_total`` (a histogram despite ``_total``)

vLLM's queue and prefill intervals are stamped in the engine core (``vllm/v1/metrics/stats.py``), its TTFT
and end-to-end latency in the API server from the request's arrival. SGLang's queue time is also from
entering the wait queue to the first forward pass; it publishes no per-request prefill or decode
histogram under a stable name (``per_stage_req_latency_seconds`` stages vary by mode and version), and
llama.cpp and TGI publish no such histograms on ``/metrics``: absent, the split shows those as unknown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from plateau_bench.records import HistogramSnapshot

Kind = Literal["gauge", "counter", "static"]
Combine = Literal["sum", "mean"]

# sample name -> [(labels, value)], as read by the official parser
MetricIndex = dict[str, list[tuple[dict[str, str], float]]]

CANONICAL: tuple[str, ...] = (
    "running", "waiting", "kv_usage", "preemptions", "prompt_tokens", "generation_tokens",
    "cap", "kv_capacity_tokens", "process_cpu",
)
# the histograms the time split reads, by canonical key (module docstring)
HISTOGRAMS: tuple[str, ...] = ("queue_s", "prefill_s", "decode_s", "inference_s", "e2e_s", "ttft_s", "step_tokens")


@dataclass(frozen=True)
class Quantity:
    """One quantity and the metric names that carry it, most preferred first."""

    key: str
    kind: Kind
    names: tuple[str, ...]
    combine: Combine = "sum"
    breakdown: str | None = None   # label whose values become keys "<key>_<value>"


@dataclass(frozen=True)
class EngineMap:
    name: str
    prefix: str
    quantities: tuple[Quantity, ...]
    # static quantities read from info-style metrics (vLLM cache_config_info, ...)
    derive: Callable[[MetricIndex], dict[str, float]] | None = None
    # JSON info endpoints this engine answers, by endpoint kind (see scraper.info_endpoints)
    info_kinds: tuple[str, ...] = ()
    # names kept by the prefilter besides the quantities' own (vLLM's *_info metrics)
    wanted_suffixes: tuple[str, ...] = ()
    # histogram key -> metric name (see HISTOGRAMS)
    histograms: tuple[tuple[str, str], ...] = ()


def _g(key: str, *names: str, combine: Combine = "sum", breakdown: str | None = None) -> Quantity:
    return Quantity(key, "gauge", names, combine, breakdown)


def _c(key: str, *names: str, breakdown: str | None = None) -> Quantity:
    return Quantity(key, "counter", names, "sum", breakdown)


def _s(key: str, *names: str) -> Quantity:
    return Quantity(key, "static", names, "sum")


# -- derived static values ---------------------------------------------------------------------

def _number(text: str | None) -> float | None:
    """A label value as a finite number; vLLM writes "None" before the cache is profiled."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _vllm_derive(index: MetricIndex) -> dict[str, float]:
    out: dict[str, float] = {}
    capacity = blocks = 0.0
    block_size: float | None = None
    for labels, _ in index.get("vllm:cache_config_info", []):
        n_blocks, size = _number(labels.get("num_gpu_blocks")), _number(labels.get("block_size"))
        if n_blocks is None or size is None:
            continue
        capacity += n_blocks * size   # one label set per engine: the pools add up
        blocks += n_blocks
        block_size = size
    if block_size is not None:
        out.update(kv_capacity_tokens=capacity, num_gpu_blocks=blocks, block_size=block_size)
    # vLLM does not publish max_num_seqs today; accept it from any *_config_info metric that does.
    for name in sorted(index):
        if not (name.startswith("vllm:") and name.endswith("_info")):
            continue
        seqs = [_number(labels.get("max_num_seqs")) for labels, _ in index[name]]
        found = [s for s in seqs if s is not None]
        if found:
            out["cap"] = sum(found)
            break
    return out


VLLM = EngineMap(
    name="vllm",
    prefix="vllm:",
    quantities=(
        _g("running", "vllm:num_requests_running"),
        _g("waiting", "vllm:num_requests_waiting"),
        _g("kv_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", combine="mean"),
        _c("preemptions", "vllm:num_preemptions"),
        _c("prompt_tokens", "vllm:prompt_tokens"),
        _c("generation_tokens", "vllm:generation_tokens"),
        _g("waiting_reason", "vllm:num_requests_waiting_by_reason", breakdown="reason"),
        _g("swapped", "vllm:num_requests_swapped"),
        _g("cpu_kv_usage", "vllm:cpu_cache_usage_perc", combine="mean"),
        _c("requests_finished", "vllm:request_success"),
        _c("prefix_cache_queries", "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
        _c("prefix_cache_hits", "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
        # prometheus_client's process collector, unprefixed: the API server process's own CPU
        _c("process_cpu", "process_cpu_seconds"),
    ),
    derive=_vllm_derive,
    wanted_suffixes=("_info",),
    histograms=(
        ("queue_s", "vllm:request_queue_time_seconds"),
        ("prefill_s", "vllm:request_prefill_time_seconds"),
        ("decode_s", "vllm:request_decode_time_seconds"),
        ("inference_s", "vllm:request_inference_time_seconds"),
        ("e2e_s", "vllm:e2e_request_latency_seconds"),
        ("ttft_s", "vllm:time_to_first_token_seconds"),
        ("step_tokens", "vllm:iteration_tokens_total"),
    ),
)

SGLANG = EngineMap(
    name="sglang",
    prefix="sglang:",
    quantities=(
        _g("running", "sglang:num_running_reqs"),
        _g("waiting", "sglang:num_queue_reqs"),
        _g("kv_usage", "sglang:token_usage", combine="mean"),
        _c("preemptions", "sglang:num_retracted_requests"),
        _c("prompt_tokens", "sglang:prompt_tokens"),
        _c("generation_tokens", "sglang:generation_tokens"),
        _s("cap", "sglang:max_running_requests"),
        _s("kv_capacity_tokens", "sglang:max_total_num_tokens"),
        _g("gen_throughput", "sglang:gen_throughput"),
        _g("used_tokens", "sglang:num_used_tokens"),
        _g("cache_hit_rate", "sglang:cache_hit_rate", combine="mean"),
        _g("retracted", "sglang:num_retracted_reqs"),
        _c("process_cpu", "process_cpu_seconds"),
    ),
    info_kinds=("server_info",),
    histograms=(
        ("queue_s", "sglang:queue_time_seconds"),
        ("e2e_s", "sglang:e2e_request_latency_seconds"),
        ("ttft_s", "sglang:time_to_first_token_seconds"),
    ),
)

def _llamacpp_derive(index: MetricIndex) -> dict[str, float]:
    """Busy slots summed over decode calls: llama.cpp publishes only their lifetime average per
    call, but average x calls is a counter, whose delta over a window gives the window's own
    average batch (see summary: ``busy_slots_per_decode_window``)."""
    per_decode = _lookup(index, _g("", "llamacpp:n_busy_slots_per_decode"))
    calls = _lookup(index, _c("", "llamacpp:n_decode"))
    if not per_decode or not calls:
        return {}
    value = per_decode[0][1] * calls[0][1]
    return {"busy_slots_total": value} if math.isfinite(value) else {}


LLAMACPP = EngineMap(
    name="llamacpp",
    prefix="llamacpp:",
    quantities=(
        _g("running", "llamacpp:requests_processing"),
        _g("waiting", "llamacpp:requests_deferred"),
        _g("kv_usage", "llamacpp:kv_cache_usage_ratio", combine="mean"),
        _c("prompt_tokens", "llamacpp:prompt_tokens"),
        _c("generation_tokens", "llamacpp:tokens_predicted"),
        _g("busy_slots_per_decode", "llamacpp:n_busy_slots_per_decode", combine="mean"),
        _c("decode_calls", "llamacpp:n_decode"),
        _g("kv_tokens", "llamacpp:kv_cache_tokens"),
        _g("prompt_tokens_per_s", "llamacpp:prompt_tokens_seconds", combine="mean"),
        _g("predicted_tokens_per_s", "llamacpp:predicted_tokens_seconds", combine="mean"),
    ),
    derive=_llamacpp_derive,
    info_kinds=("props", "slots"),
)

TGI = EngineMap(
    name="tgi",
    prefix="tgi_",
    quantities=(
        _g("running", "tgi_batch_current_size"),
        _g("waiting", "tgi_queue_size"),
        # TGI counts tokens per finished request, in histograms: their _sum is the counter.
        _c("generation_tokens", "tgi_request_generated_tokens_sum"),
        _c("prompt_tokens", "tgi_request_input_length_sum"),
        _g("batch_max_tokens", "tgi_batch_current_max_tokens"),
        _c("requests_finished", "tgi_request_success"),
        _c("batch_inferences", "tgi_batch_inference_count", breakdown="method"),
    ),
    info_kinds=("info",),
)

def _trtllm_derive(index: MetricIndex) -> dict[str, float]:
    """The KV pool in tokens: its blocks times the tokens a block holds (TensorRT-LLM publishes both)."""
    blocks = _lookup(index, _g("", *_trt("kv_cache_max_blocks")))
    per_block = _lookup(index, _g("", *_trt("kv_cache_tokens_per_block")))
    if not blocks or not per_block:
        return {}
    value = sum(v for _, v in blocks) * per_block[0][1]
    return {"kv_capacity_tokens": value} if math.isfinite(value) and value > 0 else {}


def _trt(name: str) -> tuple[str, str]:
    """trtllm-serve's name (``trtllm_``), and the one Dynamo republishes it under (``trtllm:``)."""
    return f"trtllm_{name}", f"trtllm:{name}"


TRTLLM = EngineMap(
    name="trtllm",
    prefix="trtllm",
    quantities=(
        _g("running", *_trt("num_requests_running")),
        _g("waiting", *_trt("num_requests_waiting")),
        _g("kv_usage", *_trt("kv_cache_utilization"), combine="mean"),
        _c("prompt_tokens", *_trt("prompt_tokens")),
        _c("generation_tokens", *_trt("generation_tokens")),
        # the executor's most active requests at once: its batch size, the admission cap
        _s("cap", *_trt("max_num_active_requests")),
        _g("paused", *_trt("num_paused_requests")),                 # evicted under MAX_UTILIZATION (not the default)
        _g("step_token_budget", *_trt("max_num_tokens_runtime")),   # --max_num_tokens as the runtime holds it
        _g("kv_max_blocks", *_trt("kv_cache_max_blocks")),
        _g("kv_tokens_per_block", *_trt("kv_cache_tokens_per_block"), combine="mean"),
        _g("iteration_latency_s", *_trt("iteration_latency_seconds"), combine="mean"),
        _c("requests_finished", *_trt("request_success")),
        _c("process_cpu", "process_cpu_seconds"),
    ),
    derive=_trtllm_derive,
    histograms=(
        ("queue_s", "trtllm_request_queue_time_seconds"),
        ("prefill_s", "trtllm_request_prefill_time_seconds"),
        ("decode_s", "trtllm_request_decode_time_seconds"),
        ("inference_s", "trtllm_request_inference_time_seconds"),
        ("e2e_s", "trtllm_e2e_request_latency_seconds"),
        ("ttft_s", "trtllm_time_to_first_token_seconds"),
    ),
)

ENGINES: tuple[EngineMap, ...] = (VLLM, SGLANG, LLAMACPP, TGI, TRTLLM)
_BY_NAME = {e.name: e for e in ENGINES}


def engine_map(name: str) -> EngineMap | None:
    return _BY_NAME.get(name)


# -- detection and extraction ------------------------------------------------------------------------

def _lookup(index: MetricIndex, q: Quantity) -> list[tuple[dict[str, str], float]] | None:
    for name in q.names:
        # A server may type a gauge as a counter (llama.cpp does for n_busy_slots_per_decode),
        # and the parser then renames its sample to "<name>_total".
        candidates = (name + "_total", name) if q.kind == "counter" else (name, name + "_total")
        for candidate in candidates:
            series = index.get(candidate)
            if series:
                return series
    return None


def detect_engine(index: MetricIndex, hint: Iterable[str] = ()) -> EngineMap | None:
    """The engine whose names are present (most matched quantities wins); ``hint`` breaks a blank."""
    best: EngineMap | None = None
    best_score = 0
    for engine in ENGINES:
        # every Python server publishes its process CPU: it says nothing about which engine this is
        score = sum(1 for q in engine.quantities if q.key != "process_cpu" and _lookup(index, q))
        if score > best_score:
            best, best_score = engine, score
    if best is None:
        for engine in ENGINES:
            if engine.name in hint or any(name.startswith(engine.prefix) for name in index):
                return engine
    return best


def _finite(series: Iterable[tuple[dict[str, str], float]]) -> list[tuple[dict[str, str], float]]:
    return [(labels, v) for labels, v in series if math.isfinite(v)]


def extract(engine: EngineMap, index: MetricIndex) -> tuple[dict[str, float], dict[str, float]]:
    """Canonical values and raw engine-specific values from one parsed scrape."""
    values: dict[str, float] = {}
    raw: dict[str, float] = {}
    for q in engine.quantities:
        series = _finite(_lookup(index, q) or [])
        if not series:
            continue
        target = values if q.key in CANONICAL else raw
        if q.breakdown is not None:
            parts: dict[str, float] = {}
            for labels, v in series:
                part = labels.get(q.breakdown, "unknown")
                parts[part] = parts.get(part, 0.0) + v   # still summed across engines
            for part, v in parts.items():
                raw[f"{q.key}_{part}"] = v
            continue
        total = sum(v for _, v in series)
        target[q.key] = total / len(series) if q.combine == "mean" else total
    if engine.derive is not None:
        for key, v in engine.derive(index).items():
            (values if key in CANONICAL else raw)[key] = v
    return values, raw


def extract_histograms(engine: EngineMap, index: MetricIndex) -> dict[str, HistogramSnapshot]:
    """The engine's listed histograms from one parsed scrape (summed over label sets with equal bounds)."""
    out: dict[str, HistogramSnapshot] = {}
    for key, name in engine.histograms:
        snapshot = _histogram(index, name)
        if snapshot is not None:
            out[key] = snapshot
    return out


def _histogram(index: MetricIndex, name: str) -> HistogramSnapshot | None:
    """One histogram's buckets, count and sum; None when absent or when its label sets disagree on bounds
    (summing buckets with different edges would put observations in the wrong ones)."""
    per_set: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for labels, value in index.get(name + "_bucket", []):
        bound = _number(labels.get("le"))
        if bound is None or not math.isfinite(value):
            continue   # le="+Inf" has no finite bound: its cumulative count is the histogram's count
        series = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        per_set.setdefault(series, {})[bound] = value
    counts = _finite(index.get(name + "_count", []))
    sums = _finite(index.get(name + "_sum", []))
    if not per_set or not counts or not sums:
        return None
    bounds = sorted(next(iter(per_set.values())))
    if any(sorted(buckets) != bounds for buckets in per_set.values()):
        return None
    cumulative = [sum(buckets[b] for buckets in per_set.values()) for b in bounds]
    return HistogramSnapshot(le=bounds, cumulative=cumulative, count=sum(v for _, v in counts),
                             sum=sum(v for _, v in sums))


# -- JSON info endpoints -------------------------------------------------------------------------

def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def info_values(engine: str, kind: str, payload: Any) -> dict[str, float]:
    """Static quantities from an engine's JSON info endpoint.

    * llama.cpp ``/props``: ``total_slots`` is ``--parallel``, the cap on running requests.
    * llama.cpp ``/slots``: one object per slot (used when ``/props`` lacks ``total_slots``).
    * SGLang ``/get_server_info``: ``max_running_requests`` (null unless set) and
      ``max_total_num_tokens`` (the KV pool), at top level or in ``internal_states``.
    * TGI ``/info``: ``max_batch_size`` (null unless set), ``max_batch_total_tokens`` (the KV
      budget) and ``max_concurrent_requests`` (the router's admission limit, which answers 429).
    """
    out: dict[str, float] = {}
    if engine == "llamacpp" and kind == "props" and isinstance(payload, Mapping):
        slots = _num(payload.get("total_slots"))
        if slots is not None:
            out["cap"] = slots
    elif engine == "llamacpp" and kind == "slots" and isinstance(payload, list) and payload:
        out["cap"] = float(len(payload))
    elif engine == "sglang" and kind == "server_info" and isinstance(payload, Mapping):
        states = payload.get("internal_states")
        first = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
        for key, field_name in (("cap", "max_running_requests"), ("kv_capacity_tokens", "max_total_num_tokens")):
            value = _num(payload.get(field_name))
            value = value if value is not None else _num(first.get(field_name))
            if value is not None:
                out[key] = value
    elif engine == "tgi" and kind == "info" and isinstance(payload, Mapping):
        for key, field_name in (("cap", "max_batch_size"), ("kv_capacity_tokens", "max_batch_total_tokens"),
                                ("max_concurrent_requests", "max_concurrent_requests")):
            value = _num(payload.get(field_name))
            if value is not None:
                out[key] = value
    return out


# -- kinds, for summaries ----------------------------------------------------------------------------

def _kinds() -> tuple[dict[str, Kind], dict[str, Kind]]:
    exact: dict[str, Kind] = {"busy_slots_total": "counter", "cap": "static", "kv_capacity_tokens": "static",
                              "num_gpu_blocks": "static", "block_size": "static",
                              "max_concurrent_requests": "static"}
    prefixes: dict[str, Kind] = {}
    for engine in ENGINES:
        for q in engine.quantities:
            if q.breakdown is not None:
                prefixes[q.key + "_"] = q.kind
            else:
                exact.setdefault(q.key, q.kind)
    return exact, prefixes


_KIND_EXACT, _KIND_PREFIX = _kinds()


def kind_of(key: str) -> Kind:
    """How a sample key is summarized; keys no map knows (GPU readings, ...) are gauges."""
    kind = _KIND_EXACT.get(key)
    if kind is not None:
        return kind
    for prefix, k in _KIND_PREFIX.items():
        if key.startswith(prefix):
            return k
    if key.endswith("_energy_j"):   # NVML's energy counter (telemetry.gpu): joules since the driver loaded
        return "counter"
    return "gauge"
