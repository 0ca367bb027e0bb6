"""What every importer shares: where a figure came from, reading fields, and building levels.

A source gives either per-request records or only level summaries:

* **records** (``records_level``) are turned into ``RequestRecord`` values with times in ns relative to
  the level's start and handed to ``analysis.metrics.compute_level``, so every metric is defined once
  and recomputed exactly as for a native run;
* **summaries** (``summary_level``) fill the ``LevelResult`` fields the source states. A few more
  follow from them by identities, each said in the level's notes:

  - achieved concurrency = sum of request latencies / window (Little's law): completed x mean E2E /
    duration, or request throughput x mean E2E;
  - decoding concurrency = completed x (mean E2E - mean TTFT) / duration (not from TPOT: output tok/s x
    mean TPOT is the same figure only when every request has the same length, which a table rarely shows);
  - throughputs and token counts from one another and the duration.

  Nothing else is filled in: what the source did not measure keeps its empty default (0 or None) and
  the notes name it. ``peak_decoding`` (the most requests decoding at one instant) needs per-request
  times, so a summary never has it.

Every problem with the input is a one-line ``ConfigError`` naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.analysis.metrics import Window, compute_level
from plateau_bench.errors import ConfigError, ErrorClass
from plateau_bench.importers.checks import check_records, check_summary
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency, LevelResult

TOKEN_SOURCE_IMPORTED = "imported"   # token counts as the source tool reported them
MISSING_PREFIX = "not in the source: "
SOURCE_PREFIX = "imported from "


@dataclass(frozen=True)
class ImportOptions:
    """What the user says about sources that do not say it themselves."""

    mode: str | None = None            # burst | steady (tables)
    input_len: int | None = None
    output_len: int | None = None
    concurrency: int | None = None     # for a single-level source that does not record it


@dataclass(frozen=True)
class Where:
    """A place in an input file, for error messages and a level's provenance."""

    path: str
    line: int = 1

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self}: {message}")

    def missing(self, key: str, what: str = "") -> ConfigError:
        return self.fail(f"missing field '{key}'" + (f" ({what})" if what else ""))


@dataclass
class ImportedLevel:
    level: LevelResult
    records: list[RequestRecord] = field(default_factory=list)


@dataclass
class Imported:
    """The levels of one or more sources, with what the sources say about the run as a whole."""

    levels: list[ImportedLevel] = field(default_factory=list)
    engine: str | None = None
    model: str | None = None
    input_len: int | None = None
    output_len: int | None = None
    formats: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- reading ---------------------------------------------------------------------------------
