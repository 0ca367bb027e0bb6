"""Parts of the result tree with a topic of their own: a level's repeats (``--repeat``), the prompts it
sent (what repeated, on purpose or not), the plateau's place against the hardware's ceiling
(``--roofline``) and the server's own time split. ``plateau_bench.result`` uses and
re-exports them; they are split out only to keep each module small.
"""

from __future__ import annotations

import msgspec


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """A between-repeat confidence interval: Student-t over the repeats' values (``analysis.repeats``)."""

    mean: float
    low: float | None = None       # None with fewer than two repeats
    high: float | None = None
    stdev: float | None = None     # sample standard deviation of the repeats' values
    n: int = 1


class RepeatFigures(msgspec.Struct, frozen=True, kw_only=True):
    """One repeat of a level (``--repeat``): its key figures; its records carry the same ``repeat``."""

    repeat: int                    # 1 = the level's own figures; records and telemetry are tagged with it
    started_at: str | None = None
    num_requests: int = 0
    completed: int = 0
    failed: int = 0
    hung: int = 0
    level_failed: bool = False     # its figures cannot stand: left out of the intervals
    duration_s: float = 0.0
    benchmark_s: float | None = None
    output_throughput: float = 0.0
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p50_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None


class RepeatStats(msgspec.Struct, frozen=True, kw_only=True):
    """Between-run intervals over a level's repeats that stand (``level_failed`` ones left out)."""

    n: int                         # repeats counted
    confidence: float = 0.95
    output_throughput: Interval | None = None
    ttft_p50_ms: Interval | None = None
    ttft_p99_ms: Interval | None = None
    tpot_p50_ms: Interval | None = None
    tpot_p99_ms: Interval | None = None
    itl_p50_ms: Interval | None = None
    itl_p99_ms: Interval | None = None
    e2e_p50_ms: Interval | None = None
    e2e_p99_ms: Interval | None = None


class RooflineLevel(msgspec.Struct, frozen=True, kw_only=True):
    """One measured level against the hardware's decode ceiling at its batch."""

    label: str
    batch: float                   # decoding sequences (the server's running gauge, else the client's count)
    output_throughput: float
    ceiling_tok_s: float
    share: float                   # measured / ceiling


class RooflinePlacement(msgspec.Struct, frozen=True, kw_only=True):
    """Where the plateau sits against the roofline (``--roofline``; see ``analysis.roofline_place``)."""

    model: str
    hardware: str                  # "8x H100-SXM, TP=8, EP=8, FP8 weights"
    batch: float                   # the decoding batch at the plateau's best level
    batch_source: str              # server | client | little (output tok/s x TPOT)
    context_tokens: float          # mean context a decoding sequence attends to (measured lengths)
    ceiling_tok_s: float           # the roofline's decode ceiling at that batch
    share: float                   # plateau throughput / ceiling (0.31 = 31 %)
    binding: str                   # weights | kv | compute | interconnect | overhead: what would bind there
    kv_capacity_tokens: int        # the KV cache the memory left after weights holds
    kv_sequences: int              # ... in sequences of the measured context
    text: str
    levels: list[RooflineLevel] = msgspec.field(default_factory=list)
    curve: list[tuple[float, float]] = msgspec.field(default_factory=list)   # (batch, ceiling tok/s), for plots
    what_if_ceiling_tok_s: float | None = None   # the ceiling at the what-if's batch
    what_if_capped: bool = False                 # the what-if predicted more and was lowered to the ceiling


class PromptUse(msgspec.Struct, kw_only=True):
    """What a level's requests carried as prompts, and how much of it an earlier request of the run had
    already sent (``workload.feed``): the share of prompt tokens a server's prefix cache may rightly find.

    Synthetic prompts are each new (``repeated == 0``); shared prefixes (``--prefix-groups``) repeat on
    purpose (``prefix_tokens``); a dataset repeats only with ``--allow-reuse`` (``repeated``); multi-turn
    sessions and traces repeat by design beyond what is counted here (``by_design``).
    """

    requests: int = 0              # requests that took a prompt (warm-up included)
    prompt_tokens: int = 0         # the prompt tokens they carried (as built)
    repeated: int = 0              # requests whose whole prompt an earlier request of the run had sent
    repeated_tokens: int = 0       # ... and their prompt tokens
    prefix_tokens: int = 0         # tokens of shared prefixes (--prefix-groups) the requests carried
    length_misses: int = 0         # prompts whose token count missed its target (their true count is kept)
    by_design: str | None = None   # "sessions" | "trace" | "given": the workload repeats on purpose, uncounted
    dataset_from: int | None = None   # a dataset's position (in its shuffled order) the level began at
    span: int = 0                  # prompt positions the level took: a dataset's next level starts this far on
    exhausted: bool = False        # the dataset ran out during the level: nothing more was sent

    @property
    def reusable_share(self) -> float:
        """The share of prompt tokens the workload itself repeats (what a prefix cache may find)."""
        if self.prompt_tokens <= 0:
            return 0.0
        return min(1.0, (self.repeated_tokens + self.prefix_tokens) / self.prompt_tokens)

    def add(self, other: PromptUse) -> None:
        """Fold another load process's part of the same level in."""
        self.requests += other.requests
        self.prompt_tokens += other.prompt_tokens
        self.repeated += other.repeated
        self.repeated_tokens += other.repeated_tokens
        self.prefix_tokens += other.prefix_tokens
        self.length_misses += other.length_misses
        self.by_design = self.by_design or other.by_design
        self.dataset_from = self.dataset_from if self.dataset_from is not None else other.dataset_from
        self.span = max(self.span, other.span)
        self.exhausted = self.exhausted or other.exhausted


