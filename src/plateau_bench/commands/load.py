"""``plateau run`` (one level) and ``plateau sweep`` (push the load until throughput stops growing)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from plateau_bench.analysis.metrics import seed_line
from plateau_bench.analysis.plateau import SearchConfig
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands import options as o
from plateau_bench.driver import run as run_async
from plateau_bench.errors import ConfigError
from plateau_bench.report.live import LiveView
from plateau_bench.report.terminal import level_table, summary_sentence, verdict_text
from plateau_bench.spec import LevelSpec, parse_duration, parse_float_list, parse_int_list
from plateau_bench.sweep import LATENCY_DEPARTURE, RateSweepSpec, SweepSpec

LEVEL = "Load level"
SEARCH = "Sweep"


@contextlib.asynccontextmanager
async def _target_url(url: str | None, preset: str, speed: float) -> AsyncIterator[tuple[str, dict[str, Any] | None]]:
    from plateau_bench.orchestrate import embedded_twin

    if url:
        yield url, None
        return
    async with embedded_twin(preset, speed) as (twin_url, twin):
        yield twin_url, twin


def _print_json(data: Any) -> None:
    typer.echo(msgspec.json.format(msgspec.json.encode(data), indent=2).decode())


def rate_sentence(summary: dict[str, Any]) -> str:
    def r(v: float | None) -> str:
        return f"{v:.2f} req/s" if v is not None else "n/a"

    parts = []
    if summary.get("synchronous_rate") is not None:
        parts.append(f"Synchronous rate {r(summary['synchronous_rate'])}, maximum throughput "
                     f"{r(summary.get('max_rate'))}.")
    departure = summary.get("departure_rate")
    parts.append(f"Latency departs from its low-load value (E2E p50 x{LATENCY_DEPARTURE:g}) at {r(departure)}."
                 if departure is not None else "Latency stayed near its low-load value at every rate measured.")
    return " ".join(parts)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        url: o.Url = None,
        model: o.Model = None,
        endpoint: o.Endpoint = "completions",
        api_key: o.ApiKey = None,
        header: o.Headers = None,
        timeout: o.Timeout = "600s",
        wait_ready: o.WaitReady = None,
        metrics_url: o.MetricsUrl = None,
        no_metrics: o.NoMetrics = False,
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
        input_len: o.InputLen = 128,
        output_len: o.OutputLen = 128,
        range_ratio: o.RangeRatio = 0.0,
        dataset: o.Dataset = None,
        seed: o.Seed = 0,
        tokenizer: o.Tokenizer = None,
        out: o.Out = None,
        quiet: o.Quiet = False,
        as_json: o.Json = False,
        preset: o.Preset = "tiny",
        sim_speed: o.SimSpeed = 1.0,
    ) -> None:
        """Measure one load level: a burst (num-requests = C), a steady closed loop, or an open-loop rate."""
        from plateau_bench.orchestrate import metrics_url_for, prepare, run_one

        duration_s = parse_duration(duration) if duration else None
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
        workload = o.workload_spec(input_len, output_len, range_ratio, dataset, seed, tokenizer)
        console = o.wide_console()

        async def main() -> None:
            async with _target_url(url, preset, sim_speed) as (target_url, twin):
                target = o.target_spec(target_url, model, endpoint, api_key, header, timeout)
                n = level.total_requests() or max(level.concurrency or 0, level.max_concurrency or 0, 256)
                prepared = await prepare(target, workload, n + warmup,
                                         wait_ready_s=parse_duration(wait_ready) if wait_ready else None, twin=twin)
                m_url, required = metrics_url_for(prepared.target, metrics_url, no_metrics)
                with LiveView(enabled=not quiet and not as_json) as view:
                    outcome = await run_one(prepared, workload, level, out_dir=out, metrics_url=m_url,
                                            metrics_required=required, view=view)
            lv = outcome.level
            if as_json:
                _print_json(msgspec.to_builtins(lv))
                return
            console.print(seed_line(lv), highlight=False, soft_wrap=True)
            console.print(level_table([lv]))
            if lv.level_failed:
                console.print(f"[red]level failed: {lv.failed}/{lv.num_requests} requests failed, mostly "
                              f"{lv.dominant_error}[/red]")
            if out:
                console.print(f"results: {out}", highlight=False)

        run_async(main())

    @app.command("sweep")
    def sweep_cmd(
        url: o.Url = None,
        model: o.Model = None,
        endpoint: o.Endpoint = "completions",
        api_key: o.ApiKey = None,
        header: o.Headers = None,
        timeout: o.Timeout = "600s",
        wait_ready: o.WaitReady = None,
        metrics_url: o.MetricsUrl = None,
        no_metrics: o.NoMetrics = False,
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
        slo: Annotated[str | None, typer.Option("--slo", help="Stop when violated, e.g. ttft_p99=2s,"
                                                "tpot_p99=100ms.", rich_help_panel=SEARCH)] = None,
        budget: Annotated[str | None, typer.Option("--budget", help="Stop before spending more, e.g. 10m.",
                                                   rich_help_panel=SEARCH)] = None,
        max_error_rate: Annotated[float, typer.Option("--max-error-rate", help="Stop when a level's failed "
                                                      "share exceeds this.", rich_help_panel=SEARCH)] = 0.2,
        resume: Annotated[Path | None, typer.Option("--resume", help="Continue a sweep saved in this "
                                                    "directory.", rich_help_panel=SEARCH)] = None,
        input_len: o.InputLen = 128,
        output_len: o.OutputLen = 128,
        range_ratio: o.RangeRatio = 0.0,
        dataset: o.Dataset = None,
        seed: o.Seed = 0,
        tokenizer: o.Tokenizer = None,
        out: o.Out = None,
        quiet: o.Quiet = False,
        as_json: o.Json = False,
        preset: o.Preset = "tiny",
        sim_speed: o.SimSpeed = 1.0,
        slow_client_ms: Annotated[float, typer.Option("--slow-client-ms", hidden=True,
                                                      help="Test hook: burn this much client CPU per "
                                                      "finished request.")] = 0.0,
    ) -> None:
        """Push the load until throughput stops growing; find the plateau and the knee; say why."""
        from plateau_bench.orchestrate import metrics_url_for, out_dir_or_temp, prepare, rate_sweep, sweep

        if rate is not None and mode == "burst":
            raise ConfigError("--mode burst sends C requests at once; it cannot be combined with --rate")
        if rate is not None and concurrency:
            raise ConfigError("--rate sweeps request rates; drop --concurrency (or drop --rate)")
        if mode not in ("steady", "burst"):
            raise ConfigError(f"--mode must be steady or burst (got {mode!r})")
        grid = tuple(parse_int_list(concurrency, "--concurrency")) if concurrency else None
        spec = SweepSpec(
            mode=mode,  # type: ignore[arg-type]
            concurrencies=grid,
            search=SearchConfig(start=start, max_concurrency=max_concurrency, plateau_gain=plateau_gain),
            precision=precision,
            min_level_s=parse_duration(min_level_time),
            max_level_s=parse_duration(max_level_time),
            warmup=warmup,
            slos=tuple(parse_slo(slo)) if slo else (),
            budget_s=parse_duration(budget) if budget else None,
            max_error_rate=max_error_rate,
        )
        spec.validate()
        rate_spec = None
        if rate is not None:
            if burstiness <= 0:
                raise ConfigError(f"--burstiness must be > 0 (got {burstiness})")
            rates = None if rate.strip().lower() == "auto" else tuple(parse_float_list(rate, "--rate"))
            rate_spec = RateSweepSpec(rates=rates, throughput_concurrency=min(max_concurrency, 256),
                                      burstiness=burstiness, precision=precision, min_level_s=spec.min_level_s,
                                      max_level_s=spec.max_level_s, warmup=warmup)
            if resume is not None:
                raise ConfigError("--resume continues concurrency sweeps; a rate sweep starts afresh")
        if start <= 0 or max_concurrency < start:
            raise ConfigError("--start must be >= 1 and <= --max-concurrency")
        workload = o.workload_spec(input_len, output_len, range_ratio, dataset, seed, tokenizer)
        if resume is not None and out is not None and Path(out) != Path(resume):
            raise ConfigError("--resume continues in its own directory; drop --out or make it the same")
        out_dir = resume or out_dir_or_temp(out, "sweep")
        console = o.wide_console()

        async def main() -> None:
            async with _target_url(url, preset, sim_speed) as (target_url, twin):
                target = o.target_spec(target_url, model, endpoint, api_key, header, timeout)
                n = max(grid) if grid else max_concurrency
                prepared = await prepare(target, workload, 2 * n,
                                         wait_ready_s=parse_duration(wait_ready) if wait_ready else None, twin=twin)
                m_url, required = metrics_url_for(prepared.target, metrics_url, no_metrics)
                planned = len(grid) if grid else (len(rate_spec.rates or ()) or 8) if rate_spec else 12
                with LiveView(enabled=not quiet and not as_json, est_levels=planned) as view:
                    if rate_spec is not None:
                        result = await rate_sweep(prepared, workload, rate_spec, out_dir=out_dir, metrics_url=m_url,
                                                  metrics_required=required, view=view)
                    else:
                        result = await sweep(prepared, workload, spec, out_dir=out_dir, metrics_url=m_url,
                                             metrics_required=required, view=view, resume=resume is not None,
                                             slow_client_ms=slow_client_ms)
            if as_json:
                _print_json({**result.summary, "verdict": result.verdict.to_dict(), "out": str(out_dir),
                             "levels": [msgspec.to_builtins(lv) for lv in result.state.levels]})
                return
            levels = result.state.levels
            if rate_spec is not None:
                for lv in levels:
                    console.print(seed_line(lv), highlight=False, soft_wrap=True)
                console.print(level_table(levels, title="open-loop rate sweep"))
                console.print(rate_sentence(result.summary["rate_sweep"]), highlight=False)
                console.print(f"results: {out_dir}", highlight=False)
                return
            title = f"{len(levels)} levels" + (" (burst mode: num-requests = C)" if mode == "burst" else "")
            for lv in sorted(levels, key=lambda lv: lv.concurrency or 0):
                console.print(seed_line(lv), highlight=False, soft_wrap=True)
            console.print(level_table(levels, title=title))
            console.print(summary_sentence(levels, result.summary["plateau"], result.summary["knee"]),
                          highlight=False)
            if result.summary.get("slo"):
                s = result.summary["slo"]
                console.print(f"SLO {', '.join(s['bounds'])}: met up to C={s['max_concurrency']}", highlight=False)
            console.print(f"Stopped: {result.state.stop_reason}", highlight=False)
            console.print(verdict_text(result.verdict.to_dict()))
            console.print(f"results: {out_dir}", highlight=False)
            last = levels[-1] if levels else None
            if last is not None and last.level_failed and last.dominant_error == "connect":
                print(f"plateau: the target stopped answering during {last.label}; finished levels are saved in "
                      f"{out_dir} (continue with --resume {out_dir})", file=sys.stderr)
                raise SystemExit(1)

        try:
            run_async(main())
        except KeyboardInterrupt:
            print(f"plateau: interrupted; finished levels are saved in {out_dir} "
                  f"(continue with --resume {out_dir})", file=sys.stderr)
            raise SystemExit(130) from None
