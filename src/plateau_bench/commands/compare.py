"""``plateau compare RUN RUN [...]``: crossovers, SLO capacity, cost and users at a latency target.

The analysis is ``analysis.compare.compare_runs``; this module loads the result directories,
renders the comparison (a Rich table and one sentence per finding) and prints it or its JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.table import Table
from rich.text import Text

from plateau_bench.analysis.compare import Comparison, PairResult, RunData, compare_runs
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.report.results import load_levels, load_requests, load_summary
from plateau_bench.spec import parse_duration, parse_int_list
from plateau_bench.sweep import search_config_of

MAX_COLUMNS = 6


def run_names(paths: Sequence[Path]) -> list[str]:
    """Directory names; where two collide, enough parent components to tell them apart."""
    parts = [(p.parent if p.name == "result.json" else p).resolve().parts for p in paths]
    depth = 1
    while True:
        names = ["/".join(pp[-depth:]) for pp in parts]
        if len(set(names)) == len(names) or depth >= max(len(pp) for pp in parts):
            return names
        depth += 1


def load_run(path: Path, name: str, *, with_requests: bool = False) -> RunData:
    """A result directory as ``RunData`` (requests only when goodput needs them)."""
    summary = load_summary(path)
    spec = summary.get("spec") or {}
    requests = load_requests(path) if with_requests and path.is_dir() else None
    return RunData(name=name, levels=tuple(load_levels(path)), spec=spec, requests=requests or None,
                   search=search_config_of(spec))


# -- rendering -------------------------------------------------------------------------------------

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
    for i, run in enumerate(comp.runs):
        cells: list[str | Text] = [Text(run.name)]
        for c in cols:
            v, measured = rows[c].values[i], rows[c].measured[i]
            cells.append(_num(v) if measured or v is None else f"~{v:,.0f}")
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


def _pair_lines(pair: PairResult) -> list[str]:
    a, b = pair.first, pair.second
    if pair.common_range is None:
        return [f"No crossover: {a} and {b} share no measured concurrency range."]
    lo, hi = pair.common_range
    if not pair.crossovers:
        if pair.leader_low is None:
            return [f"No crossover: {a} and {b} deliver the same throughput over C={lo}..{hi}."]
        return [f"No crossover over C={lo}..{hi}: {pair.leader_low} leads throughout."]
    out = []
    for x in pair.crossovers:
        lo_c, hi_c = x.bracket
        where = f"at measured C={lo_c}" if lo_c == hi_c else f"between measured {lo_c} and {hi_c}"
        out.append(f"Crossover: {x.leader_above} overtakes {x.leader_below} at C~{_conc(x.concurrency)} ({where}; "
                   f"{x.throughput:,.0f} tok/s, {x.per_user_tok_s:,.1f} tok/s per user).")
    return out


def comparison_lines(comp: Comparison) -> list[str]:
    """One sentence per finding: crossovers, SLO capacity, cost, users at a latency target."""
    lines = [f"Warning: {w}." for w in comp.warnings]
    for pair in comp.pairs:
        lines.extend(_pair_lines(pair))
    for res in comp.slo:
        parts = []
        for i, cap in enumerate(res.runs):
            if cap.max_concurrency is None:
                parts.append(f"{cap.run} meets it at no measured level")
            else:
                verb = "serves up to" if i == 0 else "up to"
                parts.append(f"{cap.run} {verb} C={cap.max_concurrency} ({_num(cap.max_throughput)} tok/s)")
        verdict = f" -> {res.winner}" if res.winner else " -> none"
        lines.append(f"Under {res.label}: {', '.join(parts)}{verdict}.")
    if comp.gpu_cost is not None:
        parts = []
        for run in comp.runs:
            at = "plateau" if run.plateau else "best level"
            text = f"{run.name} ({run.gpus} GPUs) ${run.cost_per_mtok:,.2f} at its {at}" \
                if run.cost_per_mtok is not None else f"{run.name} n/a"
            for res, cost in zip(comp.slo, run.slo_cost_per_mtok, strict=True):
                text += f", ${cost:,.2f} at its best level under {res.label}" if cost is not None \
                    else f", none under {res.label}"
            parts.append(text)
        lines.append(f"Cost per 1M output tokens at ${comp.gpu_cost:g}/GPU-hour: {'; '.join(parts)}.")
    if comp.users_query:
        q = comp.users_query
        parts = [f"{u.run} {'>=' if u.at_least else ''}{u.users}" for u in comp.users]
        winner = f" -> {q['winner']}" if q["winner"] else " -> none"
        lines.append(f"Users within {q['target_latency_s']:g}s for {q['response_tokens']}-token responses "
                     f"({q['stat']} TTFT + {q['response_tokens'] - 1} x {q['stat']} TPOT): "
                     f"{', '.join(parts)}{winner}.")
    return lines


# -- the command -----------------------------------------------------------------------------------

def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare_cmd(
        run_dirs: Annotated[list[Path], typer.Argument(help="Two or more result directories.")],
        names: Annotated[list[str] | None, typer.Option("--name", help="Run names, one per directory "
                                                        "(repeatable; default: directory names).")] = None,
        slo: Annotated[list[str] | None, typer.Option("--slo", help="SLO profile, e.g. ttft_p99=2s,tpot_p99=50ms "
                                                      "(repeatable: one line per profile).")] = None,
        gpu_cost: Annotated[float | None, typer.Option("--gpu-cost", help="$ per GPU-hour.")] = None,
        gpus: Annotated[str | None, typer.Option("--gpus", help="GPU count per run, e.g. 4,8.")] = None,
        response_tokens: Annotated[int | None, typer.Option("--response-tokens", help="Response length for "
                                                            "--target-latency.")] = None,
        target_latency: Annotated[str | None, typer.Option("--target-latency", help="End-to-end latency target, "
                                                           "e.g. 30s: how many users each run serves.")] = None,
        latency_stat: Annotated[str, typer.Option("--latency-stat", help="Statistic of TTFT and TPOT used for "
                                                  "--target-latency: mean|p50|p90|p99|max.")] = "p90",
        as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON only.")] = False,
    ) -> None:
        """Compare saved runs: where one overtakes another, which meets an SLO with more, at what cost."""
        if names and len(names) != len(run_dirs):
            raise ConfigError(f"--name given {len(names)} time(s) for {len(run_dirs)} runs: give one per run")
        if len(run_dirs) < 2:
            raise ConfigError(f"a compare needs at least two runs (got {len(run_dirs)}): "
                              "plateau compare RUN_DIR RUN_DIR [...]")
        profiles = [parse_slo(s) for s in slo or []]
        runs = [load_run(p, n, with_requests=bool(profiles))
                for p, n in zip(run_dirs, names or run_names(run_dirs), strict=True)]
        comp = compare_runs(
            runs, profiles, gpu_cost=gpu_cost, gpus=parse_int_list(gpus, "--gpus") if gpus else None,
            response_tokens=response_tokens,
            target_latency_s=parse_duration(target_latency) if target_latency else None,
            latency_stat=latency_stat)
        if as_json:
            typer.echo(msgspec.json.format(msgspec.json.encode(comp.to_dict()), indent=2).decode())
            return
        console = wide_console()
        console.print(comparison_table(comp))
        for line in comparison_lines(comp):
            console.print(line, style="yellow" if line.startswith("Warning") else None, highlight=False,
                          markup=False)
