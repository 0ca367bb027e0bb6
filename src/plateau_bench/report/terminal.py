"""Terminal renderables: the level table, the seed-style lines, the summary sentence and the verdict.

Objects here describe output; the console that writes them is the caller's (tests render them to a
fixed-width console and compare strings). Nothing here computes a metric: every figure is read from
the typed result (``plateau_bench.result``).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from plateau_bench.analysis.open_loop import LATENCY_DEPARTURE
from plateau_bench.analysis.unmeasured import known, mean_only
from plateau_bench.report.repeats import repeat_table, with_repeats
from plateau_bench.report.time_split import time_split_table
from plateau_bench.result import (
    Knee,
    Latency,
    LevelResult,
    Plateau,
    RateSummary,
    ResultFile,
    SloBoundary,
    Verdict,
)


def _lat(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 10_000:
        return f"{v / 1000:.1f}s"
    if v >= 1000:
        return f"{v / 1000:.2f}s"
    return f"{v:.0f}ms" if v >= 10 else f"{v:.1f}ms"


def _pair(lat: Latency) -> str:
    """``p50/p99``; the mean, said as such, when a level summary states only the mean."""
    if mean_only(lat):
        return f"{_lat(lat.mean)} (mean)"
    return f"{_lat(lat.p50)}/{_lat(lat.p99)}"


def _figure(level: LevelResult, name: str, fmt: str) -> str:
    """A level's figure, or ``-`` when its source did not measure it (a level summary's placeholder 0)."""
    value = known(level, name)
    return "-" if value is None else format(value, fmt)


def level_key(level: LevelResult) -> str:
    if level.concurrency is not None:
        return f"C={level.concurrency}"
    return level.label


def failures_by_class(level: LevelResult) -> str:
    """``hung 3, truncated 2`` (most frequent first); empty when nothing failed."""
    return ", ".join(f"{name} {n}" for name, n in sorted(level.errors.items(), key=lambda kv: (-kv[1], kv[0])))


def seed_line(level: LevelResult) -> str:
    """The line users already know from the classic benchmark scripts (failures by class appended)."""
    e2e = level.e2e_ms

    def s(v: float | None) -> str:
        return f"{v / 1000:6.2f}" if v is not None else "     -"

    head = f"C={level.concurrency:>5}" if level.concurrency is not None else f"{level.label:>7}"
    wall = "-" if known(level, "wall_s") is None else f"{level.wall_s:7.1f}s"
    line = (f"{head} | {_figure(level, 'completed', 'd')}/{_figure(level, 'num_requests', 'd')} ok "
            f"({_figure(level, 'failed', 'd')} err) | "
            f"wall={wall:>8} | {_figure(level, 'output_throughput', '8.1f'):>8} tok/s | "
            f"lat avg={s(e2e.mean)} p50={s(e2e.p50)} p99={s(e2e.p99)}")
    if level.failed:
        line += f" | failed: {failures_by_class(level)}"
    return line


def level_table(levels: Sequence[LevelResult], *, title: str | None = None) -> Table:
    """One row per level, sorted by concurrency (then rate); failures by class when any failed."""
    burst = any(lv.mode == "burst" for lv in levels)
    any_failed = any(lv.failed for lv in levels)
    table = Table(title=title, title_justify="left", header_style="bold", pad_edge=False, box=box.SIMPLE_HEAD)
    names = ["level", "ok/err", "out tok/s", "gain", "TTFT p50/p99", "TPOT p50/p99", "E2E p50/p99",
             "achieved C", "decoding C"] + (["failed by class"] if any_failed else [])
    for name in names:
        table.add_column(name, justify="left" if name == "failed by class" else "right", no_wrap=True)
    ordered = sorted(levels, key=lambda lv: (lv.concurrency or 0, lv.rate or 0.0))
    prev: LevelResult | None = None
    for lv in ordered:
        gain = ""
        if prev is not None and prev.output_throughput > 0 and known(lv, "output_throughput") is not None:
            gain = f"{lv.output_throughput / prev.output_throughput - 1:+.1%}"
        cells = [level_key(lv) + (" (burst)" if burst and lv.mode == "burst" else ""),
                 f"{_figure(lv, 'completed', 'd')}/{_figure(lv, 'failed', 'd')}",
                 _figure(lv, "output_throughput", ",.1f"), gain, _pair(lv.ttft_ms), _pair(lv.tpot_ms),
                 _pair(lv.e2e_ms), _figure(lv, "achieved_concurrency", ",.1f"),
                 _figure(lv, "decoding_concurrency", ",.1f")]
        if any_failed:
            cells.append(failures_by_class(lv))
        table.add_row(*cells, style="red" if lv.level_failed else None)
        prev = lv
    return table


def levels_view(levels: Sequence[LevelResult], *, title: str | None = None) -> RenderableType:
    """The level table, and below it the server's own time split when it published one."""
    split = time_split_table(levels)
    table = level_table(levels, title=title)
    return table if split is None else Group(table, split)


