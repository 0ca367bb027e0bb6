"""``plateau sweep``: push the load until throughput stops growing; find the plateau and the knee; say why."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import msgspec
import typer

from plateau_bench.aio import interrupted_by, interrupted_exit_code
from plateau_bench.commands import options as o
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.load_flags import SEARCH_DEFAULTS, STOP_DEFAULTS, SearchFlags, StopRuleFlags
from plateau_bench.commands.measuring import build_job, measure
from plateau_bench.report.terminal import sweep_report
from plateau_bench.result import ResultFile, ended_by_interrupt
from plateau_bench.store import Existing
from plateau_bench.sweep.build import check_resume, sweep_plan
from plateau_bench.sweep.job import JobOutcome


@grouped
def sweep_cmd(
    target: o.TargetFlags = o.NO_TARGET,
    placement: o.PlacementFlags = o.ANYWHERE,
    search: SearchFlags = SEARCH_DEFAULTS,
    stop: StopRuleFlags = STOP_DEFAULTS,
    workload_flags: o.WorkloadFlags = o.DEFAULT_WORKLOAD,
    output: o.OutputFlags = o.NO_OUTPUT,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    repeat: o.Repeat = 1,
    twin_flags: o.TwinFlags = o.EMBEDDED,
    hardware: r.RooflineFlags = r.NO_ROOFLINE,
) -> None:
    """Push the load until throughput stops growing; find the plateau and the knee; say why."""
    from plateau_bench.sweep.session import out_dir_or_temp

    limits = stop.limits(repeat=repeat, burstiness=search.burstiness)
    plan = sweep_plan(search.ask(), limits, workload_flags.trace)
    resume, out = search.resume, output.out
    check_resume(plan, resume, out, output.overwrite)
    workload = workload_flags.spec(closed_loop=plan.closed_steady(), resume=resume)
    ceiling = hardware.ceiling(input_len=workload.input_len, output_len=workload.output_len)
    existing: Existing = "resume" if resume else "overwrite" if output.overwrite or out is None else "refuse"
    job = build_job(target, twin_flags, placement, workload, plan, out_dir=out, existing=existing, roofline=ceiling)
    out_dir = resume or out_dir_or_temp(out, "sweep")   # made once every flag is known good
    job = dataclasses.replace(job, out_dir=out_dir)
    done = measure(job, output, stopped=f"; finished levels are saved in {out_dir} (continue with --resume "
                                        f"{out_dir})")
    note_result_dir(out_dir)
    _render(done, output)
    code = _exit_code(done.result, out_dir, done.finished_early)
    if code:
        raise typer.Exit(code)


def _render(done: JobOutcome, output: o.OutputFlags) -> None:
    if output.as_json:
        data = msgspec.to_builtins(done.result)
        data["out"] = str(done.out_dir)
        typer.echo(msgspec.json.format(msgspec.json.encode(data), indent=2).decode())
    else:
        o.wide_console().print(sweep_report(done.result, str(done.out_dir)), highlight=False, soft_wrap=True)


def _exit_code(result: ResultFile, out_dir: Path, finished_early: bool) -> int:
    """The sweep's exit status, its last line said on stderr where it ended early."""
    last = result.levels[-1] if result.levels else None
    if finished_early:
        where = ("the sweep stopped after the level it ended early" if last is not None and ended_by_interrupt(last)
                 else "the sweep stopped in a level that had not measured a window yet (not kept)")
        print(f"plateau: {interrupted_by()}: {where}; its levels are saved in {out_dir} (continue with --resume "
              f"{out_dir})", file=sys.stderr)
        return interrupted_exit_code()
    if last is not None and last.level_failed and last.dominant_error == "connect":
        print(f"plateau: the target stopped answering during {last.label}; finished levels are saved in "
              f"{out_dir} (continue with --resume {out_dir})", file=sys.stderr)
        return 1
    return 1 if any(lv.completed == 0 for lv in result.levels) else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", cls=ConfiguredCommand)(sweep_cmd)
