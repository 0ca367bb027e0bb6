"""The result tree: every figure plateau-bench saves or prints, as one typed msgspec structure.

``ResultFile`` is ``result.json``: what was run (``RunSpec``), against what (``TargetRecord``), one
``LevelResult`` per finished level, and for sweeps the plateau, knee, stop reason, SLO capacity and
verdict. The analysis builds these types, the store writes and reads them, the presentation only
formats them: no layer passes dicts to another.

The published JSON Schema (``schema/result.schema.json``) is generated from these types by
``plateau schema`` and checked against them in the tests, so a change to a field is a deliberate,
versioned one (``SCHEMA_VERSION``). Field names are a contract: scripts read them.

Version history:
  1  first release (levels carried ``extra``/``telemetry``/``client`` as free-form maps)
  2  explicit fields for every level note and telemetry figure; plateau/knee/verdict typed and
     ``null`` when absent; failures by class (``hung`` apart), tokens lost to failures, attempts
"""

from __future__ import annotations

from typing import Literal

import msgspec

from plateau_bench.result_parts import Interval as Interval  # re-exported: part of the result tree
from plateau_bench.result_parts import PromptUse as PromptUse
from plateau_bench.result_parts import RepeatFigures as RepeatFigures
from plateau_bench.result_parts import RepeatStats as RepeatStats
from plateau_bench.result_parts import RooflineLevel as RooflineLevel
from plateau_bench.result_parts import RooflinePlacement as RooflinePlacement
from plateau_bench.result_parts import SearchSettings as SearchSettings
from plateau_bench.result_parts import ServerPhase as ServerPhase
from plateau_bench.result_parts import ServerTimeSplit as ServerTimeSplit
from plateau_bench.result_parts import SweepSettings as SweepSettings
from plateau_bench.result_parts import WarmLevelInfo as WarmLevelInfo
from plateau_bench.spec import LevelSpec, WorkloadSpec

SCHEMA_VERSION = 2

ResultKind = Literal["run", "sweep", "sim", "import"]
Confidence = Literal["high", "medium", "low"]


class Latency(msgspec.Struct, frozen=True, kw_only=True):
    """Summary of one latency metric over a level, in milliseconds."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    count: int = 0


class WorkerHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One load process's health over a level's window (``--workers``; see ``analysis.health``)."""

    worker: int
    cpu_pct_mean: float | None = None      # that process, % of one core
    cpu_pct_max: float | None = None
    loop_lag_ms_mean: float | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    in_flight_mean: float | None = None
    in_flight_max: float | None = None
    samples: int = 0
    requests: int = 0                      # requests it sent (warm-up excluded)
    send_lag_ms_p99: float | None = None   # its requests' send lag (actual - scheduled send)
    connect_ms_p99: float | None = None    # its requests' wait for a connection


class ClientHealth(msgspec.Struct, frozen=True, kw_only=True):
    """The load generator's own health over a level's window (see ``analysis.health``).

    With several load processes (``--workers``) CPU and lag are the busiest process's (each process is
    one event loop on one core, so the busiest one binds), in-flight counts are their sums, and
    ``per_worker`` keeps every process's own figures.
    """

    cpu_pct_mean: float | None = None      # this process, % of one core
    cpu_pct_max: float | None = None
    loop_lag_ms_mean: float | None = None  # how late the event loop woke up
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    in_flight_mean: float | None = None    # requests the client held open
    in_flight_max: float | None = None
    samples: int = 0
    processes: int = 1                     # load processes that ran the level
    per_worker: list[WorkerHealth] = msgspec.field(default_factory=list)


class WorkerClock(msgspec.Struct, frozen=True, kw_only=True):
    """A load worker's clock against the coordinator's (``--ray``), estimated before the level.

    ``offset_ns`` is the worker's monotonic clock less the coordinator's, from the round trip of least
    delay (``rtt_ns``; the offset is good to half of it). It only places the worker's level on the
    coordinator's timeline: every latency is a difference of one worker's own clock readings.
    """

    worker: int
    node: str | None = None
    offset_ns: int = 0
    rtt_ns: int | None = None


