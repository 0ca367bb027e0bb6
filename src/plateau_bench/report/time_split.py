"""The server's own time split per level (``LevelResult.time_split``), as a terminal table and as HTML.

One row per level whose server published the histograms: the mean and p99 of queue, prefill and decode
time by the server's account, the client's mean TTFT beside them and what of it the server does not
account for (outside the engine), and the tokens per engine step. Nothing is recomputed here.
A cell reads ``-`` when the engine does not publish that histogram and ``?`` when the window held too
few requests for a figure; a p99 in the histogram's +Inf bucket reads ``>`` its last bound.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from rich import box
from rich.table import Table

from plateau_bench.result import LevelResult, ServerPhase, ServerTimeSplit

HEADERS = ("level", "requests", "queue mean/p99", "prefill mean/p99", "decode mean/p99", "TTFT client",
           "outside engine", "tok/step mean/p99")
TITLE = "server's own time split (its histograms, over each level's window)"
CAPTION = "outside engine = client TTFT mean - queue - prefill; ?: too few requests; -: not published"


def _ms(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:.1f}s"
    if abs(v) >= 1000:
        return f"{v / 1000:.2f}s"
    return f"{v:.0f}ms" if abs(v) >= 10 else f"{v:.1f}ms"


def _tokens(v: float) -> str:
    return f"{v:,.0f}" if v >= 10 else f"{v:.1f}"


def _value(v: float | None, *, tokens: bool = False) -> str:
    if v is None:
        return "?"
    return _tokens(v) if tokens else _ms(v)


def phase_text(phase: ServerPhase | None, *, tokens: bool = False) -> str:
    """``120ms/410ms``: mean/p99; ``-`` not published, ``?`` too few, ``>7680s`` p99 in the +Inf bucket."""
    if phase is None:
        return "-"
    p99 = _value(phase.p99, tokens=tokens)
    return f"{_value(phase.mean, tokens=tokens)}/{'>' if phase.p99_above else ''}{p99}"


def with_split(levels: Sequence[LevelResult]) -> list[LevelResult]:
    ordered = sorted(levels, key=lambda lv: (lv.concurrency or 0, lv.rate or 0.0))
    return [lv for lv in ordered if lv.time_split is not None]


def _key(level: LevelResult) -> str:
    return f"C={level.concurrency}" if level.concurrency is not None else level.label


def _cells(level: LevelResult, split: ServerTimeSplit) -> list[str]:
    queue = split.queue_ms or split.server_ttft_ms
    requests = f"{queue.observations:,.0f}" if queue is not None else "-"
    client = "-" if split.client_ttft_mean_ms is None else _ms(split.client_ttft_mean_ms)
    outside = "?" if split.outside_engine_ms is None else _ms(split.outside_engine_ms)
    return [_key(level), requests, phase_text(split.queue_ms), phase_text(split.prefill_ms),
            phase_text(split.decode_ms), client, outside, phase_text(split.step_tokens, tokens=True)]


def time_split_table(levels: Sequence[LevelResult]) -> Table | None:
    """The split per level; None when no level has one (the server published none of the histograms)."""
    rows = with_split(levels)
    if not rows:
        return None
    table = Table(title=TITLE, caption=CAPTION, title_justify="left", caption_justify="left", header_style="bold",
                  pad_edge=False, box=box.SIMPLE_HEAD)
    for name in HEADERS:
        table.add_column(name, justify="right", no_wrap=True)
    for lv in rows:
        assert lv.time_split is not None
        table.add_row(*_cells(lv, lv.time_split))
    return table


def time_split_html(levels: Sequence[LevelResult]) -> str:
    """The same table for the HTML report (empty when no level has a split)."""
    rows = with_split(levels)
    if not rows:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = []
    for lv in rows:
        assert lv.time_split is not None
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(lv, lv.time_split)) + "</tr>")
    return ('<h3>The server\'s own time split</h3><p class="sub">From the server\'s histograms over each level\'s '
            'window: mean/p99 of the time a request waited to be scheduled (queue), from then to its first token '
            '(prefill) and from there to its last (decode); the client\'s mean TTFT, and what of it the server '
            'does not account for (outside the engine: network, HTTP, tokenisation); tokens per engine step. '
            '?: too few requests in the window; -: not published by this engine; &gt;: above the '
            'histogram\'s last bound.</p>'
            f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            '</table></div>')
