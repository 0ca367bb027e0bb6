"""GuideLLM's ``benchmarks.csv``: one row per benchmark, level summaries only (no per-request times).

Two layouts, both read:

* v0.4 on: three header rows (group, name, statistic or unit), e.g. ``Benchmark | Strategy |``,
  ``Timings | Duration | Sec``, ``Request Counts | Successful |``, ``Request Latency | Successful Sec |
  Mean``; a distribution has ``Mean``, ``Median``, ``Std Dev`` and ``Percentiles`` (the list ``[min, p0.1,
  p1, p5, p10, p25, p75, p90, p95, p99, max]``), and a status whose values sum to zero has no columns;
  ``Runtime Info | Metadata`` (v0.7 on) holds ``{"version": 2, "guidellm_version": ...}``;
* v0.1-v0.3: one header row, ``Name`` (the strategy), ``Duration``, ``Successful Requests``, and
  ``Successful <metric> mean|median|std dev|[min, 0.1, ..., max]`` per metric (``Request latency``,
  ``Time to first token ms``, ``Requests per second``, ``Request concurrency``, ...).

Each column is named by its header cells joined and lower-cased, the older names mapped to the newer ones
(``_OLD``), so one reader serves both. The strategy cell is GuideLLM's display string: ``synchronous``,
``concurrent@8``, ``throughput@512`` (or ``@unlimited``), ``constant@12.75``, ``poisson@2.00``,
``trace@1.00`` (a time scale, not a rate). Figures: as the JSON report's summaries (``guidellm``).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    latency,
    level_label,
    summary_level,
)
from plateau_bench.result import Latency

NAME = "guidellm"
STATS = ("mean", "median", "percentiles")
PERCENTILE_INDEX = {"p90": 7, "p99": 9, "max": 10}   # in [min, 0.1, 1, 5, 10, 25, 75, 90, 95, 99, max]
# v0.1-v0.3 column names (lower-cased, the statistic cut off) and the v0.4-on names they became.
_OLD = {
    "name": "benchmark strategy", "duration": "timings duration sec",
    "successful requests": "request counts successful", "errored requests": "request counts errored",
    "incomplete requests": "request counts incomplete",
    "successful request latency": "request latency successful sec",
    "successful time to first token ms": "time to first token successful ms",
    "successful inter token latency ms": "inter token latency successful ms",
    "successful requests per second": "server throughput successful requests/sec",
    "successful request concurrency": "server throughput successful concurrency",
    "successful output tokens per second": "token throughput successful output tokens/sec",
    "successful tokens per second": "token throughput successful total tokens/sec",
    "successful prompt token count": "token metrics successful input tokens",
    "successful output token count": "token metrics successful output tokens",
}
_STRATEGY = re.compile(r"(synchronous|concurrent|throughput|constant|poisson|trace)(?:@(\S+))?")


def looks_like(text: str) -> bool:
    """A GuideLLM CSV: its first header row names GuideLLM's own column groups (v0.4 on) or columns (v0.1-v0.3),
    quoted or not."""
    first = next(csv.reader(io.StringIO(text[:20000].partition("\n")[0])), [])
    cells = {c.strip().lower() for c in first}
    return {"run info", "benchmark", "request counts"} <= cells or {"type", "name", "successful requests"} <= cells


def _header_depth(rows: list[list[str]]) -> int:
    """How many header rows: three from v0.4 on (the first row holds group names that span columns)."""
    first = [c.strip().lower() for c in rows[0]]
    return 3 if "run info" in first or "benchmark" in first else 1


def _column_names(rows: list[list[str]], depth: int) -> list[str]:
    names = []
    for i in range(max(len(r) for r in rows[:depth])):
        cells = [rows[d][i].strip().lower() if i < len(rows[d]) else "" for d in range(depth)]
        name = re.sub(r"\s+", " ", " ".join(c for c in cells if c))
        if depth == 1:
            name = re.sub(r" \[min, .*\]$", " percentiles", name)
            base, _, stat = name.rpartition(" ")
            if base.endswith(" std"):
                base, stat = base[:-4], "std dev"
            if stat in STATS and base in _OLD:
                name = f"{_OLD[base]} {stat}"
            elif name in _OLD:
                name = _OLD[name]
        names.append(name)
    return names


class _Row:
    """One benchmark's cells by column name."""

    def __init__(self, names: list[str], cells: list[str], where: Where) -> None:
        self.cells = {n: c.strip() for n, c in zip(names, cells, strict=False) if n}
        self.where = where

    def text(self, name: str) -> str | None:
        return self.cells.get(name) or None

    def number(self, name: str) -> float | None:
        cell = self.text(name)
        if cell is None:
            return None
        try:
            return float(cell)
        except ValueError:
            raise self.where.fail(f"column '{name}' is not a number ({cell[:40]!r})") from None

    def percentiles(self, name: str) -> list[float] | None:
        cell = self.text(name)
        if cell is None:
            return None
        try:
            values = json.loads(cell)
        except json.JSONDecodeError:
            raise self.where.fail(f"column '{name}' is not a list of numbers") from None
        if not isinstance(values, list) or len(values) != 11 or \
                not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise self.where.fail(f"column '{name}' is not GuideLLM's list of 11 percentiles")
        return [float(v) for v in values]

    def latency(self, metric: str, scale: float = 1.0) -> Latency | None:
        mean, median = self.number(f"{metric} mean"), self.number(f"{metric} median")
        pct = self.percentiles(f"{metric} percentiles")

        def at(key: str) -> float | None:
            return pct[PERCENTILE_INDEX[key]] * scale if pct else None
        return latency(None if mean is None else mean * scale, None if median is None else median * scale,
                       at("p90"), at("p99"), at("max"))


