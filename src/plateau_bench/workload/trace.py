"""Timestamped request traces (``--trace FILE``): when each request came and how long it was.

Formats, recognised from the file's first line:

* **Azure LLM inference trace** (CSV): header ``TIMESTAMP,ContextTokens,GeneratedTokens``, times as
  ``2023-11-16 18:15:46.6805900`` (fractions beyond microseconds are dropped).
* **Mooncake** (JSONL): ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``;
  each hash id names one 512-token block of the prompt, so requests with equal ids share those blocks.
* **plain** (ours), JSONL ``{"time_s": 0.25, "input_len": 512, "output_len": 128}`` with optional
  ``"hash_ids"`` (as Mooncake's, 512-token blocks), or CSV with the header ``time_s,input_len,output_len``.

Times become offsets from the earliest request (rows are sorted by time). ``--time-scale S``
replays S times faster: offsets are divided by S. A bad row is an error naming the file and line.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.spec import MAX_REQUEST_TOKENS
from plateau_bench.units import NS

HASH_BLOCK_TOKENS = 512   # Mooncake's block size: one hash id per 512 prompt tokens
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PLAIN_COLUMNS = ("time_s", "input_len", "output_len")


@dataclass(frozen=True, slots=True)
class TraceRow:
    offset_ns: int
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    rows: list[TraceRow]
    format: str          # "azure" | "mooncake" | "plain"

    @property
    def span_s(self) -> float:
        return self.rows[-1].offset_ns / NS if self.rows else 0.0

    def rate(self, time_scale: float = 1.0) -> float:
        """Mean requests/s when replayed at ``time_scale``."""
        span = self.span_s / time_scale
        return len(self.rows) / span if span > 0 else float(len(self.rows))

    def offsets_ns(self, time_scale: float = 1.0) -> list[int]:
        return [round(r.offset_ns / time_scale) for r in self.rows]


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Read a trace (the first ``limit`` requests in time order when given). Raises ConfigError."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ConfigError(f"--trace {p}: cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--trace {p}: not UTF-8 text") from None
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        raise ConfigError(f"--trace {p}: the file is empty")
    if first.startswith("{"):
        fmt, raw = _jsonl(p, text)
    else:
        fmt, raw = _csv(p, text)
    if not raw:
        raise ConfigError(f"--trace {p}: no requests in the file")
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0]
    rows = [TraceRow(t - t0, i, o, h) for t, i, o, h in raw]
    return Trace(rows[:limit] if limit is not None else rows, fmt)


_Raw = tuple[int, int, int, tuple[int, ...]]   # (time in ns, input, output, hash ids)


def _positive(p: Path, lineno: int, value: Any, name: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--trace {p}:{lineno}: {name} must be a positive integer (got {value!r})")
    if value > MAX_REQUEST_TOKENS:
        raise ConfigError(f"--trace {p}:{lineno}: {name} {value:,} is more tokens than any model serves in one "
                          f"request (at most {MAX_REQUEST_TOKENS:,})")
    return value


def _seconds(p: Path, lineno: int, value: Any, name: str) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--trace {p}:{lineno}: {name} must be a number (got {value!r})") from None
    if not math.isfinite(t):
        raise ConfigError(f"--trace {p}:{lineno}: {name} must be finite (got {value!r})")
    return t


def _hash_ids(p: Path, lineno: int, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise ConfigError(f"--trace {p}:{lineno}: hash_ids must be a list of integers")
    return tuple(value)


def _jsonl(p: Path, text: str) -> tuple[str, list[_Raw]]:
    rows: list[_Raw] = []
    fmt = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"--trace {p}:{lineno}: invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"--trace {p}:{lineno}: expected a JSON object per line")
        if not fmt:
            fmt = "mooncake" if "input_length" in obj else "plain"
        if fmt == "mooncake":
            t = round(_seconds(p, lineno, obj.get("timestamp"), "timestamp") * (NS // 1000))
            keys = ("input_length", "output_length")
        else:
            t = round(_seconds(p, lineno, obj.get("time_s"), "time_s") * NS)
            keys = ("input_len", "output_len")
        rows.append((t, _positive(p, lineno, obj.get(keys[0]), keys[0]),
                     _positive(p, lineno, obj.get(keys[1]), keys[1]), _hash_ids(p, lineno, obj.get("hash_ids"))))
    return fmt, rows


def _csv(p: Path, text: str) -> tuple[str, list[_Raw]]:
    reader = csv.reader(io.StringIO(text))
    header = tuple(h.strip() for h in next(reader, []))
    if header[:3] == AZURE_COLUMNS:
        fmt = "azure"
    elif header[:3] == PLAIN_COLUMNS:
        fmt = "plain"
    else:
        raise ConfigError(f"--trace {p}: unknown format: a CSV needs the header {','.join(AZURE_COLUMNS)} (Azure) "
                          f"or {','.join(PLAIN_COLUMNS)}; JSONL needs Mooncake's or the plain fields")
    rows: list[_Raw] = []
    for lineno, cells in enumerate(reader, start=2):
        if not cells or not any(c.strip() for c in cells):
            continue
        if len(cells) < 3:
            raise ConfigError(f"--trace {p}:{lineno}: expected 3 columns")
        t = (_azure_time_ns(p, lineno, cells[0]) if fmt == "azure"
             else round(_seconds(p, lineno, cells[0], "time_s") * NS))
        rows.append((t, _positive(p, lineno, cells[1].strip(), header[1]),
                     _positive(p, lineno, cells[2].strip(), header[2]), ()))
    return fmt, rows


def _azure_time_ns(p: Path, lineno: int, cell: str) -> int:
    text = cell.strip()
    head, dot, fraction = text.partition(".")
    try:
        when = _dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.UTC)
    except ValueError:
        raise ConfigError(f"--trace {p}:{lineno}: TIMESTAMP {text!r} is not YYYY-MM-DD HH:MM:SS[.fraction]") from None
    if dot and not fraction.isdigit():
        raise ConfigError(f"--trace {p}:{lineno}: TIMESTAMP {text!r} has a bad fraction of a second")
    micros = int(fraction[:6].ljust(6, "0")) if dot else 0
    return int(when.timestamp()) * NS + micros * 1000
