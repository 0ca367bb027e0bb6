"""``plateau presets``, ``plateau sim`` (what-if in virtual time) and ``plateau serve-sim``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from plateau_bench.aio import run as run_async
from plateau_bench.commands import options as o
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.engine_flags import AS_PRESET, TwinEngineFlags
from plateau_bench.commands.groups import OptionGroup, grouped
from plateau_bench.commands.load_flags import Duration, NumRequests
from plateau_bench.errors import ConfigError
from plateau_bench.report.engines import presets_table
from plateau_bench.report.repeats import repeat_table
from plateau_bench.report.terminal import seed_line
from plateau_bench.result import EngineSummary, LevelResult, RunSpec, SimSpec
from plateau_bench.spec import LevelSpec, WorkloadSpec, parse_duration, parse_float_list, parse_int_list

if TYPE_CHECKING:
    from plateau_bench.sim.embed import ServeOptions

ENGINE = "Engine overrides"


class _PrintLevels:
    """Prints each simulated level as it finishes (the sweep observer protocol)."""

    def level_started(self, level: LevelSpec, phase: str) -> None:
        pass

    def level_finished(self, level: LevelResult) -> None:
        typer.echo(seed_line(level))
LOAD = "Load"


class Derived(r.HardwareFlags, frozen=True, kw_only=True):
    """``--model CONFIG`` and its hardware: the twin from first principles (``sim.from_roofline``)."""

    model: r.ModelConfig = None
    efficiency: r.Efficiency = None
    efficiency_from: r.EfficiencyFrom = None

    tpot_at_1: r.TpotAt1 = None

    def engine(self, preset: str | None, input_len: int = 128, output_len: int = 128) -> tuple[Any, str] | None:
        """The derived engine and a line saying how, or None without ``--model``."""
        from plateau_bench.sim.from_roofline import engine_from_roofline

        rf = r.roofline_given(self.model, self.gpu, self.gpu_spec, self.gpus, self.tp, self.ep, self.dtype,
                              self.kv_dtype, self.interconnect, input_len=input_len, output_len=output_len,
                              flag="--model")
        given = [flag for flag, value in (("--efficiency", self.efficiency), ("--efficiency-from",
                                          self.efficiency_from), ("--tpot-at-1", self.tpot_at_1)) if value is not None]
        if rf is None:
            if given:
                raise ConfigError(f"{given[0]} sets the twin --model CONFIG derives: give --model too")
            return None
        if preset is not None:
            raise ConfigError("--model derives the engine from first principles; --preset names a calibrated "
                              "one: choose one")
        if len(given) > 1:
            raise ConfigError(f"{given[0]} and {given[1]} both set the efficiency: choose one")
        efficiency, overhead, how = self._efficiency(rf, input_len, output_len)
        config = engine_from_roofline(rf, efficiency, overhead)
        return config, f"{config.name}, {how}: {config.step.describe()}"

    def _efficiency(self, rf: Any, input_len: int, output_len: int) -> tuple[Any, float | None, str]:
        """(efficiency, step overhead or None for the roofline's, how it was obtained)."""
        from plateau_bench.roofline import measured_efficiency
        from plateau_bench.roofline.efficiency import measured_by
        from plateau_bench.roofline.resource_fit import fit_resources
        from plateau_bench.spec import parse_duration

        if self.efficiency is not None:
            return self.efficiency, None, f"efficiency {self.efficiency:.2f}"
        base = measured_efficiency()
        if self.tpot_at_1 is not None:
            tpot = parse_duration(self.tpot_at_1, "--tpot-at-1")
            fit = fit_resources(rf, [(1.0, tpot, input_len + output_len / 2.0)], base)
            return fit.efficiency, fit.step_overhead_s, f"{fit.describe()}, from a single stream's TPOT of " \
                f"{tpot * 1e3:.2f} ms"
        if self.efficiency_from is not None:
            from plateau_bench.analysis.roofline_place import decode_points
            from plateau_bench.store import load_result

            points, used = decode_points(load_result(self.efficiency_from).levels, rf)
            fit = fit_resources(rf, points, base)
            worst = max(abs(e) for e in fit.residuals) * 1e3
            return fit.efficiency, fit.step_overhead_s, (
                f"{fit.describe()}, step overhead {fit.step_overhead_s * 1e3:.2f} ms, from the decode steps of "
                f"{len(used)} level(s) in {self.efficiency_from} (largest residual {worst:.2f} ms)")
        return base, None, (f"efficiency {base.memory:.2f} memory, {base.compute:.2f} compute, "
                            f"{base.interconnect:.2f} interconnect (the defaults, {measured_by()})")


NO_TWIN = Derived()   # the grouped commands' default for the group (``groups.grouped`` fills it)


def presets_cmd(
    details: Annotated[bool, typer.Option("--details", help="Also print where each preset's numbers "
                                          "come from.")] = False,
) -> None:
    """List the simulated-engine presets and their key parameters."""
    from plateau_bench.sim.presets import list_presets, preset_summary

    presets = list_presets()
    console = o.wide_console()
    console.print(presets_table([preset_summary(p) for p in presets]))
    if details:
        for p in presets:
            console.print(f"[bold]{p.name}[/bold]: {p.description}\n")
    else:
        console.print("Where the numbers come from: plateau presets --details")


def trace_levels(workload: WorkloadSpec, time_scale: str) -> list[LevelSpec]:
    """``--trace``: one open-loop level per time scale, each replaying the whole trace."""
    from plateau_bench.workload.trace import load_trace

    assert workload.trace is not None
    loaded = load_trace(workload.trace, limit=workload.trace_requests)
    levels = [LevelSpec(mode="rate", rate=loaded.rate(s), num_requests=len(loaded.rows), time_scale=s)
              for s in parse_float_list(time_scale, "--time-scale")]
    for level in levels:
        level.validate()
    return levels


class SimWorkloadFlags(o.LengthFlags, frozen=True, kw_only=True):
    """What each simulated request asks: lengths, shared prefixes, or a trace's rows."""

    prefix_groups: o.PrefixGroups = 0
    prefix_len: o.PrefixLen = 0
    trace: o.Trace = None
    seed: o.Seed = 0

    def spec(self, trace_requests: int | None) -> WorkloadSpec:
        return o.workload_spec(self.input_len, self.output_len, self.range_ratio, None, self.seed, None,
                               self.length_convention, self.prefix_groups, self.prefix_len, trace=self.trace,
                               trace_requests=trace_requests)


class SimLoadFlags(OptionGroup, frozen=True, kw_only=True):
    """The levels simulated: bursts or steady windows at given concurrencies, or a trace's time scales."""

    mode: Annotated[str, typer.Option("--mode", help="burst | steady", rich_help_panel=LOAD)] = "burst"
    concurrency: Annotated[str, typer.Option("--concurrency", "-c", help="Comma list of concurrency levels.",
                                             rich_help_panel=LOAD)] = "1,8,32,128"
    num_requests: NumRequests = None
    duration: Duration = None
    time_scale: Annotated[str, typer.Option("--time-scale", help="--trace: the time scales to replay it at "
                                            "(comma list; 2 = twice as fast).", rich_help_panel=LOAD)] = "1"

    def sim_spec(self, preset: str, overrides: dict[str, Any], engine: EngineSummary) -> SimSpec:
        if self.mode not in ("burst", "steady"):
            raise ConfigError(f"--mode must be burst or steady (got {self.mode!r})")
        duration_s = parse_duration(self.duration, "--duration") if self.duration else (
            60.0 if self.mode == "steady" else None)
        return SimSpec(preset=preset, mode=self.mode, overrides=overrides, engine=engine,
                       concurrency=parse_int_list(self.concurrency, "--concurrency"), num_requests=self.num_requests,
                       duration_s=duration_s)

    def levels(self, sim: SimSpec, workload: WorkloadSpec) -> list[LevelSpec]:
        if workload.trace is not None:
            return trace_levels(workload, self.time_scale)
        return [LevelSpec(mode=sim.mode, concurrency=c, num_requests=sim.num_requests,  # type: ignore[arg-type]
                          duration_s=sim.duration_s) for c in sim.concurrency]


SIM_LOAD, SIM_WORKLOAD = SimLoadFlags(), SimWorkloadFlags()


@grouped
def sim_cmd(
    preset: o.Preset = None,
    load: SimLoadFlags = SIM_LOAD,
    lengths: SimWorkloadFlags = SIM_WORKLOAD,
    out: o.Out = None,
    overwrite: o.Overwrite = False,
    chunks: Annotated[bool, typer.Option("--chunks", help="Record every token's time (slower, "
                                         "exact ITL).")] = False,
    engine: TwinEngineFlags = AS_PRESET,
    twin: Derived = NO_TWIN,
    repeat: o.Repeat = 1,
    config_file: o.ConfigFile = None,
    print_config: o.PrintConfig = False,
) -> None:
    """Simulate load levels in virtual time (no GPU, no model): what if the cap were N?"""
    from plateau_bench.sim.presets import get_preset, preset_summary
    from plateau_bench.sweep.plan import check_repeat
    from plateau_bench.sweep.session import simulate

    workload = lengths.spec(trace_requests=load.num_requests)
    check_repeat(repeat)
    derived = twin.engine(preset, workload.input_len, workload.output_len)
    base = derived[0] if derived is not None else get_preset(preset or "tiny")
    config = engine.configure(base)
    name = config.name if derived else preset or "tiny"
    overrides = config.overrides_from(base)
    sim = load.sim_spec(name, overrides, preset_summary(config))
    levels = load.levels(sim, workload)
    label = f"simulated engine: {derived[1]}" if derived else f"simulated engine: preset {name}"
    typer.echo(f"{label}{f' with {overrides}' if overrides else ''} (virtual time)")
    done = run_async(simulate(config, workload, levels, RunSpec(workload=workload, sim=sim, repeat=repeat),
                              out_dir=out, chunks=chunks, observer=_PrintLevels(),
                              existing="overwrite" if overwrite else "refuse", repeat=repeat))
    if repeat > 1:
        o.wide_console().print(repeat_table(done.result.levels))
    if out is not None:
        note_result_dir(out)
        typer.echo(f"results: {out}")


class ServeFlags(OptionGroup, frozen=True, kw_only=True):
    """How the simulated server listens, and how it misbehaves on purpose (``serve-sim``)."""

    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1"
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")] = 8000
    speed: Annotated[float, typer.Option("--speed", help="Run the engine clock this many times faster "
                                         "than real time.")] = 1.0
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Serve no /metrics (404).")] = False
    reject_when_waiting: Annotated[int | None, typer.Option(
        "--reject-when-waiting", help="Answer new requests with --reject-status while more than N "
        "wait.")] = None
    reject_status: Annotated[int, typer.Option("--reject-status", help="429 or 503.")] = 429
    faults: Annotated[str | None, typer.Option(
        "--faults", help="Fail requests on purpose, with per-request probabilities: hang, truncate, "
        "reset, malformed, http_500, http_429, slow_headers (e.g. hang=0.1,http_429=0.05); "
        "slow_headers_s= and retry_after_s= set the delay and the Retry-After seconds.")] = None
    faults_seed: Annotated[int, typer.Option("--faults-seed", help="Same seed, same faults for the "
                                             "n-th request.")] = 0
    backlog: Annotated[int, typer.Option("--backlog", help="Listen backlog: new connections the kernel holds "
                                         "before they are accepted (capped by net.core.somaxconn); a burst of "
                                         "more overflows it and waits on SYN retries.")] = 4096
    tokenizer: o.Tokenizer = None   # prompts counted with it, as a server counts them (default: one word, one token)

    def options(self) -> ServeOptions:
        """The validated serving options."""
        from plateau_bench.sim.embed import ServeOptions
        from plateau_bench.sim.faults import parse_faults

        if self.speed <= 0:
            raise ConfigError(f"--speed must be > 0 (got {self.speed})")
        if self.reject_status not in (429, 503):
            raise ConfigError(f"--reject-status must be 429 or 503 (got {self.reject_status})")
        if self.reject_when_waiting is not None and self.reject_when_waiting < 0:
            raise ConfigError(f"--reject-when-waiting must be >= 0 (got {self.reject_when_waiting})")
        options = ServeOptions(speed=self.speed, metrics=not self.no_metrics,
                               reject_when_waiting=self.reject_when_waiting, reject_status=self.reject_status,
                               faults=parse_faults(self.faults) if self.faults else None,
                               faults_seed=self.faults_seed, backlog=self.backlog, tokenizer=self.tokenizer)
        options.validate()
        return options


SERVE_DEFAULTS = ServeFlags()


@grouped
def serve_sim_cmd(
    preset: o.Preset = None,
    serving: ServeFlags = SERVE_DEFAULTS,
    engine: TwinEngineFlags = AS_PRESET,
    twin: Derived = NO_TWIN,
) -> None:
    """Serve the simulated engine as an OpenAI-compatible server with vLLM's /metrics."""
    from plateau_bench.sim.embed import serve_forever
    from plateau_bench.sim.presets import get_preset

    options = serving.options()
    derived = twin.engine(preset)
    config = engine.configure(derived[0] if derived is not None else get_preset(preset or "tiny"))
    if derived:
        typer.echo(f"plateau serve-sim: engine {derived[1]}", err=True)
    name = config.name if derived else preset or "tiny"

    def ready(bound: int) -> None:
        faults = options.faults
        injected = f", faults {faults.spec()} (seed {options.faults_seed})" if faults and faults.any else ""
        caching = ("" if config.prefix_caching else ", prefix caching off") + (
            ", KV reserved at full length" if config.reserve_kv else "")
        typer.echo(f"plateau serve-sim: preset {name} (model {config.model_name!r}) on http://{serving.host}:{bound}, "
                   f"speed x{serving.speed:g}{injected}{caching}; Ctrl-C to stop", err=True)

    run_async(serve_forever(config, options, host=serving.host, port=serving.port, on_ready=ready))


def register(app: typer.Typer) -> None:
    app.command("presets")(presets_cmd)
    app.command("sim", cls=ConfiguredCommand)(sim_cmd)
    app.command("serve-sim")(serve_sim_cmd)