class ServerPhase(msgspec.Struct, frozen=True, kw_only=True):
    """One interval of the server's own account of its requests over a level's window (``analysis.time_split``).

    ``mean``/``p99`` are None (unknown, not 0) with fewer than a handful of observations in the window;
    ``p99_above``: the p99 lies in the histogram's +Inf bucket, so it is above ``p99`` (its last finite bound).
    Milliseconds, except tokens per engine step.
    """

    observations: float = 0.0     # requests (steps, for tokens per step) the server counted in the window
    mean: float | None = None
    p99: float | None = None
    p99_above: bool = False


class ServerTimeSplit(msgspec.Struct, frozen=True, kw_only=True):
    """Where a level's time went by the server's own histograms (vLLM's names; see ``telemetry.engines``).

    A phase is None when the engine does not publish it. ``queue_ms``: waiting to be first scheduled;
    ``prefill_ms``: first scheduled to first token; ``decode_ms``: first to last token; ``inference_ms``:
    first scheduled to last token; ``server_ttft_ms``, ``server_e2e_ms``: the server's own TTFT and
    latency, from the request's arrival at its API server. ``outside_engine_ms`` is the client's mean TTFT
    less the server's mean queue + prefill: network, HTTP, tokenisation, the hop into the engine.
    """

    engine: str | None = None
    queue_ms: ServerPhase | None = None
    prefill_ms: ServerPhase | None = None
    decode_ms: ServerPhase | None = None
    inference_ms: ServerPhase | None = None
    server_ttft_ms: ServerPhase | None = None
    server_e2e_ms: ServerPhase | None = None
    step_tokens: ServerPhase | None = None
    client_ttft_mean_ms: float | None = None
    outside_engine_ms: float | None = None


class WarmLevelInfo(msgspec.Struct, frozen=True, kw_only=True):
    """How a warm level began (``analysis.warm``): the server was not emptied before it."""

    from_concurrency: int          # the workers streaming when it started
    settled_s: float               # from its start until the new concurrency was in flight
    dropped_s: float               # then until the token rate had settled (MSER-5): not in the window
    carried_in: int = 0            # requests sent in an earlier level that ended in this one (in its records)
    carried_out: int = 0           # in flight when its window closed: their tokens until then are in it
    waves: bool = False            # first tokens came in waves: the batches held whole waves
    drained_s: float = 0.0         # after its close, the sweep's end drained its last requests (in its
                                   # benchmark_s; the verdict had stood at the close)
    queued: bool = False           # ended once the server's gauges showed it only queued behind the batch of
                                   # the level it doubled (its window one period of that batch)


class SearchSettings(msgspec.Struct, frozen=True, kw_only=True):
    start: int = 1
    max_concurrency: int = 4096
    plateau_gain: float = 0.05
    knee_fraction: float = 0.95
    refine_steps: int = 3
    goal: str = "verdict"          # verdict | knee | curve: when the adaptive search may stop (``analysis.plateau``)


class SweepSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The sweep as asked for (closed loop: a grid or the adaptive search; open loop: rates)."""

    mode: str = "steady"                      # steady | burst | rate
    concurrencies: list[int] | None = None    # a fixed grid; None = adaptive search
    rates: list[float] | None = None          # open loop: given rates; None with mode rate = auto
    throughput_concurrency: int | None = None
    rate_steps: int | None = None
    burstiness: float | None = None
    search: SearchSettings = msgspec.field(default_factory=SearchSettings)
    precision: float = 0.02
    min_level_s: float = 5.0
    max_level_s: float = 60.0
    warmup: int = 0
    drain: bool = True                        # False (--no-drain): in flight at a precise stop cancelled
    warm: bool = False                        # steady levels measured warm (--warm-levels)
    level_stretch_s: float | None = None      # --max-level-time auto: a level may stretch up to this
    slo: list[str] = msgspec.field(default_factory=list)
    budget_s: float | None = None
    max_error_rate: float = 0.2
    find: str | None = None                   # max-concurrency | max-rate: the SLO boundary search
    resolution: float | None = None
    trace: bool = False                       # a trace replayed at time scales (--trace) ...
    time_scales: list[float] | None = None    # ... these, or None: 1, 2, 4, ... until it stops keeping up