def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def json_values(path: Path, text: str) -> list[tuple[Any, Where]]:
    """Every JSON value in ``text`` (one document, JSON lines, or documents appended), with its line."""
    decoder = json.JSONDecoder()
    out: list[tuple[Any, Where]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n":
            pos += 1
        if pos >= end:
            return out
        try:
            value, nxt = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        out.append((value, Where(str(path), line_of(text, pos))))
        pos = nxt


def item_lines(text: str, key: str, start: Where) -> list[Where]:
    """Lines where the items of the top-level array ``key`` begin (best effort: the document's line)."""
    at = text.find(f'"{key}"')
    bracket = text.find("[", at) if at >= 0 else -1
    if bracket < 0:
        return []
    decoder = json.JSONDecoder()
    out: list[Where] = []
    pos = bracket + 1
    while pos < len(text):
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            _, nxt = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return out
        out.append(Where(start.path, line_of(text, pos)))
        pos = nxt
    return out


def obj(value: Any, where: Where, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.fail(f"{what} is not a JSON object")
    return value


def need(d: Mapping[str, Any], key: str, where: Where, what: str = "") -> Any:
    if key not in d or d[key] is None:
        raise where.missing(key, what)
    return d[key]


def number(d: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> float | None:
    """A finite number (or None when absent); ``inf``/``"inf"`` comes back as ``math.inf``."""
    value = d.get(key)
    if value is None or value == "":
        if required:
            raise where.missing(key)
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.fail(f"field '{key}' is not a number ({value!r})")
    if math.isnan(value):
        return None
    return float(value)


def integer(d: Mapping[str, Any], key: str, where: Where, *, required: bool = False) -> int | None:
    value = number(d, key, where, required=required)
    return None if value is None or math.isinf(value) else round(value)


def dig(d: Mapping[str, Any], *keys: str) -> Any:
    """``d[k1][k2]...``, None where any step is missing or not an object."""
    cur: Any = d
    for k in keys:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(k)
    return cur


def number_list(d: Mapping[str, Any], key: str, where: Where) -> list[float] | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise where.fail(f"field '{key}' is not a list")
    out: list[float] = []
    for i, v in enumerate(value):
        if v is None:
            v = 0.0
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise where.fail(f"field '{key}' entry {i} is not a number ({v!r})")
        out.append(float(v))
    return out


TIME_UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1000.0, "sec": 1000.0, "second": 1000.0,
                 "seconds": 1000.0, "min": 60_000.0}


def to_ms(value: float, unit: str | None, where: Where, key: str) -> float:
    factor = TIME_UNITS_MS.get((unit or "ms").strip().lower())
    if factor is None:
        raise where.fail(f"field '{key}' has an unknown time unit {unit!r}")
    return value * factor


def latency(mean: float | None = None, p50: float | None = None, p90: float | None = None,
            p99: float | None = None, max_: float | None = None, count: int = 0) -> Latency | None:
    """A latency summary (ms), or None when the source gave none of its statistics."""
    if all(v is None for v in (mean, p50, p90, p99, max_)):
        return None
    return Latency(mean=mean, p50=p50, p90=p90, p99=p99, max=max_, count=count)


def error_class(message: str | None, status: int | None = None) -> str:
    """The failure class (``ErrorClass``) of a source's error text and HTTP status, best effort."""
    text = (message or "").strip().lower()
    if status is None and text[:3].isdigit():
        status = int(text[:3])
    if status == 429 or "too many requests" in text or "rate limit" in text:
        return ErrorClass.HTTP_429
    if status == 499 or "cancel" in text:
        return ErrorClass.CANCELLED
    if status is not None and 500 <= status < 600:
        return ErrorClass.HTTP_5XX
    if status is not None and 400 <= status < 500:
        return ErrorClass.HTTP_4XX
    if "timeout" in text or "timed out" in text:
        return ErrorClass.TIMEOUT
    if any(s in text for s in ("connect", "refused", "reset by peer")):
        return ErrorClass.CONNECT
    if any(s in text for s in ("internal server error", "service unavailable", "bad gateway")):
        return ErrorClass.HTTP_5XX
    return ErrorClass.PROTOCOL


def unique_label(label: str, taken: set[str]) -> str:
    out, n = label, 2
    while out in taken:
        out, n = f"{label} #{n}", n + 1
    taken.add(out)
    return out


def level_label(mode: str, concurrency: int | None, rate: float | None) -> str:
    if mode == "rate" and rate is not None and not math.isinf(rate):
        return f"rate={rate:g}"
    return f"C={concurrency}" if concurrency else "level"


def spread_tokens(total: int, chunks: int) -> list[int]:
    """``total`` tokens over ``chunks`` chunks as evenly as possible (the first ones take the rest)."""
    if chunks <= 0:
        return []
    base, extra = divmod(max(total, 0), chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]


def ns(seconds: float) -> int:
    return round(seconds * 1e9)


# -- levels from records -----------------------------------------------------------------------
def records_level(records: Sequence[RequestRecord], *, label: str, mode: str, concurrency: int | None,
                  rate: float | None, source: str, notes: Iterable[str] = (), window: Window | None = None,
                  missing: Iterable[str] = (), send_lag: bool = False) -> ImportedLevel:
    """A level recomputed from its request records (``analysis.metrics.compute_level``).

    ``send_lag``: the source recorded when each request was due as well as sent; without it the records
    carry ``scheduled == sent`` and the level's send lag is left empty rather than a measured zero.
    """
    if not records:
        raise ConfigError(f"{source}: no requests to import")
    check_records(records, source, concurrency)
    level = compute_level(records, label=label, mode=mode, concurrency=concurrency,
                          rate=None if rate is None or math.isinf(rate) else rate, window=window)
    level.notes = [f"{SOURCE_PREFIX}{source} (per-request records: metrics recomputed)", *notes]
    gone = {*missing, "connect time"}
    if not send_lag:
        level.send_lag_ms = Latency()
        gone.add("send lag")
    level.notes.append(MISSING_PREFIX + ", ".join(sorted(gone)))
    return ImportedLevel(level, list(records))


def cross_check(level: LevelResult, reported: float | None, what: str = "output tok/s") -> str | None:
    """A note when the source's own figure differs from the recomputed one by more than 2 %."""
    if reported is None or reported <= 0 or level.output_throughput <= 0:
        return None
    if abs(level.output_throughput / reported - 1) <= 0.02:
        return None
    return (f"the source reported {reported:,.1f} {what}; recomputed over [first send, last end]: "
            f"{level.output_throughput:,.1f}")


# -- levels from summaries -----------------------------------------------------------------------
@dataclass
class Summary:
    """The level figures a source states (None = not stated). Latencies in ms, times in s."""

    label: str
    mode: str
    concurrency: int | None = None
    rate: float | None = None
    num_requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    errors: dict[str, int] = field(default_factory=dict)
    duration_s: float | None = None
    wall_s: float | None = None
    output_tokens: float | None = None
    input_tokens: float | None = None
    output_throughput: float | None = None
    input_throughput: float | None = None
    total_throughput: float | None = None
    peak_output_throughput: float | None = None
    request_throughput: float | None = None
    achieved_concurrency: float | None = None
    decoding_concurrency: float | None = None
    peak_in_flight: int | None = None
    peak_decoding: int | None = None    # only when the source itself states it
    ttft: Latency | None = None
    tpot: Latency | None = None
    itl: Latency | None = None
    e2e: Latency | None = None
    output_len: float | None = None     # mean output tokens per request, when the source or user says
    input_len: float | None = None
    notes: list[str] = field(default_factory=list)


def _counts(s: Summary) -> None:
    if s.num_requests is None and s.completed is not None:
        s.num_requests = s.completed + (s.failed or 0)
        if s.failed is None:
            s.notes.append("failures not reported: the completed requests are counted as all that were sent")
    if s.completed is None and s.num_requests is not None:
        s.completed = s.num_requests - (s.failed or 0)
        if s.failed is None:
            s.notes.append(f"failures not reported: all {s.num_requests} requests counted as completed")
    if s.failed is None and s.num_requests is not None and s.completed is not None:
        s.failed = max(0, s.num_requests - s.completed)
    if s.failed and not s.errors:
        s.errors = {"unclassified": s.failed}


def _tokens(s: Summary) -> None:
    d = s.duration_s
    if s.output_tokens is None and s.output_len is not None and s.completed:
        s.output_tokens = s.output_len * s.completed
        s.notes.append(f"output tokens: {s.completed} requests x {s.output_len:g} tokens")
    if d is None and s.output_tokens and s.output_throughput:
        s.duration_s = d = s.output_tokens / s.output_throughput
        s.notes.append(f"duration derived: {s.output_tokens:,.0f} output tokens / {s.output_throughput:,.1f} tok/s "
                       f"= {d:.1f} s")
    if d is None and s.completed and s.request_throughput:
        s.duration_s = d = s.completed / s.request_throughput
        s.notes.append(f"duration derived: {s.completed} requests / {s.request_throughput:.2f} req/s = {d:.1f} s")
    if d is None or d <= 0:
        return
    if s.output_throughput is None and s.output_tokens is not None:
        s.output_throughput = s.output_tokens / d
    if s.output_tokens is None and s.output_throughput is not None:
        s.output_tokens = s.output_throughput * d
    if s.input_tokens is None and s.input_len is not None and s.completed:
        s.input_tokens = s.input_len * s.completed
    if s.input_tokens is None and s.input_throughput is not None:
        s.input_tokens = s.input_throughput * d
    if s.input_tokens is None and s.total_throughput is not None and s.output_throughput is not None:
        s.input_tokens = max(0.0, s.total_throughput - s.output_throughput) * d
    if s.total_throughput is None and s.output_throughput is not None and s.input_tokens is not None:
        s.total_throughput = s.output_throughput + s.input_tokens / d
    if s.request_throughput is None and s.completed:
        s.request_throughput = s.completed / d


def _littles_law(s: Summary) -> None:
    e2e = s.e2e.mean if s.e2e else None
    ttft = s.ttft.mean if s.ttft else None
    d = s.duration_s
    if s.achieved_concurrency is None and e2e is not None and s.completed and d:
        s.achieved_concurrency = s.completed * e2e / 1000 / d
        s.notes.append(f"achieved concurrency by Little's law: {s.completed} requests x mean E2E {e2e / 1000:.2f} s / "
                       f"{d:.1f} s = {s.achieved_concurrency:,.1f}")
    elif s.achieved_concurrency is None and e2e is not None and s.request_throughput:
        s.achieved_concurrency = s.request_throughput * e2e / 1000
        s.notes.append(f"achieved concurrency by Little's law: {s.request_throughput:.2f} req/s x mean E2E "
                       f"{e2e / 1000:.2f} s = {s.achieved_concurrency:,.1f}")
    if s.decoding_concurrency is None and e2e is not None and ttft is not None and s.completed and d:
        s.decoding_concurrency = s.completed * max(0.0, e2e - ttft) / 1000 / d
        s.notes.append("decoding concurrency by Little's law: completed x (mean E2E - mean TTFT) / duration")


_MISSING_FIELDS = (("output_throughput", "output tok/s"), ("total_throughput", "total tok/s"),
                   ("peak_output_throughput", "peak output tok/s"), ("achieved_concurrency", "achieved concurrency"),
                   ("decoding_concurrency", "decoding concurrency"), ("peak_in_flight", "peak in flight"),
                   ("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"),
                   ("wall_s", "wall time"))


def summary_level(s: Summary, source: str) -> ImportedLevel:
    """A level from the figures a source states, plus what follows from them (module docstring)."""
    check_summary(s, source)
    _counts(s)
    if s.duration_s is None and s.wall_s is not None:
        s.duration_s = s.wall_s
    _tokens(s)
    if s.mode == "burst" and s.wall_s is None and s.duration_s is not None:
        s.wall_s = s.duration_s
    _littles_law(s)
    check_summary(s, source)   # what follows from the figures too (a duration of 5e-324 s: infinite tok/s)
    missing = [name for key, name in _MISSING_FIELDS if getattr(s, key) is None]
    if s.peak_decoding is None:
        missing.append("peak decoding (needs per-request times)")
    completed = s.completed or 0
    window = s.duration_s or 0.0

    def lat(v: Latency | None) -> Latency:
        return msgspec.structs.replace(v, count=v.count or completed) if v else Latency()

    level = LevelResult(
        label=s.label, mode=s.mode, concurrency=s.concurrency,
        rate=None if s.rate is None or math.isinf(s.rate) else s.rate,
        num_requests=s.num_requests or 0, completed=completed, failed=s.failed or 0, errors=dict(s.errors),
        dominant_error=max(s.errors, key=lambda k: s.errors[k]) if s.errors else None,
        level_failed=bool(s.num_requests) and (s.failed or 0) / (s.num_requests or 1) >= 0.5,
        duration_s=window, wall_s=s.wall_s or 0.0, window_end_s=window,
        window_note="whole level (as the source measured it)",
        output_tokens=round(s.output_tokens or 0), input_tokens=round(s.input_tokens or 0),
        output_throughput=s.output_throughput or 0.0, total_throughput=s.total_throughput or 0.0,
        peak_output_throughput=s.peak_output_throughput or 0.0, request_throughput=s.request_throughput or 0.0,
        achieved_concurrency=s.achieved_concurrency or 0.0, decoding_concurrency=s.decoding_concurrency or 0.0,
        peak_in_flight=s.peak_in_flight or 0, peak_decoding=s.peak_decoding or 0, ttft_ms=lat(s.ttft),
        tpot_ms=lat(s.tpot), itl_ms=lat(s.itl), e2e_ms=lat(s.e2e), token_source=TOKEN_SOURCE_IMPORTED,
        notes=[f"{SOURCE_PREFIX}{source} (level summary only)", MISSING_PREFIX + ", ".join(missing), *s.notes],
    )
    return ImportedLevel(level)
