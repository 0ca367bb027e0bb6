"""``plateau tune --serve 'CMD --flag {name} --port {port}' --param name=lo..hi``: the best server setting for
fewer restarts than a grid. The method is ``sweep.tune``; this module starts and stops the servers
(``driver.server_process``), sweeps each one and prints predicted against measured (``report.answers``).
"""

from __future__ import annotations

import socket
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.aio import run as run_async
from plateau_bench.commands import options as o
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.load_flags import STOP_DEFAULTS, Ceiling, GridFlags, StopRuleFlags
from plateau_bench.errors import ConfigError
from plateau_bench.report.answers import tune_view
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.spec import LevelSpec, WorkloadSpec, parse_duration
from plateau_bench.sweep.build import SweepAsk, concurrency_plan
from plateau_bench.sweep.plan import ConcurrencyPlan
from plateau_bench.sweep.tune import Measure, TuneParam, plan_for


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TuneGrid(GridFlags, frozen=True, kw_only=True):
    """Each setting's sweep: a fixed grid at every setting, or the adaptive search up to 1024."""

    max_concurrency: Ceiling = 1024


TUNE_GRID = TuneGrid()


class _Levels:
    """One stderr line per measured level (nothing with ``--quiet``)."""

    progress = None

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def level_started(self, level: LevelSpec, phase: str) -> None:
        pass

    def level_finished(self, level: LevelResult) -> None:
        if not self.quiet:
            print(f"  {level.label}: {level.output_throughput:,.0f} tok/s", file=sys.stderr)


def _measurer(serve: str, url: str | None, model: str | None, workload: WorkloadSpec, plan: ConcurrencyPlan,
              ready_s: float, out_dir: Path, params: list[TuneParam], start: dict[str, int],
              quiet: bool = False) -> Measure:
    from plateau_bench.driver.server_process import ServerProcess
    from plateau_bench.sweep.job import Job, run_job
    from plateau_bench.sweep.tune import render

    async def measured(setting: dict[str, int], run_dir: Path) -> tuple[ResultFile, float | None]:
        port = free_port()
        base = url or f"http://127.0.0.1:{port}"
        log = out_dir / f"{run_dir.name}.server.log"
        if not quiet:
            print(f"plateau tune: starting the server with {setting} (log {log})", file=sys.stderr)
        job = Job(url=base, target=lambda u: o.target_spec(u, model, "completions", None, None, "600s"),
                  workload=workload, plan=plan_for(plan, setting, params, start), out_dir=run_dir,
                  existing="overwrite")
        async with ServerProcess(render(serve, setting, port), base, log, ready_timeout_s=ready_s) as server:
            done = await run_job(job, nullcontext(_Levels(quiet)))
        if done.finished_early:   # the first Ctrl-C finished the level; the tune stops with it
            raise KeyboardInterrupt
        return done.result, server.ready_s
    return measured


@grouped
def tune_cmd(
    serve: Annotated[str, typer.Option("--serve", help="The server's command with {param} placeholders and {port}, "
                                       "e.g. 'vllm serve M --max-num-seqs {max_num_seqs} --port {port}'.")],
    param: Annotated[list[str], typer.Option("--param", help="name=lo..hi (lo, the powers of two between, hi) or "
                                             "name=a,b,c; repeat for several.")],
    start: Annotated[list[str] | None, typer.Option("--start", help="name=value to measure first (default: the "
                                                    "second value of each grid).")] = None,
    candidates: Annotated[int, typer.Option("--candidates", help="How many predicted-best settings to measure.")] = 2,
    brute_force: Annotated[bool, typer.Option("--brute-force", help="Also measure every other setting (a check of "
                                              "the method; costs a restart each).")] = False,
    url: Annotated[str | None, typer.Option("--url", help="Where the server answers (default: 127.0.0.1 on the "
                                            "{port} tune picks).")] = None,
    model: o.Model = None,
    wait_ready: o.WaitReady = "10m",
    lengths: o.LengthFlags = o.DEFAULT_LENGTHS,
    grid: TuneGrid = TUNE_GRID,
    stop: StopRuleFlags = STOP_DEFAULTS,
    out: Annotated[Path, typer.Option("--out", help="Directory for the sweeps, server logs and tune.json.")]
    = Path("runs/tune"),
    as_json: o.Json = False,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    quiet: o.Quiet = False,
) -> None:
    """Find the best server setting: measure one, calibrate the twin, measure only what it predicts best."""
    from plateau_bench.sweep.tune import check_template, parse_param, parse_start, run_tune, settings

    params = [parse_param(p) for p in param]
    check_template(serve, params, url is not None)
    if candidates < 0:
        raise ConfigError(f"--candidates must be >= 0 (got {candidates})")
    first = parse_start(start or [], params)
    workload = lengths.workload()
    limits = stop.limits()
    plan = concurrency_plan(SweepAsk(concurrency=grid.concurrency, max_concurrency=_ceiling(grid)), limits)
    out.mkdir(parents=True, exist_ok=True)
    measure = _measurer(serve, url, model, workload, plan, parse_duration(wait_ready or "10m", "--wait-ready"), out,
                        params, first, quiet)
    done = run_async(run_tune(params, first, measure, out, workload=workload, slos=list(limits.slos),
                              candidates=candidates, brute_force=brute_force, serve=serve))
    text = msgspec.json.format(msgspec.json.encode(done), indent=2).decode()
    (out / "tune.json").write_text(text + "\n")
    note_result_dir(out)
    if as_json:
        typer.echo(text)
        return
    o.wide_console().print(tune_view(done, len(settings(params))))


def _ceiling(grid: GridFlags) -> int:
    """A fixed grid is its own ceiling (the search's ceiling is checked against the grid's top)."""
    from plateau_bench.spec import parse_int_list

    return max(parse_int_list(grid.concurrency, "--concurrency")) if grid.concurrency else grid.max_concurrency


def register(app: typer.Typer) -> None:
    app.command("tune", cls=ConfiguredCommand)(tune_cmd)
