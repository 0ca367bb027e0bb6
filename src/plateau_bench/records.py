"""Plain data that flows between the stages: request records in, level results out.

Every time on a ``RequestRecord`` is an integer count of nanoseconds on the monotonic clock,
relative to the start of its level (``t=0`` is when the level's load loop began). Chunk times
are taken when the chunk's bytes were read, before any parsing.

Records are produced identically by the HTTP driver and by the simulated engine, so every
analysis runs unchanged on both. What the analysis makes of them is in ``plateau_bench.result``.
"""

from __future__ import annotations

import msgspec

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
    holds. ``connect_ns`` is a duration, not a time: from the start of the send until a connection was
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
    retry_after_s: float | None = None   # the server's Retry-After (seconds) on a refused request
    process: int | None = None           # the load process that sent it (--workers, --ray); None: the only one
    session: int = -1                    # multi-turn: which conversation (-1: a single-turn request)
    turn: int = -1                       # and which of its turns, from 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def token_mismatch(self) -> bool:
        """The usage report disagreed with the tokens streamed (``output_tokens`` is the latter)."""
        return self.usage_tokens is not None and self.usage_tokens != self.output_tokens
