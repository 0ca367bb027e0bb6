"""AIPerf's CSV exports, each the twin of a JSON export (in a directory the JSON is read and these skipped).

* ``profile_export_aiperf.csv`` (one run): sections separated by a blank line. ``Metric,avg,min,max,sum,
  p1,...,p99,std`` rows are distributions (``Request Latency (ms),319.32,...``); ``Metric,Value`` rows are
  single figures (``Benchmark Duration (sec),1.08``, ``Request Count,24.00``, ``Error Request Count,7.00``,
  ``Total Output Tokens (tokens),7632.00``); other sections (GPU telemetry) are not read. A header is its
  metric's name with the unit in the last parentheses; the tag is the name in snake case
  (``Time to First Token (ms)`` -> ``time_to_first_token``). It does not record the load: that comes from
  ``--concurrency``, the JSON export of the same name or ``run_config.json`` next to it.
* ``profile_export_aiperf_aggregate.csv`` (several runs): ``metric,mean,std,min,max,cv,se,ci_low,ci_high,
  t_critical,unit``, one row per ``<tag>_<stat>``; the load comes from ``--concurrency`` or its JSON twin.
* ``profile_export_aiperf_sweep.csv``: ``<parameter>,...,<tag>_mean,<tag>_std,<tag>_min,<tag>_max,<tag>_cv``,
  one row per combination (each figure the runs' mean of that run's average; latencies in ms, the
  duration in seconds, as AIPerf displays them), then titled sections (``Best Configurations``, ...).
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers import aiperf, aiperf_files
from plateau_bench.importers.aiperf import Load
from plateau_bench.importers.aiperf_files import STATS, csv_kind
from plateau_bench.importers.aiperf_runs import parameter_load, stat_blocks
from plateau_bench.importers.common import ImportedLevel, ImportOptions, Where

# Tags whose header is not their name in snake case.
ALIASES = {"total_input_sequence_length": "total_isl", "total_output_sequence_length": "total_osl"}


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def _tag(header: str) -> tuple[str, str | None]:
    """``Time to First Token (ms)`` -> (``time_to_first_token``, ``ms``)."""
    m = re.fullmatch(r"(.*?)\s*\(([^()]*)\)\s*", header)
    name, unit = (m.group(1), m.group(2)) if m else (header, None)
    tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return ALIASES.get(tag, tag), unit


def _profile_blocks(rows: list[list[str]]) -> dict[str, Any]:
    blocks: dict[str, Any] = {}
    columns: list[str] | None = None
    for row in rows:
        if not any(c.strip() for c in row):
            columns = None
        elif row[0] == "Metric":
            columns = ["avg" if c == "Value" else c for c in row]
        elif columns is not None:
            tag, unit = _tag(row[0])
            block = {col: v for col, cell in zip(columns[1:], row[1:], strict=False)
                     if (v := _number(cell)) is not None}
            blocks.setdefault(tag, {"unit": unit, **block})
    return blocks


def _confidence_metrics(rows: list[list[str]]) -> dict[str, Any]:
    header = rows[0]
    out: dict[str, Any] = {}
    for row in rows[1:]:
        cells = dict(zip(header, row, strict=False))
        mean = _number(cells.get("mean", ""))
        if row and mean is not None:
            out[row[0]] = {"mean": mean, "unit": cells.get("unit") or None}
    return out


def _sweep_rows(rows: list[list[str]], opts: ImportOptions, where: Where) -> list[tuple[Load, dict[str, Any]]]:
    header = rows[0]
    params = [c for c in header if not c.endswith(tuple(f"_{s}" for s in STATS))]
    out = []
    for n, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            break
        cells = dict(zip(header, row, strict=False))
        values = {p: int(v) if v.is_integer() else v for p in params if (v := _number(cells.get(p, ""))) is not None}
        load = parameter_load(values, opts)
        if load is None:
            raise Where(where.path, n).fail(f"AIPerf sweep CSV: row sets no concurrency or request rate ({params})")
        blocks: dict[str, Any] = {c[:-5]: {"unit": None, "avg": v} for c in header if c.endswith("_mean")
                                  and (v := _number(cells.get(c, ""))) is not None}
        for tag, block in blocks.items():
            peak = _number(cells.get(f"{tag}_max", ""))
            if peak is not None:
                block["max"] = peak
        out.append((load, blocks))
    return out


def _twin(path: Path) -> dict[str, Any] | None:
    """The JSON export of the same name next to a CSV export."""
    twin = path.with_suffix(".json")
    try:
        doc = json.loads(twin.read_text(encoding="utf-8")) if twin.is_file() else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _profile_load(path: Path, opts: ImportOptions) -> Load | None:
    config = aiperf.part(_twin(path), "input_config")
    return aiperf.config_load(config, opts) or aiperf.config_load(aiperf_files.run_config(path.parent), opts)


def load(path: Path, text: str, opts: ImportOptions) -> list[ImportedLevel] | None:
    """The levels of an AIPerf CSV export (None: not one); a one-line error for AIPerf's other text files."""
    what = csv_kind(text)
    where = Where(str(path))
    if what is None:
        companion = aiperf_files.companion(path)
        if companion and companion != aiperf_files.INPUTS:
            raise ConfigError(f"{path}: {companion}: no results to import here; import profile_export_aiperf.json "
                              "and profile_export.jsonl, or the run's directory")
        return None
    aiperf_files.warmup_phase(path, f"AIPerf {what} CSV")
    rows = list(csv.reader(io.StringIO(text)))
    rows = rows[next(i for i, r in enumerate(rows) if any(c.strip() for c in r)):]
    if what == "sweep":
        return [aiperf.blocks_summary(blocks, ld, where, f"{path} (row {i})")
                for i, (ld, blocks) in enumerate(_sweep_rows(rows, opts, where), 1)]
    if what == "confidence":
        meta = aiperf.part(_twin(path), "metadata")
        ld = parameter_load(meta.get("variation_values") or {}, opts)
        blocks = stat_blocks(_confidence_metrics(rows))
        label = "AIPerf confidence aggregate CSV"
    else:
        ld, blocks, label = _profile_load(path, opts), _profile_blocks(rows), "AIPerf profile export CSV"
    if ld is None:
        raise where.fail(f"{label}: missing the load (the CSV does not record the concurrency): pass "
                         "--concurrency, or import the JSON export of the same name")
    return [aiperf.blocks_summary(blocks, ld, where, str(path))]
