"""The load loop's interfaces and live state: what sends a request, what a level's run counts as it goes,
and one load process's part of a shared level (``driver.load`` runs the loop itself)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import msgspec

from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord

OnRecord = Callable[[RequestRecord], None]

DEAD_TARGET_FAILURES = 32   # connection failures in a row that end a level: the target is gone


class Sender(Protocol):
    """Sends one request and returns its record; per-request failures are on the record."""

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord: ...


@runtime_checkable
class PartialRecords(Protocol):
    """A sender that can say what a request still in flight has streamed so far (the HTTP client)."""

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None: ...


@dataclass
class LoadProgress:
    """Live counters of one level, updated by the loop; read them for a progress view."""

    phase: str = "warmup"      # "warmup" | "measure" | "done"
    sent: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    completed: int = 0         # finished without error (warm-up included)
    failed: int = 0
    output_tokens: int = 0     # of finished requests
    prompt_tokens: int = 0
    unsent: int = 0            # open-loop arrivals dropped after the duration
    cancelled: int = 0         # in-flight requests cut off by an abort (``stop``)
    cancelled_at_end: int = 0  # in-flight requests cancelled by ``cancel`` (the precision rule's stop)
    hung: int = 0              # still in flight when the drain's grace period ended
    draining: bool = False
    wall_bound: bool = False   # the level reached its ``max_wall_s``: nothing sent after it, silent requests hung
    hung_at_bound: int = 0     # of ``hung``: declared so by the bound on silence


class LoadShare(msgspec.Struct, frozen=True, kw_only=True):
    """One load process's part of a level (see the module docstring); the default is the whole level."""

    index_base: int = 0
    index_stride: int = 1
    worker_base: int = 0
    arrivals: list[int] | None = None   # open loop: offsets (ns from the measured phase's start)


def silent_at_bound(now_ns: int, last_signs: dict[int, tuple[int, bool]], server_alive_ns: int,
                    silence_ns: int) -> list[int]:
    """The requests the bound on silence declares hung (``driver.load``): silent for ``silence_ns``, unless
    they have had no token yet while the server still answers others (its last token, any request's, within
    ``silence_ns``). Those are queued behind requests being served, a cap's queue, not a server that stopped
    answering: the drain's grace period decides them.

    ``last_signs``: per request in flight, (its last token, or its send when none came; whether a token came).
    """
    server_answers = now_ns - server_alive_ns < silence_ns
    return [index for index, (last_ns, answered) in last_signs.items()
            if now_ns - last_ns >= silence_ns and (answered or not server_answers)]
