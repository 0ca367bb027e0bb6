"""``plateau tune --serve 'CMD --flag {name} --port {port}' --param name=lo..hi``: the best server setting for
fewer restarts than a grid. The method is ``sweep.tune``; this module starts and stops the servers
(``driver.server_process``), sweeps each one and prints predicted against measured.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.plateau import SearchConfig
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands import options as o
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.errors import ConfigError
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.spec import LevelSpec, WorkloadSpec, parse_duration, parse_int_list
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits
from plateau_bench.sweep.tune import Measure, TuneParam, plan_for


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Levels:
    """One stderr line per measured level (nothing with ``--quiet``)."""

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
    from plateau_bench.sweep.session import measure, metrics_url_for, prepare
    from plateau_bench.sweep.tune import render

    async def measured(setting: dict[str, int], run_dir: Path) -> tuple[ResultFile, float | None]:
        own = plan_for(plan, setting, params, start)
        port = free_port()
        base = url or f"http://127.0.0.1:{port}"
        log = out_dir / f"{run_dir.name}.server.log"
        if not quiet:
            print(f"plateau tune: starting the server with {setting} (log {log})", file=sys.stderr)
        async with ServerProcess(render(serve, setting, port), base, log, ready_timeout_s=ready_s) as server:
            target = o.target_spec(base, model, "completions", None, None, "600s")
            prepared = await prepare(target, workload, wait_ready_s=None)
            m_url, required = metrics_url_for(prepared.target, None, False)
            done = await measure(prepared, workload, own, out_dir=run_dir, metrics_url=m_url,
                                 metrics_required=required, observer=_Levels(quiet), progress=lambda: None,
                                 existing="overwrite")
            return done.result, server.ready_s
    return measured


def tune_cmd(  # long: one option per line
    serve: Annotated[str, typer.Option("--serve", help="The server's command with {param} placeholders and {port}, "
                                       "e.g. 'vllm serve M --max-num-seqs {max_num_seqs} --port {port}'.")],
    param: Annotated[list[str], typer.Option("--param", help="name=lo..hi (lo, the powers of two between, hi) or "
                                             "name=a,b,c; repeat for several.")],
    start: Annotated[list[str] | None, typer.Option("--start", help="name=value to measure first (default: the "
                                                    "second value of each grid).")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="Rank by the throughput of the largest load meeting it.")]
    = None,
    candidates: Annotated[int, typer.Option("--candidates", help="How many predicted-best settings to measure.")] = 2,
    brute_force: Annotated[bool, typer.Option("--brute-force", help="Also measure every other setting (a check of "
                                              "the method; costs a restart each).")] = False,
    url: Annotated[str | None, typer.Option("--url", help="Where the server answers (default: 127.0.0.1 on the "
                                            "{port} tune picks).")] = None,
    model: o.Model = None,
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")] = 128,
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")] = 128,
    range_ratio: o.RangeRatio = 0.0,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", help="The sweeps never go above this.")] = 1024,
    concurrency: Annotated[str | None, typer.Option("--concurrency", "-c", help="Sweep this fixed grid at every "
                                                    "setting (default: the adaptive search).")] = None,
    min_level_time: Annotated[str, typer.Option("--min-level-time", help="Shortest steady window.")] = "5s",
    max_level_time: Annotated[str, typer.Option("--max-level-time", help="Longest level of each sweep.")] = "60s",
    drain: o.Drain = True,
    wait_ready: Annotated[str, typer.Option("--wait-ready", help="How long a server may take to start.")] = "10m",
    out: Annotated[Path, typer.Option("--out", help="Directory for the sweeps, server logs and tune.json.")]
    = Path("runs/tune"),
    as_json: o.Json = False,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No line per server start and level.")] = False,
) -> None:
    """Find the best server setting: measure one, calibrate the twin, measure only what it predicts best."""
    from plateau_bench.sweep.tune import check_template, parse_param, run_tune, settings

    params = [parse_param(p) for p in param]
    check_template(serve, params, url is not None)
    if candidates < 0:
        raise ConfigError(f"--candidates must be >= 0 (got {candidates})")
    chosen = {}
    for item in start or []:
        name, _, value = item.partition("=")
        if not value.strip().isdigit():
            raise ConfigError(f"--start {item!r}: write name=value (a positive integer)")
        chosen[name.strip()] = int(value)
    first = {p.name: chosen.get(p.name, p.values[min(1, len(p.values) - 1)]) for p in params}
    workload = WorkloadSpec(input_len=input_len, output_len=output_len, range_ratio=range_ratio,
                            prompt_salt=o.prompt_salt(None))
    workload.validate()
    slos = parse_slo(slo) if slo else []
    grid = tuple(parse_int_list(concurrency, "--concurrency")) if concurrency else None
    plan = ConcurrencyPlan(mode="steady", concurrencies=grid,
                           search=SearchConfig(max_concurrency=max(grid) if grid else max_concurrency),
                           limits=SweepLimits(min_level_s=parse_duration(min_level_time, "--min-level-time"),
                                              max_level_s=parse_duration(max_level_time, "--max-level-time"),
                                              slos=tuple(slos), drain=drain))
    plan.validate()
    out.mkdir(parents=True, exist_ok=True)
    measure = _measurer(serve, url, model, workload, plan, parse_duration(wait_ready, "--wait-ready"), out, params,
                        first, quiet)
    done = run_async(run_tune(params, first, measure, out, workload=workload, slos=slos, candidates=candidates,
                              brute_force=brute_force, serve=serve))
    text = msgspec.json.format(msgspec.json.encode(done), indent=2).decode()
    (out / "tune.json").write_text(text + "\n")
    note_result_dir(out)
    if as_json:
        typer.echo(text)
        return
    print_tune(o.wide_console(), done, len(settings(params)))


def print_tune(console: Console, done: object, grid: int) -> None:
    from plateau_bench.sweep.tune import TuneResult

    assert isinstance(done, TuneResult)
    table = Table(title=f"plateau tune: {done.objective}" + (f" ({', '.join(done.slos)})" if done.slos else ""))
    left = ("setting", "measured because", "predicted from")
    for col in (*left, "predicted tok/s", "measured tok/s", "prediction error"):
        table.add_column(col, justify="left" if col in left else "right")
    for t in done.trials:
        err = t.error
        basis = " + ".join("/".join(str(v) for v in s.values()) for s in t.predicted_from) or "-"
        table.add_row(", ".join(f"{k}={v}" for k, v in t.setting.items()), t.why, basis,
                      f"{t.predicted_tok_s:,.0f}" if t.predicted_tok_s is not None else "-",
                      f"{t.measured_tok_s:,.0f}" if t.measured_tok_s is not None else "-",
                      f"{err:+.1%}" if err is not None else "-")
    console.print(table)
    for note in done.calibration_notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    if done.recommendation is None:
        console.print("No setting was measured successfully.", highlight=False)
        return
    setting = ", ".join(f"{k}={v}" for k, v in done.recommendation.items())
    console.print(f"Recommended: {setting} ({done.recommended_tok_s or 0:,.0f} tok/s measured); {done.restarts} "
                  f"server start(s) against {grid} for the grid", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("tune", cls=ConfiguredCommand)(tune_cmd)
