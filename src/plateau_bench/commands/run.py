"""``plateau run``: measure one load level (a burst, a steady closed loop, or an open-loop rate)."""

from __future__ import annotations

import sys

import msgspec
import typer

from plateau_bench.aio import interrupted_by, interrupted_exit_code
from plateau_bench.commands import options as o
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.load_flags import ONE_LEVEL, LevelFlags
from plateau_bench.commands.measuring import build_job, measure
from plateau_bench.report.terminal import run_report
from plateau_bench.sweep.build import one_level
from plateau_bench.sweep.job import JobOutcome


@grouped
def run_cmd(
    target: o.TargetFlags = o.NO_TARGET,
    placement: o.PlacementFlags = o.ANYWHERE,
    load: LevelFlags = ONE_LEVEL,
    workload_flags: o.WorkloadFlags = o.DEFAULT_WORKLOAD,
    output: o.OutputFlags = o.NO_OUTPUT,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    repeat: o.Repeat = 1,
    twin_flags: o.TwinFlags = o.EMBEDDED,
) -> None:
    """Measure one load level: a burst (num-requests = C), a steady closed loop, or an open-loop rate."""
    workload = workload_flags.spec(trace_requests=load.num_requests)
    plan = one_level(load.ask(), workload, repeat)
    out = output.out
    job = build_job(target, twin_flags, placement, workload, plan, out_dir=out,
                    existing="overwrite" if output.overwrite else "refuse")
    kept = f"its finished requests are in {out / 'requests.jsonl'}" if out else "nothing was saved (no --out)"
    done = measure(job, output, stopped=f" before the level finished; {kept}")
    if out is not None:
        note_result_dir(out)
    _render(done, output)
    if done.finished_early:   # figures kept, but the level did not run as asked
        print(f"plateau: {interrupted_by()}: the level ended early, its figures cover what it ran", file=sys.stderr)
        raise SystemExit(interrupted_exit_code())
    if any(lv.completed == 0 for lv in done.result.levels):
        raise typer.Exit(1)


def _render(done: JobOutcome, output: o.OutputFlags) -> None:
    if output.as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(done.result.levels[0]), indent=2).decode())
    else:
        o.wide_console().print(run_report(done.result, str(output.out) if output.out else None), highlight=False,
                               soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("run", cls=ConfiguredCommand)(run_cmd)
