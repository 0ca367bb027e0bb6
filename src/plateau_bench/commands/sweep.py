"""``plateau sweep``: push the load until throughput stops growing; find the plateau and the knee; say why."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.aio import Interrupts, first_interrupt_finishes, interrupted_by, interrupted_exit_code
from plateau_bench.aio import run as run_async
from plateau_bench.analysis.plateau import SearchConfig
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands import options as o
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.errors import ConfigError
from plateau_bench.report.live import LiveView
from plateau_bench.report.terminal import sweep_report
from plateau_bench.result import ResultFile
from plateau_bench.spec import parse_duration, parse_float_list, parse_int_list
from plateau_bench.sweep.plan import ConcurrencyPlan, RatePlan, SloSearchPlan, SweepLimits
from plateau_bench.sweep.trace_plan import TracePlan

SEARCH = "Sweep"


def build_plan(concurrency: str | None, mode: str, rate: str | None, burstiness: float, start: int,
               max_concurrency: int, plateau_gain: float, limits: SweepLimits) -> ConcurrencyPlan | RatePlan:
    """The plan the flags describe (a ConfigError naming the flag on bad input)."""
    if rate is not None and mode == "burst":
        raise ConfigError("--mode burst sends C requests at once; it cannot be combined with --rate")
    if rate is not None and concurrency:
        raise ConfigError("--rate sweeps request rates; drop --concurrency (or drop --rate)")
    if mode not in ("steady", "burst"):
        raise ConfigError(f"--mode must be steady or burst (got {mode!r})")
    if start <= 0 or max_concurrency < start:
        raise ConfigError("--start must be >= 1 and <= --max-concurrency")
    plan: ConcurrencyPlan | RatePlan
    if rate is not None:
        rates = None if rate.strip().lower() == "auto" else tuple(parse_float_list(rate, "--rate"))
        plan = RatePlan(rates=rates, throughput_concurrency=min(max_concurrency, 256), burstiness=burstiness,
                        limits=limits)
    else:
        grid = tuple(parse_int_list(concurrency, "--concurrency")) if concurrency else None
        plan = ConcurrencyPlan(mode=mode, concurrencies=grid,  # type: ignore[arg-type]
                               search=SearchConfig(start=start, max_concurrency=max_concurrency,
                                                   plateau_gain=plateau_gain), limits=limits)
    plan.validate()
    return plan


def find_plan(find: str, mode: str, concurrency: str | None, rate: str | None, start: int, max_concurrency: int,
              start_rate: float, max_rate: float, resolution: float, burstiness: float,
              limits: SweepLimits) -> SloSearchPlan:
    """``--find``: the SLO boundary search in closed loop (concurrency) or open loop (rate)."""
    if concurrency or rate is not None:
        raise ConfigError("--find searches the load itself: drop --concurrency and --rate")
    open_loop = find == "max-rate"
    plan = SloSearchPlan(find=find, mode=mode,  # type: ignore[arg-type]
                         start=start_rate if open_loop else float(start),
                         max_load=max_rate if open_loop else float(max_concurrency), resolution=resolution,
                         burstiness=burstiness, limits=limits)
    plan.validate()
    return plan


def trace_plan(trace: Path, time_scale: str, concurrency: str | None, rate: str | None, find: str | None,
               limits: SweepLimits) -> TracePlan:
    """``--trace``: the trace at the given time scales, or doubling from 1 until it stops keeping up."""
    from plateau_bench.workload.trace import load_trace

    if concurrency is not None or rate is not None or find is not None:
        raise ConfigError("--trace sweeps time scales (--time-scale auto or 1,2,4); it cannot take --concurrency, "
                          "--rate or --find")
    if not os.access(trace, os.R_OK):
        raise ConfigError(f"--trace {trace}: cannot read the file")
    loaded = load_trace(trace)
    scales = None if time_scale.strip() == "auto" else tuple(parse_float_list(time_scale, "--time-scale"))
    return TracePlan(rate=loaded.rate(), requests=len(loaded.rows), scales=scales, limits=limits)


def _closed_steady(mode: str, plan: ConcurrencyPlan | RatePlan | SloSearchPlan | TracePlan, find: str | None) -> bool:
    """Whether no level is a burst (a burst of C requests would send only the first turns of --sessions)."""
    return mode != "burst" or isinstance(plan, RatePlan) or find == "max-rate"


def _widest(plan: ConcurrencyPlan | RatePlan | SloSearchPlan | TracePlan) -> int:
    if isinstance(plan, TracePlan):
        return 1024   # an open loop: connections open as the replay needs them
    if isinstance(plan, SloSearchPlan):
        return int(plan.max_load) if not plan.open_loop else 4096
    if isinstance(plan, RatePlan):
        return plan.throughput_concurrency
    return max(plan.concurrencies) if plan.concurrencies else plan.search.max_concurrency


def _check_resume(resume: Path | None, out: Path | None, overwrite: bool,
                  plan: ConcurrencyPlan | RatePlan | SloSearchPlan | TracePlan) -> None:
    if resume is None:
        return
    if isinstance(plan, RatePlan) and plan.rates is None:
        raise ConfigError("--resume continues concurrency sweeps and given rates; an auto rate sweep starts "
                          "afresh")
    if out is not None and Path(out) != Path(resume):
        raise ConfigError("--resume continues in its own directory; drop --out or make it the same")
    if overwrite:
        raise ConfigError("--resume keeps the saved levels; --overwrite replaces them: choose one")


@grouped
def sweep_cmd(
    target: o.TargetFlags = o.NO_TARGET,
    placement: o.PlacementFlags = o.ANYWHERE,
    concurrency: Annotated[str | None, typer.Option("--concurrency", "-c", help="A fixed grid, e.g. "
                                                    "1,16,64,256 (default: adaptive search).",
                                                    rich_help_panel=SEARCH)] = None,
    mode: Annotated[str, typer.Option("--mode", help="steady (closed loop, steady window) | burst "
                                      "(num-requests = C, the classic benchmark).",
                                      rich_help_panel=SEARCH)] = "steady",
    rate: Annotated[str | None, typer.Option("--rate", help="Open-loop sweep instead: 'auto' (synchronous "
                                             "rate to maximum throughput) or rates, e.g. 1,2,5 req/s.",
                                             rich_help_panel=SEARCH)] = None,
    burstiness: Annotated[float, typer.Option("--burstiness", help="Open loop: gamma shape of "
                                              "inter-arrivals (1 = Poisson).", rich_help_panel=SEARCH)] = 1.0,
    start: Annotated[int, typer.Option("--start", help="First concurrency of the search.",
                                       rich_help_panel=SEARCH)] = 1,
    max_concurrency: Annotated[int, typer.Option("--max-concurrency", help="Never go above this.",
                                                 rich_help_panel=SEARCH)] = 4096,
    plateau_gain: Annotated[float, typer.Option("--plateau-gain", help="A doubling that gains less than "
                                                "this (beyond noise) is flat.", rich_help_panel=SEARCH)] = 0.05,
    precision: Annotated[float, typer.Option("--precision", help="Steady levels end when the 95 % CI of "
                                             "tok/s is within this.", rich_help_panel=SEARCH)] = 0.02,
    min_level_time: Annotated[str, typer.Option("--min-level-time", help="Shortest steady window.",
                                                rich_help_panel=SEARCH)] = "5s",
    max_level_time: Annotated[str, typer.Option("--max-level-time", help="Longest level.",
                                                rich_help_panel=SEARCH)] = "60s",
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up requests per level.",
                                        rich_help_panel=SEARCH)] = 0,
    drain: o.Drain = True,
    slo: Annotated[str | None, typer.Option("--slo", help="Stop when violated, e.g. ttft_p99=2s,"
                                            "tpot_p99=100ms.", rich_help_panel=SEARCH)] = None,
    budget: Annotated[str | None, typer.Option("--budget", help="Stop before spending more, e.g. 10m.",
                                               rich_help_panel=SEARCH)] = None,
    max_error_rate: Annotated[float, typer.Option("--max-error-rate", help="Stop when a level's failed "
                                                  "share exceeds this.", rich_help_panel=SEARCH)] = 0.2,
    find: Annotated[str | None, typer.Option("--find", help="max-concurrency | max-rate: search the largest "
                                             "load meeting every --slo (bisection), instead of the plateau.",
                                             rich_help_panel=SEARCH)] = None,
    resolution: Annotated[float, typer.Option("--resolution", help="--find: stop when the bracket is this close "
                                              "(relative).", rich_help_panel=SEARCH)] = 0.05,
    start_rate: Annotated[float, typer.Option("--start-rate", help="--find max-rate: first rate (req/s).",
                                              rich_help_panel=SEARCH)] = 1.0,
    max_rate: Annotated[float, typer.Option("--max-rate", help="--find max-rate: never above this (req/s).",
                                            rich_help_panel=SEARCH)] = 10_000.0,
    resume: Annotated[Path | None, typer.Option("--resume", help="Continue a sweep saved in this "
                                                "directory (failed or damaged levels are measured again).",
                                                rich_help_panel=SEARCH)] = None,
    workload_flags: o.WorkloadFlags = o.DEFAULT_WORKLOAD,
    time_scale: Annotated[str, typer.Option("--time-scale", help="--trace: the time scales to replay it at "
                                            "(comma list; 2 = twice as fast), or auto: 1, 2, 4, ... until it stops "
                                            "keeping up.", rich_help_panel=o.WORKLOAD)] = "auto",
    output: o.OutputFlags = o.NO_OUTPUT,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
    repeat: o.Repeat = 1,
    twin_flags: o.TwinFlags = o.EMBEDDED,
    hardware: r.RooflineFlags = r.NO_ROOFLINE,
) -> None:
    """Push the load until throughput stops growing; find the plateau and the knee; say why."""
    from plateau_bench.sweep.session import measure, metrics_url_for, out_dir_or_temp, prepare, target_url

    limits = SweepLimits(precision=precision, min_level_s=parse_duration(min_level_time, "--min-level-time"),
                         max_level_s=parse_duration(max_level_time, "--max-level-time"), warmup=warmup,
                         slos=tuple(parse_slo(slo)) if slo else (),
                         budget_s=parse_duration(budget, "--budget") if budget else None,
                         max_error_rate=max_error_rate, repeat=repeat, burstiness=burstiness, drain=drain)
    trace = workload_flags.trace
    plan = (trace_plan(trace, time_scale, concurrency, rate, find, limits) if trace is not None
            else find_plan(find, mode, concurrency, rate, start, max_concurrency, start_rate, max_rate, resolution,
                           burstiness, limits) if find is not None
            else build_plan(concurrency, mode, rate, burstiness, start, max_concurrency, plateau_gain, limits))
    out, as_json = output.out, output.as_json
    _check_resume(resume, out, output.overwrite, plan)
    dcgm_urls = target.dcgm_urls()
    workload = workload_flags.spec(closed_loop=_closed_steady(mode, plan, find), resume=resume)
    ceiling = hardware.ceiling(input_len=workload.input_len, output_len=workload.output_len)
    load_workers, ray_address, per_node = placement.resolve()
    o.check_load_size(_widest(plan))
    out_dir = resume or out_dir_or_temp(out, "sweep")
    console = o.wide_console()

    async def main() -> int:
        async with target_url(target.url, twin_flags.preset, twin_flags.sim_speed) as (base_url, twin):
            prepared = await prepare(target.spec(base_url), workload, wait_ready_s=target.wait_ready_s(), twin=twin)
            m_url, required = metrics_url_for(prepared.target, target.metrics_url, target.no_metrics)
            planned = len(plan.concurrencies or ()) if isinstance(plan, ConcurrencyPlan) else 8
            with first_interrupt_finishes(lambda line: print(line, file=sys.stderr)) as interrupts, \
                    LiveView(enabled=not output.quiet and not as_json, est_levels=planned or 12) as view:
                done = await measure(prepared, workload, plan, out_dir=out_dir, metrics_url=m_url,
                                     metrics_required=required, observer=view, progress=lambda: view.progress,
                                     existing="resume" if resume else "overwrite" if output.overwrite or out is None
                                     else "refuse", gpu_metrics_urls=dcgm_urls, roofline=ceiling,
                                     workers=load_workers, ray=ray_address, workers_per_node=per_node)
        note_result_dir(out_dir)
        if as_json:
            data = msgspec.to_builtins(done.result)
            data["out"] = str(out_dir)
            typer.echo(msgspec.json.format(msgspec.json.encode(data), indent=2).decode())
        else:
            console.print(sweep_report(done.result, str(out_dir)), highlight=False, soft_wrap=True)
        return _exit_code(done.result, out_dir, interrupts)

    try:
        code = run_async(main())
    except KeyboardInterrupt:
        if (out_dir / "result.json").exists():
            note_result_dir(out_dir)
        print(f"plateau: {interrupted_by()}; finished levels are saved in {out_dir} "
              f"(continue with --resume {out_dir})", file=sys.stderr)
        raise SystemExit(interrupted_exit_code()) from None
    if code:
        raise typer.Exit(code)


def _exit_code(result: ResultFile, out_dir: Path, interrupts: Interrupts) -> int:
    """The sweep's exit status, its last line said on stderr where it ended early."""
    if interrupts.finished_early:
        print(f"plateau: {interrupted_by()}: the sweep stopped after the level it ended early; its levels are "
              f"saved in {out_dir} (continue with --resume {out_dir})", file=sys.stderr)
        return interrupted_exit_code()
    last = result.levels[-1] if result.levels else None
    if last is not None and last.level_failed and last.dominant_error == "connect":
        print(f"plateau: the target stopped answering during {last.label}; finished levels are saved in "
              f"{out_dir} (continue with --resume {out_dir})", file=sys.stderr)
        return 1
    return 1 if any(lv.completed == 0 for lv in result.levels) else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", cls=ConfiguredCommand)(sweep_cmd)
