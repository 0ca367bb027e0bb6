"""``plateau plan RUN_DIR_OR_MODEL --rate R --slo ...``: replicas for a request rate under an SLO, and their cost.

The search is ``sweep.capacity``, the tables ``report.answers``; the model comes from ``plateau calibrate``
(or a result directory, calibrated on the spot).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import typer

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.answers import CapacityPlan
from plateau_bench.commands import answer_flags as a
from plateau_bench.commands import options as o
from plateau_bench.commands.engine_flags import AS_CALIBRATED, Balancer, EngineSettings
from plateau_bench.commands.groups import grouped
from plateau_bench.errors import ConfigError
from plateau_bench.report.answers import plan_view
from plateau_bench.sim.replicas import BALANCERS, parse_balancer
from plateau_bench.sweep.predict import load_model


def _check(gpus_per_replica: int, gpu_cost: float | None, max_replicas: int, duration: float) -> None:
    if gpus_per_replica < 1:
        raise ConfigError(f"--gpus-per-replica must be >= 1 (got {gpus_per_replica})")
    if gpu_cost is not None and gpu_cost < 0:
        raise ConfigError(f"--gpu-cost must be >= 0 (got {gpu_cost})")
    if max_replicas < 1 or duration <= 0:
        raise ConfigError("--max-replicas must be >= 1 and --duration-s > 0")


@grouped
def plan_cmd(
    model_path: a.ModelOrRun,
    rate: Annotated[float, typer.Option("--rate", help="Target request rate (requests/s, Poisson arrivals).")],
    slo: a.Slo,
    balancer: Balancer = None,
    gpus_per_replica: Annotated[int, typer.Option("--gpus-per-replica", help="GPUs one replica uses.")] = 1,
    gpu_cost: a.GpuCost = None,
    engine: EngineSettings = AS_CALIBRATED,
    lengths: a.GivenLengths = a.AS_GIVEN,
    max_replicas: Annotated[int, typer.Option("--max-replicas", help="Never plan more than this.")] = 64,
    duration: Annotated[float, typer.Option("--duration-s", help="Virtual seconds of arrivals per trial.")] = 120.0,
    as_json: o.Json = False,
) -> None:
    """Replicas needed for a request rate under an SLO (the calibrated twin behind a load balancer), and cost."""
    from plateau_bench.sweep.capacity import plan_capacity

    _check(gpus_per_replica, gpu_cost, max_replicas, duration)
    slos = parse_slo(slo) if slo else []
    balancers = [parse_balancer(balancer)] if balancer is not None else list(BALANCERS)
    model = load_model(model_path)
    workload = lengths.workload(model)
    settings = a.settings(engine)

    async def main() -> list[CapacityPlan]:
        return [await plan_capacity(model, workload, rate, slos, balancer=b, settings=settings,
                                    max_replicas=max_replicas, gpus_per_replica=gpus_per_replica,
                                    gpu_cost_per_hour=gpu_cost, duration_s=duration) for b in balancers]

    plans = run_async(main())
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(plans), indent=2).decode())
        return
    console = o.wide_console()
    for plan in plans:
        console.print(plan_view(plan, workload))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
