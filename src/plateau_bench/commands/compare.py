"""``plateau compare RUN RUN [...]``: crossovers, SLO capacity, cost and users at a latency target.

The analysis is ``analysis.compare.compare_runs``, the rendering ``report.compare``; this module
parses the options, loads the result directories through ``store`` (named by ``store.run_names``),
calls the one and prints the other (or the JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.analysis.compare import RunData, compare_runs
from plateau_bench.analysis.plateau import SearchConfig
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.answer_flags import GpuCost
from plateau_bench.commands.options import Json, wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.report.compare import comparison_lines, comparison_table
from plateau_bench.spec import parse_duration, parse_int_list
from plateau_bench.store import kept_attempts, load_requests, load_result, run_names


def load_run(path: Path, name: str, *, with_requests: bool = False) -> RunData:
    """A result directory as ``RunData`` (requests, kept attempts only, when goodput needs them)."""
    result = load_result(path)
    requests = load_requests(path, attempts=kept_attempts(result)) if with_requests and path.is_dir() else None
    search = result.spec.sweep.search if result.spec.sweep is not None else SearchConfig()
    return RunData(name=name, levels=tuple(result.levels), spec=result.spec, requests=requests or None,
                   search=search)


def compare_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="Two or more result directories.")],
    names: Annotated[list[str] | None, typer.Option("--name", help="Run names, one per directory "
                                                    "(repeatable; default: directory names).")] = None,
    slo: Annotated[list[str] | None, typer.Option("--slo", help="SLO profile, e.g. ttft_p99=2s,tpot_p99=50ms "
                                                  "(repeatable: one line per profile).")] = None,
    gpu_cost: GpuCost = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU count per run, e.g. 4,8.")] = None,
    response_tokens: Annotated[int | None, typer.Option("--response-tokens", help="Response length for "
                                                        "--target-latency.")] = None,
    target_latency: Annotated[str | None, typer.Option("--target-latency", help="End-to-end latency target, "
                                                       "e.g. 30s: how many users each run serves.")] = None,
    latency_stat: Annotated[str, typer.Option("--latency-stat", help="Statistic of TTFT and TPOT used for "
                                              "--target-latency: mean|p50|p90|p99|max.")] = "p90",
    as_json: Json = False,
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
        typer.echo(msgspec.json.format(msgspec.json.encode(comp), indent=2).decode())
        return
    console = wide_console()
    console.print(comparison_table(comp))
    for line in comparison_lines(comp):
        console.print(line, style="yellow" if line.startswith("Warning") else None, highlight=False,
                      markup=False)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
