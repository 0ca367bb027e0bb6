"""The HTML report's multi-turn section: per level and turn index, what each turn carried and waited.

Shown only for runs whose levels have per-turn figures (``--sessions``): the prompt grows with the
conversation's history, and TTFT grows with it unless the server's prefix cache reuses the history
(its hit rate per level, when the server stated one, is in the heading of each level's rows).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from plateau_bench.result import LevelResult
from plateau_bench.run_view import ReportRun

_esc = html.escape
_TEXT = ' class="t"'   # a left-aligned text column
_HEAD = ("level", "turn", "requests", "prompt tokens", "TTFT p50", "TTFT p99", "E2E p50")


def has_turns(runs: Sequence[ReportRun]) -> bool:
    return any(lv.turns for run in runs for lv in run.levels)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"


def _level_rows(lv: LevelResult) -> list[str]:
    rate = lv.telemetry.prefix_cache_hit_rate
    label = _esc(lv.label) + (f" (prefix cache hits {rate:.0%})" if rate is not None else "")
    rows = []
    for t in lv.turns:
        cells = (label if t is lv.turns[0] else "", str(t.turn + 1), f"{t.requests:,}",
                 f"{t.prompt_tokens_mean:,.0f}", _ms(t.ttft_ms.p50), _ms(t.ttft_ms.p99), _ms(t.e2e_ms.p50))
        rows.append("<tr>" + "".join(f"<td{_TEXT if i == 0 else ''}>{c}</td>" for i, c in enumerate(cells)) + "</tr>")
    return rows


def turns_table(run: ReportRun) -> str:
    """One table of every level's turns; an empty string when the run has none."""
    rows = [row for lv in run.levels if lv.turns for row in _level_rows(lv)]
    if not rows:
        return ""
    head = "".join(f"<th{_TEXT if i == 0 else ''}>{h}</th>" for i, h in enumerate(_HEAD))
    return (f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
            "</table></div>")
