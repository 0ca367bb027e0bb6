"""``plateau presets``, ``plateau sim`` (what-if in virtual time) and ``plateau serve-sim``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer
from rich.table import Table

from plateau_bench.aio import run as run_async
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.config_file import ConfiguredCommand, note_result_dir
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.options import ConfigFile, Overwrite, PrintConfig, Repeat, wide_console, workload_spec
from plateau_bench.errors import ConfigError
from plateau_bench.report.repeats import repeat_table
from plateau_bench.report.terminal import seed_line
from plateau_bench.result import EngineSummary, LevelResult, RunSpec, SimSpec
from plateau_bench.sim.replicas import parse_balancer
from plateau_bench.spec import LevelSpec, WorkloadSpec, parse_duration, parse_float_list, parse_int_list

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

    def engine(self, preset: str | None, input_len: int = 128, output_len: int = 128) -> tuple[Any, str] | None:
        """The derived engine and a line saying how, or None without ``--model``."""
        from plateau_bench.roofline import Efficiency, measured_efficiency
        from plateau_bench.roofline.efficiency import measured_by
        from plateau_bench.sim.from_roofline import engine_from_roofline

        rf = r.roofline_given(self.model, self.gpu, self.gpu_spec, self.gpus, self.tp, self.ep, self.dtype,
                              self.kv_dtype, self.interconnect, input_len=input_len, output_len=output_len,
                              flag="--model")
        if rf is None:
            if self.efficiency is not None or self.efficiency_from is not None:
                raise ConfigError("--efficiency and --efficiency-from set the twin --model CONFIG derives: "
                                  "give --model too")
            return None
        if preset is not None:
            raise ConfigError("--model derives the engine from first principles; --preset names a calibrated "
                              "one: choose one")
        if self.efficiency is not None and self.efficiency_from is not None:
            raise ConfigError("--efficiency sets the factor, --efficiency-from measures it: choose one")
        efficiency: float | Efficiency
        if self.efficiency is not None:
            efficiency, how = self.efficiency, f"efficiency {self.efficiency:.2f}"
        else:
            efficiency = measured_efficiency()
            how = (f"efficiency {efficiency.memory:.2f} memory, {efficiency.compute:.2f} compute, "
                   f"{efficiency.interconnect:.2f} interconnect (the defaults, {measured_by()})")
        overhead = None
        if self.efficiency_from is not None:
            from plateau_bench.analysis.roofline_place import calibrate_from_levels
            from plateau_bench.store import load_result

            fit, used = calibrate_from_levels(load_result(self.efficiency_from).levels, rf)
            efficiency, overhead = fit.efficiency, fit.step_overhead_s
            worst = max(abs(e) for e in fit.residuals) * 1e3
            how = (f"efficiency {efficiency:.2f} and step overhead {overhead * 1e3:.2f} ms fitted to the decode "
                   f"steps of {len(used)} level(s) in {self.efficiency_from} (largest residual {worst:.2f} ms)")
        config = engine_from_roofline(rf, efficiency, overhead)
        return config, f"{config.name}, {how}: {config.step.describe()}"


NO_TWIN = Derived()   # the grouped commands' default for the group (``groups.grouped`` fills it)


def _configure(preset: str | None, max_num_seqs: int | None, kv_tokens: int | None,
               max_num_batched_tokens: int | None, max_model_len: int | None = None,
               t0_ms: float | None = None, a_ms: float | None = None, b_ms: float | None = None,
               c_us: float | None = None, derived: tuple[Any, str] | None = None, replicas: int | None = None,
               balancer: str | None = None) -> tuple[Any, Any]:
    from plateau_bench.sim.presets import get_preset

    base = derived[0] if derived is not None else get_preset(preset or "tiny")
    config = base.with_overrides(
        max_num_seqs=max_num_seqs, kv_tokens=kv_tokens, max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len, t0_ms=t0_ms, a_ms=a_ms, b_ms=b_ms, c_us=c_us, replicas=replicas,
        balancer=parse_balancer(balancer) if balancer is not None else None)
    return base, config


MaxNumSeqs = Annotated[int | None, typer.Option("--max-num-seqs", help="Admission cap (running requests).",
                                                rich_help_panel=ENGINE)]
KvTokens = Annotated[int | None, typer.Option("--kv-tokens", help="KV-cache capacity in tokens.",
                                              rich_help_panel=ENGINE)]
BatchedTokens = Annotated[int | None, typer.Option("--max-num-batched-tokens", help="Per-step token budget.",
                                                   rich_help_panel=ENGINE)]
Replicas = Annotated[int | None, typer.Option("--replicas", help="Data-parallel copies of the engine behind a "
                                             "load balancer (default 1).", rich_help_panel=ENGINE)]
BalancerOpt = Annotated[str | None, typer.Option("--balancer", help="--replicas: round-robin | least-outstanding "
                                                 "(default round-robin).", rich_help_panel=ENGINE)]
Preset = Annotated[str | None, typer.Option("--preset", help="Engine preset (see `plateau presets`; default "
                                                              "tiny).")]


def presets_cmd(
    details: Annotated[bool, typer.Option("--details", help="Also print where each preset's numbers "
                                          "come from.")] = False,
) -> None:
    """List the simulated-engine presets and their key parameters."""
    from plateau_bench.sim.presets import list_presets

    table = Table(title="Simulated engine presets (step time t = t0 + a*seqs + b*prefill + c*KV read)")
    for col in ("preset", "policy", "max seqs", "token budget", "KV tokens", "t0 ms", "a us/seq",
                "b us/token", "c ns/KV token"):
        table.add_column(col, justify="left" if col in ("preset", "policy") else "right")
    presets = list_presets()
    for p in presets:
        s = p.step
        table.add_row(p.name, p.policy, f"{p.max_num_seqs:,}", f"{p.max_num_batched_tokens:,}",
                      f"{p.kv_tokens:,}", f"{s.t0 * 1e3:.3g}", f"{s.a * 1e6:.3g}", f"{s.b * 1e6:.3g}",
                      f"{s.c * 1e9:.3g}")
    console = wide_console()
    console.print(table)
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


@grouped
def sim_cmd(
    preset: Preset = None,
    mode: Annotated[str, typer.Option("--mode", help="burst | steady", rich_help_panel=LOAD)] = "burst",
    concurrency: Annotated[str, typer.Option("--concurrency", "-c", help="Comma list of concurrency "
                                             "levels.", rich_help_panel=LOAD)] = "1,8,32,128",
    num_requests: Annotated[int | None, typer.Option("--num-requests", "-n", help="Requests per level "
                                                     "(burst default: = concurrency).",
                                                     rich_help_panel=LOAD)] = None,
    duration: Annotated[str | None, typer.Option("--duration", help="Steady: virtual time per level "
                                                 "(default 60s).", rich_help_panel=LOAD)] = None,
    input_len: Annotated[str, typer.Option("--input-len", help="Prompt tokens per request: N, uniform:lo,hi, "
                                           "normal:mean,sd, lognormal:mean,sd or file:PATH.")] = "128",
    output_len: Annotated[str, typer.Option("--output-len", help="Output tokens per request (same forms as "
                                            "--input-len).")] = "128",
    range_ratio: Annotated[float, typer.Option("--range-ratio", help="Spread plain lengths: len*(1±r), or as "
                                               "--length-convention says.")] = 0.0,
    length_convention: Annotated[str, typer.Option("--length-convention", help="plateau | vllm | sglang: how "
                                                   "--range-ratio spreads lengths.")] = "plateau",
    trace: Annotated[Path | None, typer.Option("--trace", help="Replay a trace (Azure CSV, Mooncake JSONL, plain "
                                               "JSONL/CSV) at its times and lengths; --concurrency is ignored.")
                     ] = None,
    time_scale: Annotated[str, typer.Option("--time-scale", help="--trace: the time scales to replay it at "
                                            "(comma list; 2 = twice as fast).")] = "1",
    prefix_groups: Annotated[int, typer.Option("--prefix-groups", help="Shared prefixes: G system prompts; each "
                                               "request starts with one (needs --prefix-len).")] = 0,
    prefix_len: Annotated[int, typer.Option("--prefix-len", help="Tokens of each shared prefix, before each "
                                            "request's own --input-len.")] = 0,
    no_prefix_cache: Annotated[bool, typer.Option("--no-prefix-cache", help="Turn off prefix caching (on by "
                                                  "default, as in vLLM).", rich_help_panel=ENGINE)] = False,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same lengths.")] = 0,
    out: Annotated[Path | None, typer.Option("--out", help="Result directory.")] = None,
    overwrite: Overwrite = False,
    chunks: Annotated[bool, typer.Option("--chunks", help="Record every token's time (slower, "
                                         "exact ITL).")] = False,
    max_num_seqs: MaxNumSeqs = None,
    kv_tokens: KvTokens = None,
    max_num_batched_tokens: BatchedTokens = None,
    replicas: Replicas = None,
    balancer: BalancerOpt = None,
    twin: Derived = NO_TWIN,
    repeat: Repeat = 1,
    config_file: ConfigFile = None,
    print_config: PrintConfig = False,
) -> None:
    """Simulate load levels in virtual time (no GPU, no model): what if the cap were N?"""
    from plateau_bench.sim.presets import preset_summary
    from plateau_bench.sweep.plan import check_repeat
    from plateau_bench.sweep.session import simulate

    if mode not in ("burst", "steady"):
        raise ConfigError(f"--mode must be burst or steady (got {mode!r})")
    workload = workload_spec(input_len, output_len, range_ratio, None, seed, None, length_convention, prefix_groups,
                             prefix_len, trace=trace, trace_requests=num_requests)
    check_repeat(repeat)
    derived = twin.engine(preset, workload.input_len, workload.output_len)
    base, config = _configure(preset, max_num_seqs, kv_tokens, max_num_batched_tokens, derived=derived,
                              replicas=replicas, balancer=balancer)
    if no_prefix_cache:
        config = msgspec.structs.replace(config, prefix_caching=False)
    preset = config.name if derived else preset or "tiny"
    if config.max_num_seqs == 0:
        raise ConfigError("--max-num-seqs 0 admits no request; use at least 1")
    levels_c = parse_int_list(concurrency, "--concurrency")
    duration_s = parse_duration(duration, "--duration") if duration else (60.0 if mode == "steady" else None)
    overrides = config.overrides_from(base)
    engine = msgspec.convert(preset_summary(config), EngineSummary)
    spec = RunSpec(workload=workload, sim=SimSpec(
        preset=preset, mode=mode, overrides=overrides, engine=engine, concurrency=levels_c,
        num_requests=num_requests, duration_s=duration_s), repeat=repeat)
    levels = (trace_levels(workload, time_scale) if trace is not None else
              [LevelSpec(mode=mode, concurrency=c, num_requests=num_requests,  # type: ignore[arg-type]
                         duration_s=duration_s) for c in levels_c])
    label = (f"simulated engine: {derived[1]}" if derived else f"simulated engine: preset {preset}") + (
        f" with {overrides}" if overrides else "")
    typer.echo(f"{label} (virtual time)")
    done = run_async(simulate(config, workload, levels, spec, out_dir=out, chunks=chunks, observer=_PrintLevels(),
                              existing="overwrite" if overwrite else "refuse", repeat=repeat))
    if repeat > 1:
        wide_console().print(repeat_table(done.result.levels))
    if out is not None:
        note_result_dir(out)
        typer.echo(f"results: {out}")


@grouped
def serve_sim_cmd(
    preset: Preset = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free port).")] = 8000,
    speed: Annotated[float, typer.Option("--speed", help="Run the engine clock this many times faster "
                                         "than real time.")] = 1.0,
    no_metrics: Annotated[bool, typer.Option("--no-metrics", help="Serve no /metrics (404).")] = False,
    reject_when_waiting: Annotated[int | None, typer.Option(
        "--reject-when-waiting", help="Answer new requests with --reject-status while more than N "
        "wait.")] = None,
    reject_status: Annotated[int, typer.Option("--reject-status", help="429 or 503.")] = 429,
    max_num_seqs: MaxNumSeqs = None,
    kv_tokens: KvTokens = None,
    max_num_batched_tokens: BatchedTokens = None,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="Longest prompt + output.",
                                                      rich_help_panel=ENGINE)] = None,
    t0_ms: Annotated[float | None, typer.Option("--t0-ms", help="Step time: fixed part (ms).",
                                                rich_help_panel=ENGINE)] = None,
    a_ms: Annotated[float | None, typer.Option("--a-ms", help="Step time: per decode sequence (ms).",
                                               rich_help_panel=ENGINE)] = None,
    b_ms: Annotated[float | None, typer.Option("--b-ms", help="Step time: per prefill token (ms).",
                                               rich_help_panel=ENGINE)] = None,
    c_us: Annotated[float | None, typer.Option("--c-us", help="Step time: per KV token read (us).",
                                               rich_help_panel=ENGINE)] = None,
    faults: Annotated[str | None, typer.Option(
        "--faults", help="Fail requests on purpose, with per-request probabilities: hang, truncate, "
        "reset, malformed, http_500, http_429, slow_headers (e.g. hang=0.1,http_429=0.05); "
        "slow_headers_s= and retry_after_s= set the delay and the Retry-After seconds.")] = None,
    faults_seed: Annotated[int, typer.Option("--faults-seed", help="Same seed, same faults for the "
                                             "n-th request.")] = 0,
    replicas: Replicas = None,
    balancer: BalancerOpt = None,
    twin: Derived = NO_TWIN,
    backlog: Annotated[int, typer.Option("--backlog", help="Listen backlog: new connections the kernel holds "
                                         "before they are accepted (capped by net.core.somaxconn); a burst of "
                                         "more overflows it and waits on SYN retries.")] = 4096,
    no_prefix_cache: Annotated[bool, typer.Option("--no-prefix-cache", help="Turn off prefix caching (on by "
                                                  "default, as in vLLM).", rich_help_panel=ENGINE)] = False,
) -> None:
    """Serve the simulated engine as an OpenAI-compatible server with vLLM's /metrics."""
    from plateau_bench.aio import run
    from plateau_bench.sim.embed import ServeOptions, serve_forever
    from plateau_bench.sim.faults import parse_faults

    if speed <= 0:
        raise ConfigError(f"--speed must be > 0 (got {speed})")
    if reject_status not in (429, 503):
        raise ConfigError(f"--reject-status must be 429 or 503 (got {reject_status})")
    if reject_when_waiting is not None and reject_when_waiting < 0:
        raise ConfigError(f"--reject-when-waiting must be >= 0 (got {reject_when_waiting})")
    derived = twin.engine(preset)
    _, config = _configure(preset, max_num_seqs, kv_tokens, max_num_batched_tokens, max_model_len,
                           t0_ms, a_ms, b_ms, c_us, derived=derived, replicas=replicas, balancer=balancer)
    if derived:
        typer.echo(f"plateau serve-sim: engine {derived[1]}", err=True)
    if no_prefix_cache:
        config = msgspec.structs.replace(config, prefix_caching=False)
    fault_spec = parse_faults(faults) if faults else None
    options = ServeOptions(speed=speed, metrics=not no_metrics, reject_when_waiting=reject_when_waiting,
                           reject_status=reject_status, faults=fault_spec, faults_seed=faults_seed,
                           backlog=backlog)
    options.validate()

    def ready(bound: int) -> None:
        injected = f", faults {fault_spec.spec()} (seed {faults_seed})" if fault_spec and fault_spec.any else ""
        caching = "" if config.prefix_caching else ", prefix caching off"
        typer.echo(f"plateau serve-sim: preset {config.name if derived else preset or 'tiny'} (model "
                   f"{config.model_name!r}) on "
                   f"http://{host}:{bound}, speed x{speed:g}{injected}{caching}; Ctrl-C to stop", err=True)

    run(serve_forever(config, options, host=host, port=port, on_ready=ready))


def register(app: typer.Typer) -> None:
    app.command("presets")(presets_cmd)
    app.command("sim", cls=ConfiguredCommand)(sim_cmd)
    app.command("serve-sim")(serve_sim_cmd)
