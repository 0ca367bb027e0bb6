"""``plateau plan RUN_DIR_OR_MODEL --rate R --slo ...``: replicas for a request rate under an SLO, and their cost.

The search is ``sweep.capacity``; the model comes from ``plateau calibrate`` (or a result directory,
calibrated on the spot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.sim.replicas import BALANCERS, parse_balancer
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.predict import load_model


def _ms(value: float | None) -> str:
    return "-" if value is None else (f"{value / 1e3:,.2f} s" if value >= 10_000 else f"{value:,.0f} ms")


def plan_cmd(  # long: one option per line
    model_path: Annotated[Path, typer.Argument(help="A model from plateau calibrate --out, or a result directory.")],
    rate: Annotated[float, typer.Option("--rate", help="Target request rate (requests/s, Poisson arrivals).")],
    slo: Annotated[str, typer.Option("--slo", help="e.g. ttft_p99=2s,tpot_p99=100ms")],
    balancer: Annotated[str | None, typer.Option("--balancer", help="round-robin | least-outstanding (default: "
                                                 "both, side by side).")] = None,
    gpus_per_replica: Annotated[int, typer.Option("--gpus-per-replica", help="GPUs one replica uses.")] = 1,
    gpu_cost: Annotated[float | None, typer.Option("--gpu-cost", help="Cost of one GPU per hour (any "
                                                   "currency).")] = None,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs", help="Each replica's cap (default: the "
                                                     "calibrated one).")] = None,
    kv_tokens: Annotated[int | None, typer.Option("--kv-tokens", help="Each replica's KV cache in tokens.")] = None,
    input_len: Annotated[int | None, typer.Option("--input-len", help="Prompt tokens (default: the "
                                                  "calibration's).")] = None,
    output_len: Annotated[int | None, typer.Option("--output-len", help="Output tokens (default: the "
                                                   "calibration's).")] = None,
    max_replicas: Annotated[int, typer.Option("--max-replicas", help="Never plan more than this.")] = 64,
    duration: Annotated[float, typer.Option("--duration-s", help="Virtual seconds of arrivals per trial.")] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON only.")] = False,
) -> None:
    """Replicas needed for a request rate under an SLO (the calibrated twin behind a load balancer), and cost."""
    from plateau_bench.sweep.capacity import plan_capacity
    from plateau_bench.sweep.predict import Settings

    if gpus_per_replica < 1:
        raise ConfigError(f"--gpus-per-replica must be >= 1 (got {gpus_per_replica})")
    if gpu_cost is not None and gpu_cost < 0:
        raise ConfigError(f"--gpu-cost must be >= 0 (got {gpu_cost})")
    if max_replicas < 1 or duration <= 0:
        raise ConfigError("--max-replicas must be >= 1 and --duration-s > 0")
    slos = parse_slo(slo)
    balancers = [parse_balancer(balancer)] if balancer is not None else list(BALANCERS)
    model = load_model(model_path)
    workload = WorkloadSpec(input_len=input_len or max(1, round(model.input_len)),
                            output_len=output_len or max(1, round(model.output_len)))
    workload.validate()
    settings = Settings(max_num_seqs=max_num_seqs, kv_tokens=kv_tokens)

    async def main() -> list[object]:
        return [await plan_capacity(model, workload, rate, slos, balancer=b, settings=settings,
                                    max_replicas=max_replicas, gpus_per_replica=gpus_per_replica,
                                    gpu_cost_per_hour=gpu_cost, duration_s=duration) for b in balancers]

    plans = run_async(main())
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(plans), indent=2).decode())
        return
    console = wide_console()
    for p in plans:
        print_plan(console, p, workload)


def print_plan(console: Console, plan: object, workload: WorkloadSpec) -> None:
    from plateau_bench.sweep.capacity import CapacityPlan

    assert isinstance(plan, CapacityPlan)
    table = Table(title=f"{plan.rate:g} req/s of {workload.input_len} in / {workload.output_len} out, "
                        f"{plan.balancer.replace('_', ' ')}: {', '.join(plan.slos)}")
    for col in ("replicas", "req/s done", "out tok/s", "TTFT p99", "TPOT p99", "E2E p99", "goodput req/s", "SLO"):
        table.add_column(col, justify="right")
    for t in plan.trials:
        verdict = "meets" if t.meets else ("falls behind" if not t.keeps_up else "violates")
        table.add_row(f"{t.replicas:,}", f"{t.request_rate:,.2f}", f"{t.output_throughput:,.0f}", _ms(t.ttft_p99_ms),
                      _ms(t.tpot_p99_ms), _ms(t.e2e_p99_ms),
                      f"{t.goodput_rps:,.2f}" if t.goodput_rps is not None else "-", verdict)
    console.print(table)
    if plan.replicas is None:
        console.print(f"No replica count up to {max(t.replicas for t in plan.trials):,} meets the SLO at this rate.",
                      highlight=False)
        return
    cost = ""
    if plan.cost_per_hour is not None:
        per_million = (f", {plan.cost_per_million_tokens:,.3f} per million output tokens"
                       if plan.cost_per_million_tokens is not None else "")
        cost = f"; {plan.cost_per_hour:,.2f} per hour{per_million}"
    console.print(f"Needs {plan.replicas:,} replica(s) = {plan.gpus:,} GPU(s){cost}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
