"""Terminal renderables: the level table, the summary sentence and the verdict.

Objects here describe output; the console that writes them is the caller's (tests render them to a
fixed-width console and compare strings). Nothing here computes a metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from plateau_bench.records import Latency, LevelResult


def _lat(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 10_000:
        return f"{v / 1000:.1f}s"
    if v >= 1000:
        return f"{v / 1000:.2f}s"
    return f"{v:.0f}ms" if v >= 10 else f"{v:.1f}ms"


def _pair(lat: Latency) -> str:
    return f"{_lat(lat.p50)}/{_lat(lat.p99)}"


def level_key(level: LevelResult) -> str:
    if level.concurrency is not None:
        return f"C={level.concurrency}"
    return level.label


def level_table(levels: Sequence[LevelResult], *, title: str | None = None) -> Table:
    """One row per level, in the order measured, sorted by concurrency."""
    burst = any(lv.mode == "burst" for lv in levels)
    table = Table(title=title, title_justify="left", header_style="bold", pad_edge=False, box=box.SIMPLE_HEAD)
    for name in ("level", "ok/err", "out tok/s", "gain", "TTFT p50/p99", "TPOT p50/p99", "E2E p50/p99",
                 "achieved C", "decoding C"):
        table.add_column(name, justify="right", no_wrap=True)
    ordered = sorted(levels, key=lambda lv: (lv.concurrency or 0, lv.rate or 0.0))
    prev: LevelResult | None = None
    for lv in ordered:
        gain = ""
        if prev is not None and prev.output_throughput > 0:
            gain = f"{lv.output_throughput / prev.output_throughput - 1:+.1%}"
        style = "red" if lv.level_failed else None
        table.add_row(
            level_key(lv) + (" (burst)" if burst and lv.mode == "burst" else ""),
            f"{lv.completed}/{lv.failed}",
            f"{lv.output_throughput:,.1f}",
            gain,
            _pair(lv.ttft_ms),
            _pair(lv.tpot_ms),
            _pair(lv.e2e_ms),
            f"{lv.achieved_concurrency:,.1f}",
            f"{lv.decoding_concurrency:,.1f}",
            style=style,
        )
        prev = lv
    return table


def summary_sentence(levels: Sequence[LevelResult], plateau: Mapping[str, Any] | None,
                     knee: Mapping[str, Any] | None) -> str:
    """``Plateau: ~3,990 tok/s from C=256 (knee C~206). C=1024 adds +0.9 % ... for 4.0x the p50 latency.``"""
    if not plateau or not plateau.get("throughput"):
        if not levels:
            return "No levels measured."
        best = max(levels, key=lambda lv: lv.output_throughput)
        return (f"No plateau yet: throughput still grows (best {best.output_throughput:,.0f} tok/s at "
                f"{level_key(best)}).")
    start_c = plateau.get("concurrency")
    text = f"Plateau: ~{plateau['throughput']:,.0f} tok/s from C={start_c}"
    if knee and knee.get("concurrency"):
        lo, hi = (knee.get("bracket") or [None, None])[:2]
        bracket = f", between C={lo} and C={hi}" if lo is not None and hi is not None and lo != hi else ""
        text += f" (knee C~{knee['concurrency']:.0f}{bracket})"
    if not plateau.get("reached"):
        text += " [proposed, not confirmed]"
    text += "."
    by_c = {lv.concurrency: lv for lv in levels if lv.concurrency}
    base = by_c.get(int(start_c)) if start_c is not None else None
    top = by_c[max(by_c)] if by_c else None
    if base and top and top is not base and base.output_throughput > 0 and base.e2e_ms.p50 and top.e2e_ms.p50:
        gain = top.output_throughput / base.output_throughput - 1
        ratio = top.e2e_ms.p50 / base.e2e_ms.p50
        text += (f" C={top.concurrency} adds {gain:+.1%} throughput for {ratio:.1f}x the p50 latency"
                 f" (vs C={base.concurrency}).")
    return text


def verdict_text(verdict: Mapping[str, Any]) -> Text:
    out = Text()
    out.append("Verdict: ", style="bold")
    out.append(f"{verdict.get('headline', '?')}", style="bold yellow")
    out.append(f" ({verdict.get('confidence', '?')} confidence)\n")
    for line in verdict.get("evidence", []):
        out.append(f"  - {line}\n")
    for line in verdict.get("what_if", []):
        out.append("  What if: ", style="bold")
        out.append(f"{line}\n")
    for line in verdict.get("suggestions", []):
        out.append("  Try: ", style="bold")
        line = line[4:] if line.startswith("try ") else line
        out.append(f"{line}\n")
    out.rstrip()
    return out
