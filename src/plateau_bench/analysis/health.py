"""The load generator's health over a level: its samples reduced to the figures the diagnosis reads.

``driver.health`` samples this process's CPU (in % of one core: an asyncio client runs on one core,
so ~100 % means it is the bottleneck) and how late its event loop wakes up (every chunk it reads
waits behind the same loop, so a lag of tens of milliseconds is added to every measured time).
This module only summarizes those samples: mean and maximum CPU, mean / p99 / maximum lag, and the
in-flight count when it was sampled.

Several load processes (``--workers``): each is summarized on its own (``per_worker``), and the level's
figures are the busiest process's CPU and lag (each process is one event loop on one core: the
busiest binds, an average would hide it) and the sum of the processes' in-flight counts.
``with_requests`` adds each process's requests, send lag p99 and connect p99, from the records it sent
(the level's own send lag and connect time stay figures over all records, in one pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from plateau_bench.analysis.stats import summarize
from plateau_bench.records import HealthSample, RequestRecord
from plateau_bench.result import ClientHealth, WorkerHealth

_NS_PER_MS = 1e6


def _in_window(samples: Sequence[HealthSample], start_ns: int | None, end_ns: int | None) -> list[HealthSample]:
    return [s for s in samples if (start_ns is None or s.t_ns >= start_ns)
            and (end_ns is None or s.t_ns <= end_ns)] or list(samples)


def summarize_health(samples: Sequence[HealthSample], start_ns: int | None = None,
                     end_ns: int | None = None, processes: int = 1) -> ClientHealth:
    """Figures over the samples taken in ``[start_ns, end_ns]`` (level-relative ns), else over all.

    ``processes``: how many load processes ran the level; samples that name their process are
    summarized per process (each over its own samples in the window).
    """
    workers = sorted({s.worker for s in samples if s.worker is not None})
    if workers:
        return _per_worker(samples, workers, start_ns, end_ns, processes)
    return _figures(_in_window(samples, start_ns, end_ns), processes)


def _figures(chosen: Sequence[HealthSample], processes: int = 1) -> ClientHealth:
    if not chosen:
        return ClientHealth(processes=processes)
    cpu = np.asarray([s.cpu_pct for s in chosen], dtype=np.float64)
    lag = np.asarray([s.loop_lag_ms for s in chosen], dtype=np.float64)
    flights = [s.in_flight for s in chosen if s.in_flight is not None]
    return ClientHealth(
        cpu_pct_mean=round(float(cpu.mean()), 2),
        cpu_pct_max=round(float(cpu.max()), 2),
        loop_lag_ms_mean=round(float(lag.mean()), 3),
        loop_lag_ms_p99=round(float(np.percentile(lag, 99)), 3),
        loop_lag_ms_max=round(float(lag.max()), 3),
        in_flight_mean=round(float(np.mean(flights)), 2) if flights else None,
        in_flight_max=float(max(flights)) if flights else None,
        samples=len(chosen),
        processes=processes,
    )


def _per_worker(samples: Sequence[HealthSample], workers: list[int], start_ns: int | None, end_ns: int | None,
                processes: int) -> ClientHealth:
    each = []
    for worker in workers:
        one = _figures(_in_window([s for s in samples if s.worker == worker], start_ns, end_ns))
        each.append(WorkerHealth(worker=worker, **{k: getattr(one, k) for k in WorkerHealth.__struct_fields__
                                                   if hasattr(one, k) and k != "worker"}))

    def busiest(name: str) -> float | None:
        values = [v for h in each if (v := getattr(h, name)) is not None]
        return max(values) if values else None

    def total(name: str) -> float | None:
        values = [v for h in each if (v := getattr(h, name)) is not None]
        return round(sum(values), 2) if values else None

    return ClientHealth(
        cpu_pct_mean=busiest("cpu_pct_mean"), cpu_pct_max=busiest("cpu_pct_max"),
        loop_lag_ms_mean=busiest("loop_lag_ms_mean"), loop_lag_ms_p99=busiest("loop_lag_ms_p99"),
        loop_lag_ms_max=busiest("loop_lag_ms_max"), in_flight_mean=total("in_flight_mean"),
        in_flight_max=total("in_flight_max"), samples=sum(h.samples for h in each),
        processes=max(processes, len(each)), per_worker=each)


def with_requests(health: ClientHealth, records: Sequence[RequestRecord]) -> ClientHealth:
    """``health`` with each load process's request figures (records that name their process)."""
    by_process: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.process is not None and not r.warmup:
            by_process.setdefault(r.process, []).append(r)
    if not by_process:
        return health
    known = {h.worker: h for h in health.per_worker}
    each = []
    for worker in sorted(set(known) | set(by_process)):
        mine = by_process.get(worker, [])
        connects = [r.connect_ns / _NS_PER_MS for r in mine if r.connect_ns is not None]
        each.append(msgspec.structs.replace(
            known.get(worker) or WorkerHealth(worker=worker), requests=len(mine),
            send_lag_ms_p99=summarize([(r.sent_ns - r.scheduled_ns) / _NS_PER_MS for r in mine]).p99,
            connect_ms_p99=summarize(connects).p99))
    return msgspec.structs.replace(health, per_worker=each, processes=max(health.processes, len(each)))