class ServerTelemetry(msgspec.Struct, frozen=True, kw_only=True):
    """The server's ``/metrics`` (and GPU) figures over a level's window (see ``telemetry.summary``).

    Gauges give ``_mean``/``_min``/``_max`` (time-weighted), counters ``_delta`` and ``_rate`` (per s),
    stated quantities their last value. ``raw`` keeps the engine-specific and per-GPU quantities
    under their canonical key (``swapped_mean``, ``gpu0_power_w_mean``, ...).
    """

    engine: str | None = None
    running_mean: float | None = None
    running_min: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_min: float | None = None
    waiting_max: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_min: float | None = None
    kv_usage_max: float | None = None
    preemptions_delta: float | None = None
    preemptions_rate: float | None = None
    prompt_tokens_delta: float | None = None
    prompt_tokens_rate: float | None = None
    generation_tokens_delta: float | None = None
    generation_tokens_rate: float | None = None
    cap: float | None = None
    kv_capacity_tokens: float | None = None
    prefix_cache_hit_rate: float | None = None   # share of prompt tokens found cached, 0..1
    gpu_power_w_mean: float | None = None
    gpu_power_w_max: float | None = None
    gpu_util_pct_mean: float | None = None
    gpu_util_pct_max: float | None = None
    samples: int = 0
    raw: dict[str, float] = msgspec.field(default_factory=dict)


class GpuMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """GPU figures over a level's window from DCGM exporters (``--gpu-metrics-url``, one per node), or
    from NVML on this host when the server runs here and no exporter is given.

    Means over the window and over the GPUs seen; shares are 0..1. ``power_share`` is power over the
    power limit, ``sm_clock_share`` the SM clock over its maximum. Throughputs are bytes per second summed
    over the GPUs. ``energy_j`` is summed over the GPUs (``analysis.energy``): known only when every GPU had
    an energy counter or power readings over the window; the per-token figures divide it by the output
    tokens of the same window.
    """

    gpus: int = 0
    nodes: int = 0
    power_w_mean: float | None = None
    power_limit_w: float | None = None
    power_share: float | None = None
    sm_active: float | None = None          # DCGM_FI_PROF_SM_ACTIVE
    sm_occupancy: float | None = None       # DCGM_FI_PROF_SM_OCCUPANCY
    tensor_active: float | None = None      # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    dram_active: float | None = None        # DCGM_FI_PROF_DRAM_ACTIVE (memory bandwidth share)
    gpu_util: float | None = None           # DCGM_FI_DEV_GPU_UTIL / 100
    fb_used_share: float | None = None      # framebuffer used / (used + free)
    pcie_bytes_per_s: float | None = None   # DCGM_FI_PROF_PCIE_TX_BYTES + RX
    nvlink_bytes_per_s: float | None = None  # DCGM_FI_PROF_NVLINK_TX_BYTES + RX
    samples: int = 0
    raw: dict[str, float] = msgspec.field(default_factory=dict)
    source: str = "dcgm"                    # "dcgm" (exporters) or "nvml" (this host's GPUs, no profiling counters)
    sm_clock_mhz: float | None = None       # DCGM_FI_DEV_SM_CLOCK / NVML_CLOCK_SM
    sm_clock_max_mhz: float | None = None   # DCGM_FI_DEV_MAX_SM_CLOCK / nvmlDeviceGetMaxClockInfo
    sm_clock_share: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None        # "counter" (energy counters), "power" (power integrated), "mixed"
    joules_per_output_token: float | None = None
    output_tokens_per_joule: float | None = None


class SimLevelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulated engine itself recorded for a level run in virtual time."""

    preemptions: int = 0
    virtual_end_s: float = 0.0


class TurnMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """One turn index of multi-turn sessions over a level (turn 0: each conversation's first message).

    Over the level's successful requests of that turn (warm-up excluded), measurement window or not:
    a turn's figures show how latency grows with the history it carries.
    """

    turn: int
    requests: int = 0
    prompt_tokens_mean: float = 0.0
    ttft_ms: Latency = msgspec.field(default_factory=Latency)
    e2e_ms: Latency = msgspec.field(default_factory=Latency)


class KernelTcp(msgspec.Struct, frozen=True, kw_only=True):
    """What this host's kernel counted during a level (``driver.kernel_tcp``): SYN retransmissions of its
    connections and, where the server runs on this host (``server_here``), its listen queue overflowing."""

    syn_retransmits: int = 0
    listen_overflows: int = 0
    listen_drops: int = 0
    server_here: bool = False


class LevelResult(msgspec.Struct, kw_only=True):
    """Every metric of one load level. Keys are a contract: scripts read them from result.json."""

    label: str
    mode: str                      # "burst" | "steady" | "rate"
    concurrency: int | None = None
    rate: float | None = None
    phase: str | None = None       # why the sweep measured it: grow | confirm | refine | grid | ...
    attempt: int = 1               # re-measured levels (resume) count up; only the last is kept
    started_at: str | None = None  # wall clock (UTC, ISO 8601) when the level's load began
    t0_monotonic_ns: int | None = None   # the monotonic origin its relative times use
    num_requests: int = 0          # requests sent (warm-up excluded): completed + failed + hung
    completed: int = 0
    failed: int = 0                # failed by class (``errors``), hung included
    hung: int = 0                  # still in flight after the level's grace period
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    http_statuses: dict[str, int] = msgspec.field(default_factory=dict)   # status -> failed requests with it
    retry_after_s_max: float | None = None   # the longest Retry-After the server asked for
    dominant_error: str | None = None
    error_details: dict[str, int] = msgspec.field(default_factory=dict)   # the most common messages of the
                                   # failed requests (the server's own where it sent one), shortened -> count
    level_failed: bool = False
    token_mismatches: int = 0      # requests whose usage report claimed more tokens than streamed
    duration_s: float = 0.0        # length of the measurement window
    wall_s: float = 0.0            # first send to last end, whole level
    window_start_s: float = 0.0
    window_end_s: float = 0.0
    window_note: str = ""
    notes: list[str] = msgspec.field(default_factory=list)
    output_tokens: int = 0         # successful requests only
    input_tokens: int = 0
    failed_output_tokens: int = 0  # tokens streamed by requests that then failed: not throughput
    output_throughput: float = 0.0
    total_throughput: float = 0.0
    peak_output_throughput: float = 0.0
    request_throughput: float = 0.0
    achieved_concurrency: float = 0.0
    decoding_concurrency: float = 0.0
    peak_in_flight: int = 0
    peak_decoding: int = 0         # most requests simultaneously past their first token
    ttft_ms: Latency = msgspec.field(default_factory=Latency)
    tpot_ms: Latency = msgspec.field(default_factory=Latency)
    itl_ms: Latency = msgspec.field(default_factory=Latency)
    e2e_ms: Latency = msgspec.field(default_factory=Latency)
    send_lag_ms: Latency = msgspec.field(default_factory=Latency)
    connect_ms: Latency = msgspec.field(default_factory=Latency)
    kernel_tcp: KernelTcp | None = None   # this host's TCP counters over the level; None: not read
    token_source: str = "usage"
    throughput_ci_rel: float | None = None   # half-width of the 95 % CI on output tok/s, relative
    gain: float | None = None                # output tok/s over the previous lower level's, minus 1
    goodput_rps: float | None = None         # requests/s meeting every --slo, per request (DistServe)
    cut_off_at_stop: int = 0                 # requests cancelled when the level was stopped
    # In flight when the level ended without a drain (--no-drain at a precise stop, a first Ctrl-C): not measured.
    cancelled_at_end: int = 0
    telemetry: ServerTelemetry = msgspec.field(default_factory=ServerTelemetry)
    time_split: ServerTimeSplit | None = None   # the server's queue/prefill/decode histograms; None: not published
    client: ClientHealth = msgspec.field(default_factory=ClientHealth)
    gpu_note: str | None = None              # why local GPU telemetry is absent
    gpu_metrics: GpuMetrics | None = None    # DCGM exporters, when --gpu-metrics-url was given
    benchmark_s: float | None = None         # seconds of load spent (virtual time for the twin)
    sim: SimLevelInfo | None = None
    worker_clocks: list[WorkerClock] = msgspec.field(default_factory=list)   # --ray: each worker's clock offset
    turns: list[TurnMetrics] = msgspec.field(default_factory=list)   # per turn index, with --sessions
    prompts: PromptUse | None = None         # what its prompts were and what of them repeated (over HTTP)
    # --repeat N: every repeat's figures (the first is this level's own) and the intervals over them
    repeats: list[RepeatFigures] = msgspec.field(default_factory=list)
    repeat_stats: RepeatStats | None = None
    warm: WarmLevelInfo | None = None        # measured warm (the server kept loaded from the level before)
    verdict_then: str | None = None          # the verdict's headline as it stood once this level was in
    # Figures (field names above) its source did not measure: a level summary without per-request times
    # (``plateau import``). Their 0 is a placeholder, shown as unknown; empty for a measured level.
    unmeasured: list[str] = msgspec.field(default_factory=list)


INTERRUPT_NOTE = "ended by Ctrl-C at "   # how a level's note begins where a first Ctrl-C ended it


def ended_by_interrupt(level: LevelResult) -> bool:
    """Whether a first Ctrl-C ended ``level`` early (its figures cover what it ran until then)."""
    return any(n.startswith(INTERRUPT_NOTE) for n in level.notes)


class Plateau(msgspec.Struct, frozen=True):
    throughput: float
    concurrency: int               # first level on the plateau
    reached: bool                  # confirmed by two flat doublings
    levels: tuple[int, ...] = ()


class Knee(msgspec.Struct, frozen=True):
    concurrency: float             # interpolated
    throughput: float              # knee_fraction * plateau
    bracket: tuple[int, int]       # measured levels around it
    reached: bool


class Verdict(msgspec.Struct):
    """Why throughput stopped growing: the binding constraint, its evidence, what to try."""

    constraint: str    # load_generator | errors | admission_cap | kv_capacity | front_end | prefill | compute | ...
    headline: str
    confidence: Confidence
    evidence: list[str] = msgspec.field(default_factory=list)
    what_if: list[str] = msgspec.field(default_factory=list)
    suggestions: list[str] = msgspec.field(default_factory=list)
    estimated_cap: int | None = None
    predicted_throughput_doubled_cap: float | None = None
    secondary: str | None = None                  # a second constraint that binds too (same vocabulary)
    secondary_evidence: list[str] = msgspec.field(default_factory=list)
    to_separate: list[str] = msgspec.field(default_factory=list)   # measurements that would tell them apart
    gpu_evidence: list[str] = msgspec.field(default_factory=list)  # what the GPUs showed (DCGM, NVML)
    what_if_batch: float | None = None            # the decoding batch the cap what-if assumes
    what_if_model: str | None = None              # what predicted it: "TPOT slope" | "calibrated twin (...)"
    what_if_low: float | None = None              # the cap what-if's band, tok/s (None: none)
    what_if_high: float | None = None
    roofline: RooflinePlacement | None = None     # where the plateau sits against the hardware (--roofline)


class SloSummary(msgspec.Struct, frozen=True, kw_only=True):
    bounds: list[str]
    max_concurrency: int | None = None
    throughput: float | None = None


class SloBoundary(msgspec.Struct, frozen=True, kw_only=True):
    """``--find``: the largest load meeting every SLO (see ``analysis.slo_boundary``)."""

    find: str                                   # max-concurrency | max-rate
    bounds: list[str]
    value: float | None = None                  # largest measured load meeting every SLO
    reached: bool = False                       # a violating level was found above it
    interval: tuple[float, float] | None = None  # [meets, violates): the boundary lies inside
    binding: str | None = None                  # the SLO that breaks first
    binding_at_boundary_ms: float | None = None
    binding_beyond_ms: float | None = None
    shape: str | None = None                    # cliff | smooth
    goodput_rps: float | None = None            # requests/s meeting every SLO at the boundary
    throughput: float | None = None             # output tok/s there


class RateSummary(msgspec.Struct, frozen=True, kw_only=True):
    """An open-loop sweep: the rate range offered and where latency departs from its idle value."""

    synchronous_rate: float | None = None
    max_rate: float | None = None
    rates: list[float] = msgspec.field(default_factory=list)
    departure_rate: float | None = None
    low_load_e2e_p50_ms: float | None = None


class TargetPublic(msgspec.Struct, frozen=True, kw_only=True):
    """The target as given, credentials redacted."""

    url: str
    model: str | None = None
    endpoint: str = "completions"
    api_key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout_s: float = 600.0


class TwinInfo(msgspec.Struct, frozen=True, kw_only=True):
    preset: str
    speed: float = 1.0


class StepCoefficients(msgspec.Struct, frozen=True, kw_only=True):
    """The twin's step time ``t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read + s*slots`` (seconds;
    ``slots``: the admission cap), plus for a twin derived from the roofline the routed experts a step's
    tokens hit (``sim.step_model``)."""

    t0: float
    a: float = 0.0
    b: float = 0.0
    c: float = 0.0
    s: float = 0.0
    experts: int = 0
    expert_miss: float = 1.0
    expert_tokens: float = 1.0
    expert_s: float = 0.0


class EngineSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The simulated engine's key parameters (as ``plateau presets`` shows them)."""

    name: str
    policy: str
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int
    block_size: int
    step: StepCoefficients


