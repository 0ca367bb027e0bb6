"""Plain results tables: CSV (``,``, ``;`` or tab) or a Markdown table, one row per load level.

Headers are matched by ``importers.headers``. Cells: ``-``, ``n/a``, ``(cut)`` or empty are not measured;
``~300`` is read as 300 and the notes say it was approximate; ``3,962.8`` is 3962.8; ``256/256`` in an
``ok`` column is completed/sent; a cell may carry its own unit (``33.1 s``, ``300 ms``).

Each row becomes a level summary (``common.summary_level``). What the row does not say comes from the
options: ``--mode`` (``burst``: num_requests = C, all sent at once; ``steady``), ``--input-len`` and
``--output-len`` (tokens per request, taken as every request's length). Without ``--mode`` a row is a
burst, as the classic benchmark tables are, and the notes say it was assumed.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from plateau_bench.importers.common import ImportedLevel, ImportOptions, Summary, Where, latency, summary_level
from plateau_bench.importers.headers import TIME_UNITS, Column, classify, seconds_per_unit
from plateau_bench.result import Latency

NAME = "table"
EMPTY = {"", "-", "--", "—", "–", "n/a", "na", "none", "null", "(cut)", "cut", "?", "nan"}
MODES = ("burst", "steady", "rate")


@dataclass(frozen=True)
class Cell:
    value: float
    approx: bool = False
    unit: str | None = None
    of: int | None = None     # "256/256": the total after the slash


def looks_like_markdown(text: str) -> bool:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return len(lines) >= 2 and any(ln.startswith("|") for ln in lines) and any(
        re.fullmatch(r"\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?", ln) for ln in lines)


def _markdown(text: str) -> tuple[list[str], list[tuple[list[str], int]], int]:
    rows: list[tuple[list[str], int]] = []
    header: list[str] | None = None
    header_line = 1
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("|"):
            if header is not None and rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        if header is None:
            header, header_line = cells, n
        elif all(re.fullmatch(r":?-{2,}:?", c) for c in cells if c):
            continue
        else:
            rows.append((cells, n))
    return header or [], rows, header_line


def _csv(text: str) -> tuple[list[str], list[tuple[list[str], int]], int]:
    lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not lines:
        return [], [], 1
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(lines[0][1], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    parsed = [(next(csv.reader(io.StringIO(ln), dialect)), n) for n, ln in lines]
    (header, header_line), rows = parsed[0], parsed[1:]
    return [h.strip() for h in header], [([c.strip() for c in cells], n) for cells, n in rows], header_line


def parse_cell(text: str, where: Where, header: str) -> Cell | None:
    t = text.strip().replace("**", "").strip()
    if t.lower() in EMPTY:
        return None
    approx = t[:1] in ("~", "≈")
    t = t.lstrip("~≈ ").replace("\u202f", "").replace("\u00a0", "")
    m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", t)
    if m:
        return Cell(float(m.group(1)), approx, None, int(m.group(2)))
    m = re.fullmatch(r"([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+)\s*([a-zµ/]+)?", t)
    if not m:
        raise where.fail(f"field '{header}' is not a number ({text.strip()!r})")
    return Cell(float(m.group(1).replace(",", "")), approx, m.group(2))


def _time_s(col: Column, cell: Cell, default: str, where: Where) -> float:
    factor = TIME_UNITS.get(cell.unit) if cell.unit else seconds_per_unit(col, default)
    if factor is None:
        raise where.fail(f"field '{col.header}' has an unknown time unit {cell.unit or col.unit!r}")
    return cell.value * factor


@dataclass
class _Row:
    cells: dict[str, Cell]
    lat: dict[str, dict[str, float]]
    label: str | None
    mode: str | None
    notes: list[str]


def _row(columns: list[Column], cells: list[str], where: Where) -> _Row:
    row = _Row({}, {}, None, None, [])
    for col in columns:
        text = cells[col.index] if col.index < len(cells) else ""
        if col.kind == "label":
            row.label = text.strip() or None
            continue
        if col.kind == "mode":
            row.mode = text.strip().lower() or None
            continue
        if col.kind in ("", "ignore", "unsupported"):
            continue
        cell = parse_cell(text, where, col.header)
        if cell is None:
            continue
        if cell.approx:
            row.notes.append(f"{col.header}: approximate in the table ({text.strip()})")
        if col.kind in ("ttft", "tpot", "itl", "e2e"):
            row.lat.setdefault(col.kind, {})[col.stat or "mean"] = _time_s(col, cell, "ms", where) * 1000
        elif col.kind == "wall":
            row.cells["wall"] = Cell(_time_s(col, cell, "s", where))
        else:
            row.cells[col.kind] = cell
    return row


def _latencies(row: _Row) -> dict[str, Latency | None]:
    return {k: latency(v.get("mean"), v.get("p50"), v.get("p90"), v.get("p99"), v.get("max"))
            for k, v in row.lat.items()}


def _mode(row: _Row, opts: ImportOptions, where: Where) -> tuple[str, list[str]]:
    if row.mode:
        if row.mode not in MODES:
            raise where.fail(f"field 'mode' is {row.mode!r}: use one of {', '.join(MODES)}")
        return row.mode, []
    if "rate" in row.cells:
        return "rate", []
    if opts.mode:
        return opts.mode, []
    return "burst", ["mode not in the table: a burst assumed (num_requests = C, all sent at once; --mode steady "
                     "says otherwise)"]


def _get(row: _Row, key: str) -> float | None:
    cell = row.cells.get(key)
    return cell.value if cell else None


def row_summary(row: _Row, where: Where, opts: ImportOptions) -> Summary:
    mode, notes = _mode(row, opts, where)
    c, prompts = _get(row, "concurrency"), _get(row, "num_prompts")
    concurrency = round(c) if c is not None else (round(prompts) if prompts is not None and mode != "rate" else None)
    rate = _get(row, "rate")
    if concurrency is None and rate is None:
        raise where.missing("concurrency", "a column C, concurrency, num_prompts or rate")
    ok = row.cells.get("ok")
    sent = ok.of if ok and ok.of is not None else (round(prompts) if prompts is not None else None)
    if sent is None and mode == "burst" and concurrency:
        sent = concurrency
        notes.append(f"burst: {concurrency} requests sent (num_requests = C)")
    s = Summary(row.label or (f"rate={rate:g}" if mode == "rate" and rate is not None else f"C={concurrency}"), mode,
                concurrency=concurrency, rate=rate, num_requests=sent, completed=round(ok.value) if ok else None,
                failed=round(f) if (f := _get(row, "failed")) is not None else None, wall_s=_get(row, "wall"),
                notes=[*notes, *row.notes])
    for key in ("output_throughput", "total_throughput", "input_throughput", "peak_output_throughput",
                "request_throughput", "achieved_concurrency", "decoding_concurrency", "output_tokens",
                "input_tokens"):
        setattr(s, key, _get(row, key))
    for key in ("peak_in_flight", "peak_decoding"):
        v = _get(row, key)
        setattr(s, key, round(v) if v is not None else None)
    lat = _latencies(row)
    s.ttft, s.tpot, s.itl, s.e2e = lat.get("ttft"), lat.get("tpot"), lat.get("itl"), lat.get("e2e")
    out_len = opts.output_len or _get(row, "output_len")
    in_len = opts.input_len or _get(row, "input_len")
    s.output_len = float(out_len) if out_len else None
    s.input_len = float(in_len) if in_len else None
    return s


def load(path: Path, text: str, opts: ImportOptions) -> tuple[list[ImportedLevel], list[str]]:
    """The table's levels, and warnings about columns it did not understand."""
    header, rows, header_line = _markdown(text) if looks_like_markdown(text) else _csv(text)
    head = Where(str(path), header_line)
    if not header:
        raise head.fail("no table found (a header row, then one row per level)")
    columns = [classify(i, h) for i, h in enumerate(header) if h.strip()]
    if not any(c.kind in ("concurrency", "num_prompts", "rate") for c in columns):
        raise head.missing("concurrency", "a column C, concurrency, num_prompts or rate")
    warnings = [f"{head}: column '{c.header}' not understood: ignored" for c in columns if c.kind == ""]
    warnings += [f"{head}: column '{c.header}': statistic not kept (mean, p50, p90, p99 and max are)"
                 for c in columns if c.kind == "unsupported"]
    defaulted = [c.header for c in columns if c.defaulted]
    unitless = [c.header for c in columns if c.kind in ("ttft", "tpot", "itl", "e2e", "wall") and c.unit is None]
    levels = []
    for cells, n in rows:
        if not any(cells):
            continue
        where = Where(str(path), n)
        s = row_summary(_row(columns, cells, where), where, opts)
        if defaulted:
            s.notes.append(f"no statistic in header(s) {', '.join(defaulted)}: read as the mean")
        if unitless:
            s.notes.append(f"no unit in header(s) {', '.join(unitless)}: ms for latencies, s for wall time")
        lv = summary_level(s, f"{NAME}: {where}")
        if lv.level.output_throughput <= 0:
            raise where.missing("output tok/s", "or output tokens (or --output-len) with a wall time")
        levels.append(lv)
    if not levels:
        raise head.fail("the table has a header but no rows")
    return levels, warnings
