"""The load generator's health over a level: its samples reduced to the figures the diagnosis reads.

``driver.health`` samples this process's CPU (in % of one core: an asyncio client runs on one core,
so ~100 % means it is the bottleneck) and how late its event loop wakes up (every chunk it reads
waits behind the same loop, so a lag of tens of milliseconds is added to every measured time).
This module only summarizes those samples: mean and maximum CPU, mean / p99 / maximum lag, and the
in-flight count when it was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plateau_bench.level_run import HealthSample
from plateau_bench.result import ClientHealth


def summarize_health(samples: Sequence[HealthSample], start_ns: int | None = None,
                     end_ns: int | None = None) -> ClientHealth:
    """Figures over the samples taken in ``[start_ns, end_ns]`` (level-relative ns), else over all."""
    chosen = [s for s in samples if (start_ns is None or s.t_ns >= start_ns)
              and (end_ns is None or s.t_ns <= end_ns)] or list(samples)
    if not chosen:
        return ClientHealth()
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
    )
