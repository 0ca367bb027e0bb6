"""Figures a source states, checked before they become a level: a count, time, rate or latency no
benchmark can measure (negative, zero where it cannot be, more completed than sent, beyond any plausible
size) is refused in one line naming the source, the level or request, and the field."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.records import RequestRecord
from plateau_bench.spec import MAX_REQUEST_TOKENS

if TYPE_CHECKING:
    from plateau_bench.importers.common import Summary

# No count, time (s or ms), rate or token figure a benchmark reports comes near this: beyond it, a typo or
# garbage (and 1e300 overflows every conversion to integer nanoseconds).
MAX_FIGURE = 1e15

_COUNTS = ("num_requests", "completed", "failed", "peak_in_flight", "peak_decoding")
_AMOUNTS = ("duration_s", "wall_s", "output_tokens", "input_tokens", "output_throughput", "input_throughput",
            "total_throughput", "peak_output_throughput", "request_throughput", "achieved_concurrency",
            "decoding_concurrency", "output_len", "input_len")
_LATENCIES = ("ttft", "tpot", "itl", "e2e")


def plausible(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= MAX_FIGURE


def check_summary(s: Summary, source: str) -> None:
    """Every figure of ``s`` within what a measurement can be (``ConfigError`` naming the first that is not)."""
    def bad(name: str, value: float, rule: str) -> ConfigError:
        return ConfigError(f"{source}: level {s.label}: {name} is {value:g}: {rule}")

    if s.concurrency is not None and s.concurrency < 1:
        raise bad("concurrency", s.concurrency, "it must be at least 1")
    if s.rate is not None and not (s.rate > 0 and (math.isinf(s.rate) or s.rate <= MAX_FIGURE)):
        raise bad("rate", s.rate, "it must be a positive number of requests/s (or inf)")
    for name in (*_COUNTS, *_AMOUNTS):
        value = getattr(s, name)
        if value is not None and not (value >= 0 and plausible(value)):
            raise bad(name, value, "it must be a finite number >= 0")
    for name in _LATENCIES:
        stats = getattr(s, name)
        for stat, value in msgspec.structs.asdict(stats).items() if stats is not None else ():
            if value is not None and not (value >= 0 and plausible(value)):
                raise bad(f"{name} {stat}", value, "a latency must be a finite number of ms >= 0")
    sent = s.num_requests
    for name in ("completed", "failed"):
        value = getattr(s, name)
        if sent is not None and value is not None and value > sent:
            raise bad(name, value, f"more than the {sent} requests sent")


def check_records(records: Sequence[RequestRecord], source: str, concurrency: int | None) -> None:
    """Each request's times in order (sent <= first token <= end) and its counts not negative."""
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"{source}: concurrency is {concurrency}: it must be at least 1")
    for r in records:
        first = r.first_token_ns
        if r.end_ns < r.sent_ns or (first is not None and not r.sent_ns <= first <= r.end_ns):
            raise ConfigError(f"{source}: request {r.index}: its times are out of order (sent, first token, end "
                              "must not go backwards: a negative TTFT or latency)")
        if r.output_tokens < 0 or r.prompt_tokens < 0:
            raise ConfigError(f"{source}: request {r.index}: a negative token count")
        if max(r.output_tokens, r.prompt_tokens) > MAX_REQUEST_TOKENS:   # its tokens are spread in memory
            raise ConfigError(f"{source}: request {r.index}: {max(r.output_tokens, r.prompt_tokens):,} tokens, more "
                              f"than any model serves in one request (at most {MAX_REQUEST_TOKENS:,})")
