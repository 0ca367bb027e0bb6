"""``plateau plan``: how many replicas a request rate needs under an SLO, and what they cost.

N replicas of the calibrated engine behind a balancer (``sim.replicas``) take an open loop of
Poisson arrivals at the target rate in virtual time; the SLO is checked on the level's latency
percentiles exactly as on a measured level. More replicas never make latency worse under either
balancer, so the search doubles N until the SLO holds, then bisects between the last failing and
the first meeting count. The band is the same search with every step as far off as the calibration's
worst held-out level or sweep (``predict.held_out_worst``), faster and slower, widened where a replica's
decoding batch reaches past the calibrated ones (``predict.beyond_calibrated``). A replica count meets the SLO only
when it also keeps up: no backlog growing over the arrivals (``_keeps_up``), which a longer run would turn
into a violation.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from plateau_bench.analysis.slo import Slo, level_meets
from plateau_bench.answers import CalibratedModel
from plateau_bench.answers import CapacityPlan as CapacityPlan  # re-exported: what a plan is
from plateau_bench.answers import ReplicaTrial as ReplicaTrial
from plateau_bench.errors import ConfigError
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.sweep.predict import (
    Settings,
    beyond_calibrated,
    engine_config,
    held_out_basis,
    held_out_worst,
    model_line,
    scaled,
)
from plateau_bench.units import NS

KEEPS_UP = 0.95   # share of the requests that must have a first token


def _keeps_up(records: Sequence[RequestRecord]) -> bool:
    """No growing backlog: the last tenth of the arrivals waits for its first token no longer than
    three times the typical request (plus a second of slack); a queue that grows shows there first."""
    waits = [(r.sent_ns, (r.first_token_ns - r.sent_ns) / NS) for r in records if r.first_token_ns is not None]
    if len(waits) < 10 or len(waits) < len(records) * KEEPS_UP:
        return False
    waits.sort()
    tail = [w for _, w in waits[-max(1, len(waits) // 10):]]
    typical = float(np.median([w for _, w in waits]))
    return float(np.mean(tail)) <= 3 * typical + 1.0


async def _trial(model: CalibratedModel, workload: WorkloadSpec, settings: Settings, rate: float, replicas: int,
                 balancer: str, slos: Sequence[Slo], duration_s: float) -> ReplicaTrial:
    from plateau_bench.analysis.level import build_level
    from plateau_bench.analysis.slo import goodput

    config = engine_config(model.engine, settings).with_overrides(replicas=replicas, balancer=balancer)
    runner = VirtualLevelRunner(config, workload)
    level = LevelSpec(mode="rate", rate=rate, duration_s=duration_s)
    raw = await runner.run_level(level, label=f"{replicas} replicas", on_record=None, stop_rule=None)
    lv: LevelResult = build_level(raw)
    lo, hi = lv.window_start_s * NS, lv.window_end_s * NS
    lv.goodput_rps = goodput([r for r in raw.records if lo <= r.end_ns <= hi], lv.duration_s, slos)
    keeps_up = _keeps_up(raw.records)
    return ReplicaTrial(replicas=replicas, balancer=balancer, meets=keeps_up and level_meets(lv, slos),
                        keeps_up=keeps_up, request_rate=lv.request_throughput, output_throughput=lv.output_throughput,
                        ttft_p99_ms=lv.ttft_ms.p99, tpot_p99_ms=lv.tpot_ms.p99, e2e_p99_ms=lv.e2e_ms.p99,
                        goodput_rps=lv.goodput_rps, decoding=lv.decoding_concurrency / replicas)


async def plan_capacity(model: CalibratedModel, workload: WorkloadSpec, rate: float, slos: Sequence[Slo], *,
                        balancer: str = "round_robin", settings: Settings = Settings(), max_replicas: int = 64,
                        gpus_per_replica: int = 1, gpu_cost_per_hour: float | None = None,
                        duration_s: float = 120.0) -> CapacityPlan:
    """The fewest replicas meeting every SLO at ``rate`` requests/s (doubling, then bisection), and the same
    with every step as far off as the calibration's worst held-out level, faster then slower (the band)."""
    if rate <= 0:
        raise ConfigError(f"--rate must be > 0 (got {rate})")
    if not slos:
        raise ConfigError("plan needs an --slo to size for, e.g. --slo ttft_p99=2s,tpot_p99=100ms")
    trials: dict[int, ReplicaTrial] = {}
    args = (workload, settings, rate, balancer, slos, duration_s, max_replicas)
    replicas = await _fewest(model, *args, trials)
    low = high = None
    worst = held_out_worst(model)
    chosen = trials.get(replicas) if replicas is not None else None
    beyond = beyond_calibrated(model, chosen.decoding or 0.0) if chosen is not None else 0.0
    if worst is not None:
        error = worst + beyond
        low = await _fewest(scaled(model, 1 - error), *args, {}) if error < 1 else None
        high = await _fewest(scaled(model, 1 + error), *args, {})
    plan = _plan(rate, slos, balancer, replicas, trials, gpus_per_replica, gpu_cost_per_hour, workload.output_len)
    admission = "; admission by the whole request (--reserve-kv)" if settings.reserve_kv else ""
    return msgspec.structs.replace(plan, replicas_low=low, replicas_high=high, model=model_line(model) + admission,
                                   held_out_basis=held_out_basis(model), held_out_beyond=beyond)


async def _fewest(model: CalibratedModel, workload: WorkloadSpec, settings: Settings, rate: float, balancer: str,
                  slos: Sequence[Slo], duration_s: float, max_replicas: int,
                  trials: dict[int, ReplicaTrial]) -> int | None:
    """The fewest replicas of ``model`` meeting the SLO (None: not within ``max_replicas``); ``trials`` keeps
    every count tried."""

    async def check(n: int) -> bool:
        if n not in trials:
            trials[n] = await _trial(model, workload, settings, rate, n, balancer, slos, duration_s)
        return trials[n].meets

    n, low = 1, 0
    while not await check(n):
        low = n
        if n >= max_replicas:
            return None
        n = min(2 * n, max_replicas)
    high = n
    while high - low > 1:
        mid = (low + high) // 2
        if await check(mid):
            high = mid
        else:
            low = mid
    return high


def _plan(rate: float, slos: Sequence[Slo], balancer: str, replicas: int | None, trials: dict[int, ReplicaTrial],
          gpus_per_replica: int, gpu_cost: float | None, output_len: int) -> CapacityPlan:
    gpus = replicas * gpus_per_replica if replicas is not None else None
    per_hour = gpus * gpu_cost if gpus is not None and gpu_cost is not None else None
    # Replicas that keep up serve what arrives: the rate times the output length (the level's own
    # window average includes its ramp and drain).
    tok_s = rate * output_len
    per_million = per_hour / (tok_s * 3600 / 1e6) if per_hour is not None and tok_s > 0 else None
    return CapacityPlan(rate=rate, slos=[s.describe() for s in slos], balancer=balancer, replicas=replicas,
                        gpus=gpus, cost_per_hour=per_hour, cost_per_million_tokens=per_million,
                        trials=[trials[k] for k in sorted(trials)])
