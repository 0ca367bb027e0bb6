"""How large a simulated level would grow, checked before it starts.

The twin keeps every request it simulates (with ``chunks``, every token's arrival too) until the level
ends, and the analysis then reads them all: about 2 KB per request and 120 bytes per streamed token
(the peak resident size over 20,000 to 200,000 requests of the tiny preset is 1.0 KB and 58 bytes;
doubled for the analysis). A level whose estimate exceeds half of the memory this process may use is
refused in one line naming the inputs that made it large, instead of running out of memory minutes in.

The estimate is an upper bound on what the level can hold: a burst or a counted level sends what it is
told; an open loop ``rate x duration`` arrivals; a closed loop its workers twice (the first and the
last in flight) plus a quarter more than the engine can finish in the duration, at most ``min(C, cap)``
sequences per step of at least ``t0 + a x running`` each for every output token, and no faster than its
prompts can be prefilled (``b`` per prompt token).
"""

from __future__ import annotations

import os
import resource

from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.spec import LevelSpec, WorkloadSpec

BYTES_PER_REQUEST = 2_000
BYTES_PER_CHUNK = 120
_SHORTEST_STEP_S = 1e-6   # coefficients of zero would make an engine infinitely fast


def memory_budget_bytes() -> int:
    """Half of what this process may use: physical memory, or its address-space limit when lower."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    usable = physical if limit == resource.RLIM_INFINITY else min(physical, limit)
    return usable // 2


def expected_requests(config: EngineConfig, level: LevelSpec, workload: WorkloadSpec,
                      arrivals: int | None = None) -> tuple[float, str]:
    """At most how many requests the level simulates, and the inputs that set that number."""
    if arrivals is not None:
        return float(arrivals if level.num_requests is None else min(arrivals, level.num_requests)), "the trace"
    if level.num_requests is not None:
        return float(level.num_requests), f"--num-requests {level.num_requests:,}"
    if level.mode == "burst":
        return float(level.concurrency or 0), f"--concurrency {level.concurrency:,}"
    duration = level.duration_s or 0.0
    if level.mode == "rate":
        return (level.rate or 0.0) * duration, f"--rate {level.rate:g}/s for --duration {duration:g}s"
    workers = level.concurrency or 0
    # A quarter more for what the step floor leaves out (whole-millisecond steps, the sampled lengths).
    return 2 * workers + 1.25 * duration * _served_per_s(config, workers, workload), \
        f"--concurrency {workers:,} for --duration {duration:g}s"


def _served_per_s(config: EngineConfig, workers: int, workload: WorkloadSpec) -> float:
    step = config.step_at_cap
    running = min(workers, config.max_num_seqs or workers)
    per_step = max(step.t0 + step.a * running, _SHORTEST_STEP_S)
    decode = running / (per_step * max(workload.output_len, 1))
    prompt_s = step.b * max(workload.input_len, 1)
    prefill = 1.0 / prompt_s if prompt_s > 0 else decode
    return min(decode, prefill) * config.replicas


def check_level_size(config: EngineConfig, level: LevelSpec, workload: WorkloadSpec, *, chunks: bool,
                     arrivals: int | None = None, budget_bytes: int | None = None) -> None:
    """ConfigError (one line) when the level would hold more than the memory budget allows."""
    requests, made_by = expected_requests(config, level, workload, arrivals)
    per_request = BYTES_PER_REQUEST + (BYTES_PER_CHUNK * workload.output_len if chunks else 0)
    need = requests * per_request
    budget = memory_budget_bytes() if budget_bytes is None else budget_bytes
    if need > budget:
        raise ConfigError(
            f"the simulation would hold ~{requests:,.0f} requests ({made_by}), ~{need / 2**30:,.1f} GiB: more than "
            f"the {budget / 2**30:,.1f} GiB this machine allows it; shorten the duration or lower the load")
