"""``plateau run``: measure one load level (a burst, a steady closed loop, or an open-loop rate)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.aio import first_interrupt_finishes, interrupted_by, interrupted_exit_code
from plateau_bench.aio import run as run_async
from plateau_bench.commands import options as o
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.errors import ConfigError
from plateau_bench.report.live import LiveView
from plateau_bench.report.terminal import run_report
from plateau_bench.spec import LevelSpec, parse_duration

LEVEL = "Load level"


def level_spec(mode: str | None, concurrency: int | None, num_requests: int | None, duration: str | None,
               rate: float | None, burstiness: float, max_concurrency: int | None, warmup: int) -> LevelSpec:
    duration_s = parse_duration(duration, "--duration") if duration else None
    chosen = mode or ("rate" if rate is not None else "steady" if duration_s else "burst")
    if chosen not in ("burst", "steady", "rate"):
        raise ConfigError(f"--mode must be burst, steady or rate (got {chosen!r})")
    if chosen == "burst" and duration_s is not None:
        raise ConfigError("--mode burst sends --num-requests requests; it cannot take --duration")
    if chosen != "rate" and concurrency is None:
        raise ConfigError("--concurrency is required (or --rate for an open loop)")
    level = LevelSpec(mode=chosen, concurrency=concurrency if chosen != "rate" else None,  # type: ignore[arg-type]
                      num_requests=num_requests, duration_s=duration_s, rate=rate, burstiness=burstiness,
                      max_concurrency=max_concurrency, warmup=warmup)
    level.validate()
    return level


@grouped
def run_cmd(
    target: o.TargetFlags = o.NO_TARGET,
    placement: o.PlacementFlags = o.ANYWHERE,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", help="Closed-loop workers (burst "
                                                    "or steady).", rich_help_panel=LEVEL)] = None,
    num_requests: Annotated[int | None, typer.Option("--num-requests", "-n", help="Requests to send "
                                                     "(burst default: = concurrency).",
                                                     rich_help_panel=LEVEL)] = None,
    duration: Annotated[str | None, typer.Option("--duration", help="Run for this long (steady or rate), "
                                                 "e.g. 60s.", rich_help_panel=LEVEL)] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="Open loop: requests/s (Poisson or gamma).",
                                               rich_help_panel=LEVEL)] = None,
    burstiness: Annotated[float, typer.Option("--burstiness", help="Gamma shape of inter-arrivals "
                                              "(1 = Poisson).", rich_help_panel=LEVEL)] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option("--max-concurrency", help="Open loop: bound on "
                                                        "requests in flight.", rich_help_panel=LEVEL)] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up requests, excluded from all figures.",
                                        rich_help_panel=LEVEL)] = 0,
    mode: Annotated[str | None, typer.Option("--mode", help="burst | steady | rate (default: from the "
                                             "other flags).", rich_help_panel=LEVEL)] = None,
    workload_flags: o.WorkloadFlags = o.DEFAULT_WORKLOAD,
    time_scale: o.TimeScale = 1.0,
    output: o.OutputFlags = o.NO_OUTPUT,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    repeat: o.Repeat = 1,
    twin_flags: o.TwinFlags = o.EMBEDDED,
) -> None:
    """Measure one load level: a burst (num-requests = C), a steady closed loop, or an open-loop rate."""
    from plateau_bench.sweep.plan import check_repeat
    from plateau_bench.sweep.session import measure as measure_level
    from plateau_bench.sweep.session import metrics_url_for, prepare, target_url

    check_repeat(repeat)
    dcgm_urls = target.dcgm_urls()
    load_workers, ray_address, per_node = placement.resolve()
    workload = workload_flags.spec(trace_requests=num_requests)
    out, quiet, as_json = output.out, output.quiet, output.as_json
    if workload.trace is not None:
        if mode not in (None, "rate") or concurrency is not None or rate is not None or duration or warmup:
            raise ConfigError("--trace sets its own schedule: give --time-scale (and --num-requests or "
                              "--max-concurrency), not --mode, --concurrency, --rate, --duration or --warmup")
        level = o.trace_level(workload, time_scale, max_concurrency)
    else:
        level = o.session_level(level_spec(mode, concurrency, num_requests, duration, rate, burstiness,
                                           max_concurrency, warmup), workload)
    o.check_load_size(level.concurrency or level.max_concurrency or 0)
    console = o.wide_console()

    async def main() -> None:
        async with target_url(target.url, twin_flags.preset, twin_flags.sim_speed) as (base_url, twin):
            n = level.total_requests() or max(level.concurrency or 0, level.max_concurrency or 0, 256)
            prepared = await prepare(target.spec(base_url), workload, n + warmup, wait_ready_s=target.wait_ready_s(),
                                     twin=twin, sends=(n + warmup) * repeat if level.total_requests() else None)
            m_url, required = metrics_url_for(prepared.target, target.metrics_url, target.no_metrics)
            with first_interrupt_finishes(lambda line: print(line, file=sys.stderr)) as interrupts, \
                    LiveView(enabled=not quiet and not as_json) as view:
                done = await measure_level(prepared, workload, level, out_dir=out, metrics_url=m_url,
                                           metrics_required=required, observer=view,
                                           progress=lambda: view.progress,
                                           existing="overwrite" if output.overwrite else "refuse",
                                           gpu_metrics_urls=dcgm_urls, workers=load_workers, ray=ray_address,
                                     workers_per_node=per_node, repeat=repeat)
        if out is not None:
            note_result_dir(out)
        if as_json:
            typer.echo(msgspec.json.format(msgspec.json.encode(done.result.levels[0]), indent=2).decode())
        else:
            console.print(run_report(done.result, str(out) if out else None), highlight=False, soft_wrap=True)
        if interrupts.finished_early:   # figures kept, but the level did not run as asked
            print(f"plateau: {interrupted_by()}: the level ended early, its figures cover what it ran",
                  file=sys.stderr)
            raise SystemExit(interrupted_exit_code())
        if any(lv.completed == 0 for lv in done.result.levels):
            raise typer.Exit(1)

    try:
        run_async(main())
    except KeyboardInterrupt:
        _stopped_at_once(out)


def _stopped_at_once(out: Path | None) -> None:
    """A second Ctrl-C or SIGTERM: the level has no figures; what it measured is on disk."""
    kept = f"its finished requests are in {out / 'requests.jsonl'}" if out else "nothing was saved (no --out)"
    if out is not None and (out / "requests.jsonl").exists():
        note_result_dir(out)
    print(f"plateau: {interrupted_by()} before the level finished; {kept}", file=sys.stderr)
    raise SystemExit(interrupted_exit_code()) from None


def register(app: typer.Typer) -> None:
    app.command("run", cls=ConfiguredCommand)(run_cmd)
