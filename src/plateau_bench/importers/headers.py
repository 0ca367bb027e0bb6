"""Column headers of a plain results table, matched flexibly: what each column is, its statistic, its unit.

A header is lower-cased, ``_`` and ``-`` become spaces, and its unit is taken from brackets
(``lat avg (s)``, ``TTFT [ms]``) or a trailing unit word (``e2e_p50_ms``, ``wall_s``, ``output tok/s``).
The remaining words name the column (first match wins, in ``_KINDS`` order), e.g.:

=====================  =============================================================================
``concurrency``        ``C``, ``concurrency``, ``max concurrency``, ``users``, ``clients``, ``streams``
``num_prompts``        ``num_prompts``, ``prompts``, ``num requests``, ``requests``
``rate``               ``rate``, ``request rate``, ``qps``
``ok`` / ``failed``    ``ok`` (``256/256`` or a count), ``completed``, ``success``; ``failed``, ``errors``
``wall``               ``wall``, ``wall time``, ``duration``, ``elapsed``, ``time``
throughputs            ``tok/s``/``tokens/s``/``throughput`` with ``output``/``total``/``input``/``peak``;
                       a bare ``tok/s`` is output tok/s; ``req/s`` is request throughput
latencies              ``latency``/``lat``/``e2e``, ``ttft``, ``tpot``, ``itl`` with ``avg``/``mean``,
                       ``p50``/``median``, ``p90``, ``p99``, ``max`` (none: the mean)
concurrency figures    ``achieved concurrency``, ``decoding concurrency``, ``peak in flight``,
                       ``peak decoding``
lengths and tokens     ``input len``/``isl``, ``output len``/``osl``; ``output tokens``, ``input tokens``
=====================  =============================================================================

Time units: ns, us, ms, s, sec, min (no unit: ms for latencies, s for wall time, said in the notes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0,
              "seconds": 1.0, "min": 60.0, "mins": 60.0, "minutes": 60.0}
RATE_UNITS = ("tok/s", "tokens/s", "token/s", "tok/sec", "tokens/sec", "tps", "req/s", "requests/s", "rps",
              "requests/sec", "req/sec")
STATS = {"avg": "mean", "mean": "mean", "average": "mean", "p50": "p50", "median": "p50", "med": "p50",
         "p90": "p90", "p99": "p99", "max": "max"}
UNSUPPORTED_STATS = ("p95", "p999", "p99.9", "min", "std", "stdev")
LATENCIES = (("ttft", ("ttft", "time to first token", "first token")), ("tpot", ("tpot", "time per output token")),
             ("itl", ("itl", "inter token", "intertoken", "inter chunk")),
             ("e2e", ("e2e", "e2el", "latency", "lat", "end to end", "request latency")))


# Columns ``plateau report --format md|csv`` writes that an import does not keep (the server's time split,
# the GPUs' energy), as normalised here: a table plateau wrote reads back without a warning about them.
EXPORT_ONLY = ("server queue mean", "server prefill mean", "server decode mean", "outside engine", "tokens per step",
               "output tok per j", "j per output tok", "power pct of limit", "sm clock pct of max")


@dataclass(frozen=True)
class Column:
    index: int
    header: str
    kind: str                  # see ``classify``; "" when the header was not understood
    stat: str | None = None    # mean | p50 | p90 | p99 | max, for latencies
    unit: str | None = None    # the unit as written (lower case), when the header has one
    defaulted: bool = False    # latency without a statistic: read as the mean


def _split_unit(text: str) -> tuple[str, str | None]:
    m = re.search(r"[\(\[]\s*([^\)\]]*)\s*[\)\]]", text)
    if m:
        return (text[:m.start()] + " " + text[m.end():]).strip(), m.group(1).strip() or None
    for unit in RATE_UNITS:
        if text.endswith(" " + unit) or text == unit:
            return text[: -len(unit)].strip(), unit
    if text.endswith(" tok s") or text.endswith(" tokens s"):
        return text.rsplit(" ", 2)[0], "tok/s"
    words = text.split()
    if len(words) > 1 and words[-1] in TIME_UNITS:
        return " ".join(words[:-1]), words[-1]
    return text, None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9.]+", text)


def _throughput(name: str, words: list[str], unit: str | None) -> str | None:
    rate_unit = unit is not None and unit in RATE_UNITS
    if not (rate_unit or "throughput" in words or "tok/s" in name or "tokens/s" in name):
        return None
    if (unit or "").startswith(("req", "rps")) or ("request" in words and "token" not in name):
        return "request_throughput"
    if "peak" in words or "max" in words:
        return "peak_output_throughput"
    if "total" in words:
        return "total_throughput"
    if "input" in words or "prompt" in words:
        return "input_throughput"
    return "output_throughput"


def _latency(name: str, words: list[str]) -> tuple[str, str | None] | None:
    for kind, keys in LATENCIES:
        if any((k in words) if " " not in k else (k in name) for k in keys):
            stat = next((STATS[w] for w in words if w in STATS), None)
            if stat is None and any(w in UNSUPPORTED_STATS for w in words):
                return "unsupported", None
            return kind, stat
    return None


def _plain(name: str, words: list[str]) -> str:
    checks: tuple[tuple[str, bool], ...] = (
        ("label", name in ("level", "label", "name", "run level")),
        ("mode", name == "mode"),
        ("ignore", name in ("run", "#", "no", "index") or name in EXPORT_ONLY),
        ("achieved_concurrency", "achieved" in words or name in ("avg concurrency", "mean concurrency",
                                                                 "concurrency achieved", "little concurrency")),
        ("decoding_concurrency", "decoding" in words and "concurrency" in words),
        ("peak_decoding", "peak" in words and "decoding" in words),
        ("peak_in_flight", name in ("peak in flight", "max in flight", "peak concurrency", "max concurrent requests",
                                    "peak concurrent requests")),
        ("concurrency", name in ("c", "concurrency", "max concurrency", "users", "clients", "workers", "streams",
                                 "parallel", "conc", "batch")),
        ("num_prompts", name in ("num prompts", "prompts", "num requests", "requests", "n requests", "n",
                                 "number of prompts", "num prompt")),
        ("rate", name in ("rate", "request rate", "qps", "target rate", "arrival rate")),
        ("ok", name in ("ok", "success", "successful", "completed", "succeeded", "done")),
        ("failed", name in ("failed", "errors", "error", "failures", "fail")),
        ("hung", name == "hung"),
        ("wall", name in ("wall", "wall time", "duration", "elapsed", "time", "benchmark duration", "total time",
                          "wall clock")),
        ("input_len", name in ("input len", "isl", "prompt len", "input length", "prompt length")),
        ("output_len", name in ("output len", "osl", "output length", "max tokens")),
        ("output_tokens", name in ("output tokens", "generated tokens", "total output tokens")),
        ("input_tokens", name in ("input tokens", "prompt tokens", "total input tokens")),
    )
    return next((kind for kind, hit in checks if hit), "")


def classify(index: int, raw: str) -> Column:
    """What one header names (``kind`` is empty when it is not understood)."""
    text = re.sub(r"[_\-]+", " ", raw.strip().lower().replace("*", "")).strip()
    text = re.sub(r"\s+", " ", text)
    name, unit = _split_unit(text)
    words = _words(name)
    thr = _throughput(name, words, unit)
    if thr:
        return Column(index, raw, thr, unit=unit)
    lat = _latency(name, words)
    if lat:
        return Column(index, raw, lat[0], stat=lat[1] or "mean", unit=unit, defaulted=lat[1] is None)
    return Column(index, raw, _plain(name, words), unit=unit)


def seconds_per_unit(column: Column, default: str) -> float | None:
    """Seconds per unit of a time column (None: not a time unit)."""
    return TIME_UNITS.get(column.unit or default)