Scalar = str | int | float | bool | None


class SimSpec(msgspec.Struct, frozen=True, kw_only=True):
    """``plateau sim``: the engine preset and the levels simulated in virtual time."""

    preset: str
    mode: str = "burst"
    overrides: dict[str, Scalar] = msgspec.field(default_factory=dict)   # what differs from the preset: step.a: 0.0005
    engine: EngineSummary | None = None
    concurrency: list[int] = msgspec.field(default_factory=list)
    num_requests: int | None = None
    duration_s: float | None = None


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What was run: the workload and the load (one level, a sweep, or a simulation)."""

    target: TargetPublic | None = None
    workload: WorkloadSpec = msgspec.field(default_factory=WorkloadSpec)
    prompt_tokens_source: str | None = None
    prompt_accuracy: dict[str, Scalar] = msgspec.field(default_factory=dict)   # how exact the prompt lengths are
    twin: TwinInfo | None = None
    sweep: SweepSettings | None = None
    level: LevelSpec | None = None
    sim: SimSpec | None = None
    repeat: int = 1                # --repeat: each level measured this many times, in interleaved rounds


class TargetRecord(msgspec.Struct, kw_only=True):
    """What the target turned out to be (discovered before the load, engine from ``/metrics``)."""

    url: str | None = None
    model: str | None = None
    models: list[str] = msgspec.field(default_factory=list)
    server: str | None = None
    server_version: str | None = None
    max_model_len: int | None = None
    tokenize: bool = False
    engine: str | None = None
    kind: str | None = None       # "sim" for results of ``plateau sim``
    preset: str | None = None


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str = "plateau-bench"
    version: str = ""


class HostInfo(msgspec.Struct, frozen=True, kw_only=True):
    hostname: str = ""
    platform: str = ""
    python: str = ""
    cpu_count: int | None = None


class ResultFile(msgspec.Struct, kw_only=True):
    """``result.json``: the whole result of a run, sweep or simulation."""

    schema_version: int = SCHEMA_VERSION
    kind: ResultKind = "run"
    created: str = ""
    tool: ToolInfo = msgspec.field(default_factory=ToolInfo)
    host: HostInfo = msgspec.field(default_factory=HostInfo)
    spec: RunSpec = msgspec.field(default_factory=RunSpec)
    target: TargetRecord = msgspec.field(default_factory=TargetRecord)
    levels: list[LevelResult] = msgspec.field(default_factory=list)
    plateau: Plateau | None = None
    knee: Knee | None = None
    stop_reason: str | None = None
    benchmark_seconds: float | None = None
    # benchmark-seconds until the verdict (constraint and plateau level) first stood as it ended
    time_to_verdict_s: float | None = None
    slo: SloSummary | None = None
    slo_boundary: SloBoundary | None = None
    rate_sweep: RateSummary | None = None
    verdict: Verdict | None = None


def result_schema() -> dict[str, object]:
    """The JSON Schema of ``result.json``, generated from the types."""
    schema: dict[str, object] = msgspec.json.schema(ResultFile)
    schema["$id"] = f"https://plateau-bench.invalid/schema/result-v{SCHEMA_VERSION}.json"
    schema["title"] = f"plateau-bench result.json, schema version {SCHEMA_VERSION}"
    return schema