def _shape(row: _Row) -> tuple[str, int | None, float | None, str]:
    cell = row.text("benchmark strategy")
    if cell is None:
        raise row.where.missing("Benchmark/Strategy", "or Name in older files: the strategy, e.g. concurrent@8")
    found = _STRATEGY.fullmatch(cell)
    if found is None:
        raise row.where.fail(f"strategy {cell!r} is not one GuideLLM writes (e.g. synchronous, concurrent@8, "
                             "constant@2.00)")
    kind, arg = found.groups()
    try:
        value = float(arg) if arg not in (None, "unlimited") else None
    except ValueError:
        raise row.where.fail(f"strategy {cell!r}: {arg!r} is not a number") from None
    if kind == "synchronous":
        return "steady", 1, None, kind
    if kind in ("concurrent", "throughput"):
        return "steady", None if value is None else round(value), None, kind
    return "rate", None, value if kind != "trace" else None, kind


def row_summary(row: _Row) -> Summary:
    mode, concurrency, rate, kind = _shape(row)
    label = level_label(mode, concurrency, rate)
    s = Summary(kind if label == "level" else label, mode, concurrency=concurrency, rate=rate,
                completed=_count(row, "request counts successful"), failed=_count(row, "request counts errored"),
                duration_s=row.number("timings duration sec"))
    if s.completed is None:
        raise row.where.missing("Request Counts/Successful", "or Successful Requests in older files")
    if s.duration_s is None:
        raise row.where.missing("Timings/Duration", "or Duration in older files")
    s.failed = s.failed or 0
    s.output_throughput = row.number("token throughput successful output tokens/sec mean")
    s.total_throughput = row.number("token throughput successful total tokens/sec mean")
    s.request_throughput = row.number("server throughput successful requests/sec mean")
    s.achieved_concurrency = row.number("server throughput successful concurrency mean")
    s.output_len = row.number("token metrics successful output tokens mean")
    s.input_len = row.number("token metrics successful input tokens mean")
    s.e2e = row.latency("request latency successful sec", 1000.0)
    s.ttft = row.latency("time to first token successful ms")
    s.tpot = row.latency("inter token latency successful ms")
    incomplete = _count(row, "request counts incomplete")
    if incomplete:
        s.notes.append(f"{incomplete} request(s) still in flight when GuideLLM's window closed: not counted")
    s.notes.append("TPOT: GuideLLM's inter-token latency ((last - first token) / (tokens - 1)); achieved "
                   "concurrency and throughputs are the means of GuideLLM's time series; tokens: the mean per "
                   "request x the successful requests")
    return s


def _count(row: _Row, name: str) -> int | None:
    value = row.number(name)
    return None if value is None else round(value)


def describe(names: list[str], first: list[str], depth: int) -> str:
    """Which GuideLLM wrote the CSV, as error messages name it."""
    cell = dict(zip(names, first, strict=False)).get("runtime info metadata") or ""
    version = re.search(r'"guidellm_version"\s*:\s*"([^"]+)"', cell)
    if version:
        return f"GuideLLM {version.group(1)}'s benchmarks.csv"
    return "GuideLLM v0.4-v0.6's benchmarks.csv (no version stated)" if depth == 3 else \
        "GuideLLM v0.1-v0.3's benchmarks.csv (no version stated)"


def _facts(names: list[str], first: list[str]) -> dict[str, Any]:
    """Model and fixed lengths from the run's own description (backend and data columns)."""
    cells = dict(zip(names, first, strict=False))
    meta: dict[str, Any] = {}
    backend = cells.get("run info backend") or cells.get("worker") or ""
    model = re.search(r'"(?:model|backend_model)"\s*:\s*"([^"]+)"', backend)
    if model:
        meta["model"] = model.group(1)
    described = " ".join(cells.get(k) or "" for k in ("runtime info arguments", "request loader", "run info requests"))
    for key, name in (("input_len", "prompt_tokens"), ("output_len", "output_tokens")):
        found = re.search(rf'"{name}"\s*:\s*(\d+)', described)
        if found:
            meta[key] = int(found.group(1))
    return meta


def load(path: Path, text: str, opts: ImportOptions) -> tuple[list[ImportedLevel], dict[str, Any]]:
    reader = csv.reader(io.StringIO(text))
    rows = [(cells, reader.line_num) for cells in reader]
    rows = [(cells, n) for cells, n in rows if any(c.strip() for c in cells)]
    depth = _header_depth([cells for cells, _ in rows[:1]] or [[]])
    if len(rows) <= depth:
        raise Where(str(path), 1).fail("GuideLLM's benchmarks.csv with a header but no benchmark rows")
    names = _column_names([cells for cells, _ in rows[:depth]], depth)
    levels = []
    for cells, n in rows[depth:]:
        where = Where(str(path), n)
        try:
            levels.append(summary_level(row_summary(_Row(names, cells, where)), f"{NAME}: {where}"))
        except ConfigError as exc:
            raise ConfigError(f"{exc}; the file looks like {describe(names, rows[depth][0], depth)}") from None
    return levels, _facts(names, rows[depth][0])
