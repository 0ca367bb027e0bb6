"""Rendering a comparison: a Rich table of output tok/s by concurrency and one sentence per finding.

Everything here formats an ``analysis.compare.Comparison``; nothing is recomputed. The table shows
at most ``MAX_COLUMNS`` levels, chosen so that what matters stays visible: both ends of the grid,
the measured levels around every crossover, every run's first plateau level, then the levels
farthest (in log2) from those already shown. Interpolated cells are marked ``~``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from plateau_bench.analysis.compare import Comparison, SloResult
from plateau_bench.analysis.crossover import PairResult
from plateau_bench.analysis.repeats import RepeatComparison
from plateau_bench.report.repeats import COLUMNS as REPEAT_COLUMNS
from plateau_bench.report.repeats import interval_text

MAX_COLUMNS = 6


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _conc(c: float) -> str:
    """An interpolated concurrency: one decimal where that is still meaningful (C~15.5, C~182)."""
    return f"{c:.1f}" if c < 100 else f"{c:,.0f}"


def display_levels(comp: Comparison, max_columns: int = MAX_COLUMNS) -> list[int]:
    """The levels shown as columns: ends, crossover brackets, plateau starts, then the widest gaps."""
    grid = [row.concurrency for row in comp.aligned]
    if len(grid) <= max_columns:
        return grid
    chosen = {grid[0], grid[-1]}
    for pair in comp.pairs:
        for x in pair.crossovers:
            chosen.update(x.bracket)
    chosen.update(r.plateau.concurrency for r in comp.runs if r.plateau)
    chosen = set(sorted(chosen, key=grid.index)[:max_columns]) if len(chosen) > max_columns else chosen
    while len(chosen) < max_columns:
        # Fill with the level farthest (in log2) from every level already shown.
        spare = [c for c in grid if c not in chosen]
        chosen.add(max(spare, key=lambda c: min(abs(math.log2(c) - math.log2(k)) for k in chosen)))
    return sorted(chosen)


def comparison_table(comp: Comparison, columns: Sequence[int] | None = None) -> Table:
    """Output tok/s per run at the shown levels (``~`` marks an interpolated value), plateau and knee."""
    cols = list(columns) if columns is not None else display_levels(comp)
    rows = {row.concurrency: row for row in comp.aligned}
    table = Table(title="Output tok/s by concurrency (~ interpolated)", title_justify="left",
                  header_style="bold", pad_edge=False, box=None)
    table.add_column("run")
    for c in cols:
        table.add_column(f"C={c}", justify="right")
    table.add_column("plateau", justify="right", no_wrap=True)
    table.add_column("knee", justify="right")
    with_gpus = any(r.gpus for r in comp.runs)
    with_cost = any(r.cost_per_mtok is not None for r in comp.runs)
    if with_gpus:
        table.add_column("tok/s/GPU", justify="right", no_wrap=True)
    if with_cost:
        table.add_column("$/1M", justify="right")
    for run in comp.runs:
        cells: list[str | Text] = [Text(run.name)]
        for c in cols:
            cell = rows[c].runs[run.name]
            v = cell.output_throughput
            cells.append(_num(v) if cell.measured or v is None else f"~{v:,.0f}")
        if run.plateau:
            cells.append(_num(run.plateau.throughput) + ("" if run.plateau.reached else "?"))
        else:
            cells.append("none")
        cells.append(f"~{run.knee.concurrency:,.0f}" if run.knee else "-")
        if with_gpus:
            cells.append(_num(run.tok_s_per_gpu))
        if with_cost:
            cells.append("-" if run.cost_per_mtok is None else f"${run.cost_per_mtok:,.2f}")
        table.add_row(*cells)
    return table


def pair_lines(pair: PairResult) -> list[str]:
    """Where one run of the pair overtakes the other, or who leads throughout."""
    a, b = pair.runs
    if pair.common_range is None:
        return [f"No crossover: {a} and {b} share no measured concurrency range."]
    lo, hi = pair.common_range
    noise = _noise_words(pair.noise)
    if not pair.crossovers:
        if pair.leader_low is None:
            return [f"No crossover: {a} and {b} deliver the same throughput over C={lo}..{hi}, not distinguishable "
                    f"at any C (every difference within {noise})."]
        return [f"No crossover over C={lo}..{hi}: {pair.leader_low} leads throughout."]
    out = []
    for x in pair.crossovers:
        lo_c, hi_c = x.bracket
        where = f"at measured C={lo_c}" if lo_c == hi_c else f"between measured {lo_c} and {hi_c}"
        interval = "" if x.interval is None else f"C~{_conc(x.interval[0])}..{_conc(x.interval[1])} within {noise}; "
        out.append(f"Crossover: {x.leader_above} overtakes {x.leader_below} at C~{_conc(x.concurrency)} ({where}; "
                   f"{interval}{x.throughput:,.0f} tok/s, {x.per_user_tok_s:,.1f} tok/s per user).")
    return out


def _noise_words(noise: str) -> str:
    """``PairResult.noise`` as the words after "within"."""
    return "the levels' 95 % CIs" if noise == "level CIs" else f"the 95 % intervals over {noise}"


def slo_line(res: SloResult) -> str:
    """Each run's largest concurrency meeting the profile, and the run with the most tok/s under it."""
    parts = []
    for i, cap in enumerate(res.runs):
        if cap.max_concurrency is None:
            parts.append(f"{cap.run} meets it at no measured level")
        else:
            verb = "serves up to" if i == 0 else "up to"
            parts.append(f"{cap.run} {verb} C={cap.max_concurrency} ({_num(cap.max_throughput)} tok/s)")
    verdict = f" -> {res.winner}" if res.winner else " -> none"
    return f"Under {res.label}: {', '.join(parts)}{verdict}."