def summary_sentence(levels: Sequence[LevelResult], plateau: Plateau | None, knee: Knee | None) -> str:
    """``Plateau: ~3,990 tok/s from C=256 (knee C~206). C=1024 adds +0.9 % ... for 4.0x the p50 latency.``"""
    if plateau is None or not plateau.throughput:
        if not levels:
            return "No levels measured."
        counted = [lv for lv in levels if not lv.level_failed and lv.completed]   # a failed level's tok/s is not
        if not counted:                                                           # what the server serves
            which = "the one level" if len(levels) == 1 else f"all {len(levels)} levels"
            return f"No level counts: {which} failed, so no throughput is claimed."
        best = max(counted, key=lambda lv: lv.output_throughput)
        return (f"No plateau yet: throughput still grows (best {best.output_throughput:,.0f} tok/s at "
                f"{level_key(best)}).")
    text = f"Plateau: ~{plateau.throughput:,.0f} tok/s from C={plateau.concurrency}"
    if knee is not None and knee.concurrency:
        lo, hi = knee.bracket
        bracket = f", between C={lo} and C={hi}" if lo != hi else ""
        text += f" (knee C~{knee.concurrency:.0f}{bracket})"
    if not plateau.reached:
        text += " [proposed, not confirmed]"
    text += "."
    by_c = {lv.concurrency: lv for lv in levels if lv.concurrency}
    base = by_c.get(plateau.concurrency)
    top = by_c[max(by_c)] if by_c else None
    if base and top and top is not base and base.output_throughput > 0 and base.e2e_ms.p50 and top.e2e_ms.p50:
        gain = top.output_throughput / base.output_throughput - 1
        ratio = top.e2e_ms.p50 / base.e2e_ms.p50
        text += (f" C={top.concurrency} adds {gain:+.1%} throughput for {ratio:.1f}x the p50 latency"
                 f" (vs C={base.concurrency}).")
    return text


def rate_sentence(summary: RateSummary) -> str:
    def r(v: float | None) -> str:
        return f"{v:.2f} req/s" if v is not None else "n/a"

    parts = []
    if summary.synchronous_rate is not None:
        parts.append(f"Synchronous rate {r(summary.synchronous_rate)}, maximum throughput {r(summary.max_rate)}.")
    parts.append(f"Latency departs from its low-load value (E2E p50 x{LATENCY_DEPARTURE:g}) at "
                 f"{r(summary.departure_rate)}." if summary.departure_rate is not None
                 else "Latency stayed near its low-load value at every rate measured.")
    return " ".join(parts)


def slo_boundary_sentence(b: SloBoundary) -> str:
    """``SLO boundary (ttft_p99<=2s): max concurrency 23 (between 23 and 24; binds: ...; smooth) ...``"""
    what = "concurrency" if b.find == "max-concurrency" else "rate"
    unit = "" if b.find == "max-concurrency" else " req/s"
    head = f"SLO boundary ({', '.join(b.bounds)}): "
    if b.value is None:
        return head + "no measured load meets every bound."
    if not b.reached:
        return head + f"every load measured meets it, up to {what} {b.value:g}{unit}."
    lo, hi = b.interval or (b.value, b.value)
    text = head + f"max {what} {b.value:g}{unit} (the boundary lies in [{lo:g}, {hi:g}){unit})"
    if b.binding:
        text += (f"; {b.binding} binds: {_lat(b.binding_at_boundary_ms)} there, {_lat(b.binding_beyond_ms)} at "
                 f"{hi:g}{unit}")
    if b.shape:
        text += f"; a {b.shape} boundary"
    if b.goodput_rps is not None:
        text += f"; goodput {b.goodput_rps:.2f} req/s"
    if b.throughput is not None:
        text += f", {b.throughput:,.0f} tok/s"
    return text + "."


def verdict_text(verdict: Verdict) -> Text:
    out = Text()
    out.append("Verdict: ", style="bold")
    out.append(verdict.headline, style="bold yellow")
    out.append(f" ({verdict.confidence} confidence)\n")
    for line in verdict.evidence:
        out.append(f"  - {line}\n")
    if verdict.secondary:
        out.append("  Also binding: ", style="bold")
        out.append(f"{verdict.secondary.replace('_', ' ')}\n")
        for line in verdict.secondary_evidence:
            out.append(f"    - {line}\n")
    for line in verdict.gpu_evidence:
        out.append("  GPU: ", style="bold")
        out.append(f"{line}\n")
    if verdict.roofline is not None:
        out.append("  Roofline: ", style="bold")
        out.append(f"{verdict.roofline.text}\n")
    for line in verdict.what_if:
        out.append("  What if: ", style="bold")
        out.append(f"{line}\n")
    if verdict.what_if and verdict.what_if_model:
        out.append("  What-if model: ", style="bold")
        out.append(f"{verdict.what_if_model}\n")
    for line in verdict.suggestions:
        out.append("  Try: ", style="bold")
        out.append(f"{line[4:] if line.startswith('try ') else line}\n")
    for line in verdict.to_separate:
        out.append("  To separate them: " if verdict.secondary else "  To confirm: ", style="bold")
        out.append(f"{line}\n")
    out.rstrip()
    return out


