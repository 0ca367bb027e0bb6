"""Plain data that flows between the stages: request records in, level results out.

Every time on a ``RequestRecord`` is an integer count of nanoseconds on the monotonic clock,
relative to the start of its level (``t=0`` is when the level's load loop began). Chunk times
are taken when the chunk's bytes were read, before any parsing.

Records are produced identically by the HTTP driver and by the simulated engine, so every
analysis runs unchanged on both.
"""

from __future__ import annotations

import msgspec

SCHEMA_VERSION = 1

TOKEN_SOURCE_USAGE = "usage"          # the server's usage report
TOKEN_SOURCE_TOKENIZER = "tokenizer"  # counted locally with the tokenizer
TOKEN_SOURCE_ESTIMATE = "estimate"    # approximation (no usage, no tokenizer)
TOKEN_SOURCE_SIM = "sim"              # exact, from the simulated engine


class RequestRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One request, as the client (or the twin) saw it.

    ``chunk_ns``/``chunk_tokens`` list the content chunks: arrival time and how many output
    tokens each carried. They may be empty when only first-token and end times are known
    (the twin in fast mode); metrics then spread tokens evenly between first token and end.

    ``output_tokens`` counts tokens actually streamed, also on failed records (a truncated or
    broken stream keeps what arrived). ``usage_tokens`` is set only when the server's usage
    report claimed a count the stream refuted (more than it streamed); ``token_mismatch`` then
    holds. ``connect_ns`` is a duration, not a time: from ``sent_ns`` until a connection was
    ready (pooled or new, including any wait for a pool slot); None when none was obtained or
    the producer does not measure it (the twin).
    """

    index: int
    worker: int = -1
    scheduled_ns: int
    sent_ns: int
    end_ns: int
    first_token_ns: int | None = None
    first_reasoning_ns: int | None = None
    chunk_ns: list[int] = msgspec.field(default_factory=list)
    chunk_tokens: list[int] = msgspec.field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    token_source: str = TOKEN_SOURCE_USAGE
    error: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    warmup: bool = False
    usage_tokens: int | None = None
    connect_ns: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def token_mismatch(self) -> bool:
        """The usage report disagreed with the tokens streamed (``output_tokens`` is the latter)."""
        return self.usage_tokens is not None and self.usage_tokens != self.output_tokens


class Latency(msgspec.Struct, frozen=True):
    """Summary of one latency metric over a level, in milliseconds."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    count: int = 0


class LevelResult(msgspec.Struct, kw_only=True):
    """Every metric of one load level. Keys are a contract: scripts read them from result.json."""

    label: str
    mode: str                      # "burst" | "steady" | "rate"
    concurrency: int | None = None
    rate: float | None = None
    num_requests: int = 0          # requests sent (warm-up excluded)
    completed: int = 0
    failed: int = 0
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    dominant_error: str | None = None
    level_failed: bool = False
    duration_s: float = 0.0        # length of the measurement window
    wall_s: float = 0.0            # first send to last end, whole level
    window_start_s: float = 0.0
    window_end_s: float = 0.0
    window_note: str = ""
    output_tokens: int = 0
    input_tokens: int = 0
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
    token_source: str = TOKEN_SOURCE_USAGE
    throughput_ci_rel: float | None = None   # half-width of the 95 % CI on output tok/s, relative
    telemetry: dict[str, float] = msgspec.field(default_factory=dict)
    client: dict[str, float] = msgspec.field(default_factory=dict)
    extra: dict[str, object] = msgspec.field(default_factory=dict)