def cost_line(comp: Comparison, gpu_cost: float) -> str:
    """$ per 1M output tokens per run: at its plateau (or best level), then under each SLO profile."""
    parts = []
    for run in comp.runs:
        at = "plateau" if run.plateau else "best level"
        text = f"{run.name} ({run.gpus} GPUs) ${run.cost_per_mtok:,.2f} at its {at}" \
            if run.cost_per_mtok is not None else f"{run.name} n/a"
        for res, cost in zip(comp.slo, run.slo_cost_per_mtok, strict=True):
            text += f", ${cost:,.2f} at its best level under {res.label}" if cost is not None \
                else f", none under {res.label}"
        parts.append(text)
    return f"Cost per 1M output tokens at ${gpu_cost:g}/GPU-hour: {'; '.join(parts)}."


def energy_line(comp: Comparison) -> str | None:
    """Output tokens per joule at each run's plateau, when at least two runs measured their GPUs' energy."""
    known = [r for r in comp.runs if r.output_tokens_per_joule is not None]
    if len(known) < 2:
        return None
    parts = [f"{r.name} {r.output_tokens_per_joule:.3g} at C={r.energy_concurrency}"
             if r.output_tokens_per_joule is not None else f"{r.name} unknown (no GPU energy)" for r in comp.runs]
    best = max(known, key=lambda r: r.output_tokens_per_joule or 0.0)
    return f"Output tokens per joule of GPU energy at the plateau: {', '.join(parts)} -> {best.name}."


_METRIC_NAMES = {name: (head, unit) for head, name, unit in REPEAT_COLUMNS}


def repeat_lines(rc: RepeatComparison) -> list[str]:
    """Per level: which figures differ beyond the between-run noise (Welch, 95 %), or why it cannot tell."""
    a, b = rc.runs
    conf = f"{rc.confidence:.0%}"
    if rc.cannot_tell is not None:
        return [f"Real or noise ({a} vs {b}): cannot tell: {rc.cannot_tell}."]
    out = []
    for lv in rc.levels:
        parts = []
        for m in lv.metrics:
            if m.a is None or m.b is None:
                continue
            head, unit = _METRIC_NAMES[m.metric]
            parts.append(f"{head} {interval_text(m.a, unit)} vs {interval_text(m.b, unit)} {m.verdict}")
        out.append(f"Real or noise at {lv.level} ({a} n={lv.repeats[0]}, {b} n={lv.repeats[1]}; Welch's t at "
                   f"{conf}): {'; '.join(parts) if parts else 'no figure in common'}.")
    return out


def comparison_lines(comp: Comparison) -> list[str]:
    """One sentence per finding: crossovers, SLO capacity, cost, energy, users at a latency target."""
    lines = [f"Warning: {w}." for w in comp.warnings]
    for pair in comp.pairs:
        lines.extend(pair_lines(pair))
    for rc in comp.repeats:
        lines.extend(repeat_lines(rc))
    lines.extend(slo_line(res) for res in comp.slo)
    if comp.gpu_cost_per_hour is not None:
        lines.append(cost_line(comp, comp.gpu_cost_per_hour))
    energy = energy_line(comp)
    if energy is not None:
        lines.append(energy)
    if comp.users is not None:
        q = comp.users
        parts = [f"{u.run} {'>=' if u.at_least else ''}{u.users}" for u in q.runs]
        winner = f" -> {q.winner}" if q.winner else " -> none"
        lines.append(f"Users within {q.target_latency_s:g}s for {q.response_tokens}-token responses "
                     f"({q.stat} TTFT + {q.response_tokens - 1} x {q.stat} TPOT): "
                     f"{', '.join(parts)}{winner}.")
    return lines