def _plain(text: str) -> Text:
    return Text(text)


def level_notes(levels: Sequence[LevelResult]) -> list[str]:
    return [f"{level_key(lv)}: {note}" for lv in levels for note in lv.notes]


def sweep_report(result: ResultFile, out_dir: str | None) -> RenderableType:
    """Everything ``plateau sweep`` prints at the end, in order."""
    levels = result.levels
    parts: list[RenderableType] = [_plain(seed_line(lv)) for lv in sorted(
        levels, key=lambda lv: (lv.concurrency or 0, lv.rate or 0.0))]
    if result.rate_sweep is not None:
        parts.append(levels_view(levels, title="open-loop rate sweep"))
        parts.append(_plain(rate_sentence(result.rate_sweep)))
    else:
        burst = any(lv.mode == "burst" for lv in levels)
        parts.append(levels_view(levels, title=f"{len(levels)} levels" +
                                 (" (burst mode: num-requests = C)" if burst else "")))
        parts.append(_plain(summary_sentence(levels, result.plateau, result.knee)))
    if with_repeats(levels):
        parts.append(repeat_table(levels))
    if result.slo_boundary is not None:
        parts.append(_plain(slo_boundary_sentence(result.slo_boundary)))
    elif result.slo is not None:
        parts.append(_plain(f"SLO {', '.join(result.slo.bounds)}: met up to C={result.slo.max_concurrency}"))
    cache = cache_line(result)
    if cache is not None:
        parts.append(_plain(cache))
    parts.extend(_plain(f"Note: {n}") for n in level_notes(levels))
    if result.stop_reason:
        parts.append(_plain(f"Stopped: {result.stop_reason}"))
    timing = time_line(result)
    if timing is not None:
        parts.append(_plain(timing))
    if result.verdict is not None:
        parts.append(verdict_text(result.verdict))
    if out_dir is not None:
        parts.append(_plain(f"results: {out_dir}"))
    return Group(*parts)


def time_line(result: ResultFile) -> str | None:
    """Benchmark time in all, and how much of it the verdict took to stand as it ended."""
    total = result.benchmark_seconds
    if not total:
        return None
    line = f"Benchmark time: {total:,.0f} s of load"
    if result.time_to_verdict_s is not None:
        line += f"; the verdict stood as it ended after {result.time_to_verdict_s:,.0f} s"
    warm = sum(1 for lv in result.levels if lv.warm is not None)
    if warm:
        line += f" ({warm} of {len(result.levels)} levels measured warm)"
    return line


NOTABLE_HIT_RATE = 0.05   # new prompts should find next to nothing cached: more is shown


def cache_line(result: ResultFile) -> str | None:
    """The server's prefix-cache hit rate by level, for workloads built to share prefixes (shared
    system prompts, multi-turn sessions, traces) or when the server found any prompt tokens cached
    (new prompts should find none); None when the server stated none."""
    w = result.spec.workload
    rates = [lv.telemetry.prefix_cache_hit_rate or 0.0 for lv in result.levels]
    if not (w.prefix_groups or w.sessions or w.trace or max(rates, default=0.0) >= NOTABLE_HIT_RATE):
        return None
    shown = [f"{lv.label} {lv.telemetry.prefix_cache_hit_rate:.0%}" for lv in result.levels
             if lv.telemetry.prefix_cache_hit_rate is not None]
    return f"Prefix cache hit rate by level (server): {', '.join(shown)}" if shown else None


def turns_line(lv: LevelResult) -> str:
    """Multi-turn sessions: TTFT p50 by turn index, with the prompt each turn carried."""
    shown = ", ".join(f"{t.turn + 1}: {t.ttft_ms.p50 or 0.0:.0f} ms ({t.prompt_tokens_mean:,.0f} tok)"
                      for t in lv.turns[:12])
    more = f", ... ({len(lv.turns)} turns)" if len(lv.turns) > 12 else ""
    return f"TTFT p50 by turn (prompt tokens): {shown}{more}"


def run_report(result: ResultFile, out_dir: str | None) -> RenderableType:
    """What ``plateau run`` prints: the level, its failures, and a verdict only when it found a problem."""
    parts: list[RenderableType] = []
    for lv in result.levels:
        parts.append(_plain(seed_line(lv)))
        parts.append(level_table([lv]))
        if lv.turns:
            parts.append(_plain(turns_line(lv)))
        if lv.level_failed:
            parts.append(Text(f"level failed: {lv.failed}/{lv.num_requests} requests failed, mostly "
                              f"{lv.dominant_error}", style="red"))
    split = time_split_table(result.levels)
    if split is not None:
        parts.append(split)
    cache = cache_line(result)
    if cache is not None:
        parts.append(_plain(cache))
    if with_repeats(result.levels):
        parts.append(repeat_table(result.levels))
    parts.extend(_plain(f"Note: {n}") for n in level_notes(result.levels))
    if result.verdict is not None and result.verdict.constraint in ("load_generator", "errors"):
        parts.append(verdict_text(result.verdict))
    if out_dir is not None:
        parts.append(_plain(f"results: {out_dir}"))
    return Group(*parts)
