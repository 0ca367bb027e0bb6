"""Repeats (``--repeat``): the between-run intervals of each level, as a terminal table and as HTML.

One row per level that has repeats: how many stood, and for each figure the mean over the repeats and
the half-width of its 95 % interval (``analysis.repeats``). Nothing is recomputed here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from rich import box
from rich.table import Table

from plateau_bench.result import Interval, LevelResult, RepeatStats

# (heading, field of RepeatStats, unit)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("out tok/s", "output_throughput", ""),
    ("TTFT p50", "ttft_p50_ms", "ms"), ("TTFT p99", "ttft_p99_ms", "ms"),
    ("TPOT p50", "tpot_p50_ms", "ms"), ("TPOT p99", "tpot_p99_ms", "ms"),
    ("ITL p50", "itl_p50_ms", "ms"), ("ITL p99", "itl_p99_ms", "ms"),
    ("E2E p50", "e2e_p50_ms", "ms"), ("E2E p99", "e2e_p99_ms", "ms"),
)


def _num(v: float) -> str:
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _half(v: float) -> str:
    """The half-width to about two significant digits: small spreads stay visible (±0.004, not ±0.00)."""
    return _num(v) if v >= 10 or v == 0 else f"{v:.2g}"


def interval_text(iv: Interval | None, unit: str = "") -> str:
    """``1,234 ±12`` (mean and half-width of the interval); ``1,234`` with one repeat; ``-`` without."""
    if iv is None:
        return "-"
    if iv.low is None or iv.high is None:
        return _num(iv.mean) + unit
    return f"{_num(iv.mean)}{unit} ±{_half((iv.high - iv.low) / 2)}"


def with_repeats(levels: Sequence[LevelResult]) -> list[LevelResult]:
    ordered = sorted(levels, key=lambda lv: (lv.concurrency or 0, lv.rate or 0.0))
    return [lv for lv in ordered if lv.repeat_stats is not None]


def _key(level: LevelResult) -> str:
    return f"C={level.concurrency}" if level.concurrency is not None else level.label


def _counted(level: LevelResult, stats: RepeatStats) -> str:
    return f"{stats.n}/{len(level.repeats)}"


def repeat_table(levels: Sequence[LevelResult]) -> Table:
    """Mean ± 95 % half-width over each level's repeats (``n``: repeats counted / measured)."""
    table = Table(title="between-run 95 % intervals (mean ± half-width over the repeats; a failed repeat "
                        "is not counted)", title_justify="left", header_style="bold", pad_edge=False,
                  box=box.SIMPLE_HEAD)
    for name in ("level", "n", *(c[0] for c in COLUMNS)):
        table.add_column(name, justify="right", no_wrap=True)
    for lv in with_repeats(levels):
        stats = lv.repeat_stats
        assert stats is not None
        table.add_row(_key(lv), _counted(lv, stats),
                      *(interval_text(getattr(stats, name), unit) for _, name, unit in COLUMNS))
    return table


def repeat_table_html(levels: Sequence[LevelResult]) -> str:
    """The same table for the HTML report (empty when no level has repeats)."""
    rows = with_repeats(levels)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("level", "n", *(c[0] for c in COLUMNS)))
    body = []
    for lv in rows:
        stats = lv.repeat_stats
        assert stats is not None
        cells = [_key(lv), _counted(lv, stats), *(interval_text(getattr(stats, name), unit)
                                                   for _, name, unit in COLUMNS)]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ('<h3>Between-run 95 % intervals</h3><p class="sub">Mean ± half-width of the Student-t interval '
            'over each level\'s repeats (n: repeats counted / measured; a failed repeat is not counted).</p>'
            f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            '</table></div>')
