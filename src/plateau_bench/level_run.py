"""What running one load level yields, before any statistic: the contract between runners and analysis.

A runner (real HTTP in ``driver.runner``, virtual time in ``sim.runner``) drives one level and returns
a ``LevelRun``: the request records, the telemetry and load-generator samples, and what happened to
the level itself (stopped early, requests left hanging, the target gone). It computes nothing: one
pure function, ``analysis.level.build_level``, turns a ``LevelRun`` into a ``LevelResult`` for both.

A steady level may end as soon as its estimate is precise enough. That rule is the analysis's, so the
sweep passes it in as a ``StopRule``; the runner only asks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import msgspec

from plateau_bench.records import HealthSample, RequestRecord, TelemetrySample
from plateau_bench.result import KernelTcp, PromptUse, WarmLevelInfo, WorkerClock
from plateau_bench.spec import LevelSpec


class LevelRun(msgspec.Struct, kw_only=True):
    """The raw outcome of one level (times relative to ``t0_monotonic_ns``)."""

    level: LevelSpec
    label: str
    records: list[RequestRecord]
    server_samples: list[TelemetrySample] = msgspec.field(default_factory=list)
    gpu_samples: list[TelemetrySample] = msgspec.field(default_factory=list)
    dcgm_samples: list[TelemetrySample] = msgspec.field(default_factory=list)   # DCGM exporters, all nodes
    health_samples: list[HealthSample] = msgspec.field(default_factory=list)
    started_at: str | None = None         # wall clock, UTC, ISO 8601
    t0_monotonic_ns: int | None = None
    cut_off_at_stop: int = 0              # cancelled by an abort (Ctrl-C, the target gone)
    cancelled_at_end: int = 0             # in flight when the precision rule ended it (sent after its window)
    target_gone: bool = False             # ended after too many refused connections in a row
    engine: str | None = None             # what /metrics identified
    gpu_note: str | None = None           # why local GPU telemetry is absent
    gpus_serve: bool = False              # the server runs on this host: its GPUs are the ones NVML read
    kernel_tcp: KernelTcp | None = None   # this host's TCP counters over the level (``driver.kernel_tcp``)
    benchmark_s: float | None = None      # seconds of load spent (virtual time for the twin)
    sim_preemptions: int | None = None
    sim_virtual_end_s: float | None = None
    notes: list[str] = msgspec.field(default_factory=list)
    load_processes: int = 1               # load processes that ran the level (``--workers``)
    lost_workers: int = 0                 # load processes that died during the level
    worker_clocks: list[WorkerClock] = msgspec.field(default_factory=list)   # workers on other clocks (Ray)
    prompts: PromptUse | None = None      # what its prompts were and what of them repeated (``workload.feed``)
    # A warm level (``analysis.warm_level``): its window, chosen while it ran; what the requests still
    # streaming at its close had streamed (their tokens count in the window); where the level began.
    window_ns: tuple[int, int] | None = None
    window_note: str = ""
    in_flight: list[RequestRecord] = msgspec.field(default_factory=list)
    level_start_ns: int = 0
    warm: WarmLevelInfo | None = None


class WarmEnd(msgspec.Struct, kw_only=True):
    """How a sweep's live closed loop ended: the records of its last requests (drained; they belong to the
    last warm level), how many were cancelled instead (``--no-drain``), and the seconds it took."""

    records: list[RequestRecord]
    cancelled: int = 0
    seconds: float = 0.0


GAUGE_SCRAPES = 5   # /metrics scrapes a window holds before its gauges' means compare with the client's
QUEUED_NOTE = ("warm: ended on the server's gauges once its concurrency was reached: no more running than at the "
               "level it doubled, the rest in the engine's queue; its window holds one period of that batch")
WHOLE_LEVEL_NOTE = ("warm: the level's time ran out too soon after its concurrency was reached for a window of "
                    "its own: window over the whole level, the change included")


class WarmCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What a warm level's stop rule says at a check (``analysis.warm``)."""

    window_ns: tuple[int, int] | None   # None: no window yet (the concurrency not reached, or too little data)
    tok_s: float | None
    ci_rel: float | None
    done: bool
    waves: bool = False                 # first tokens come in waves: the batches hold whole waves
    whole_level: bool = False           # the time ran out before a window of its own: the whole level
    queued: bool = False                # ended on the server's gauges: only a queue was added (``analysis.warm``)


class StopRequested(Exception):
    """Raised by a level runner asked for a level after the user asked to stop (a first Ctrl-C): the
    sweep ends there, keeping every level it finished."""


class StopRule(Protocol):
    """Decides when a steady or open-loop level has been measured long enough."""

    @property
    def precision(self) -> float: ...

    @property
    def max_s(self) -> float: ...

    @property
    def bound_s(self) -> float:
        """The hard limit: ``max_s``, or later for a level that may stretch (``--max-level-time auto``)."""
        ...

    @property
    def held_running(self) -> float | None:
        """A warm level of the doubling chain: the server's most running at the level it doubled (its gauges
        may then end this one, ``warm_check``); None: no such level, or no gauges there."""
        ...

    def warm_check(self, streams: Sequence[RequestRecord], *, level_start_ns: int, settled_ns: int | None,
                   now_ns: int, workers: int, min_window_s: float, cycle_s: float = 0.0,
                   gauges: Mapping[str, float] | None = None) -> WarmCheck:
        """Whether a warm level may end now, and over which window (``analysis.warm``): ``streams`` are the
        successful requests finished in the level and what those in flight streamed until ``now_ns``; the
        window holds at least ``min_window_s`` (and the rule's own minimum); ``cycle_s``: the request cycle
        expected at this concurrency, for batches of whole cycles; ``gauges``: the server's since the
        concurrency was reached (``telemetry.summary`` values), which may end a level that only queued."""
        ...

    def ci_rel(self, records: Sequence[RequestRecord], *, workers: int,
               complete_until_ns: int) -> float | None: ...

    def done(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
             complete_until_ns: int) -> bool: ...

    def check(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
              complete_until_ns: int) -> tuple[float | None, bool]:
        """``ci_rel`` and ``done`` at once (one pass over the records where they would take two)."""
        ...

    def first_stop_s(self, records: Sequence[RequestRecord], *, workers: int, check_s: float) -> float | None:
        """For a level already run to its end (the twin's): the first check, every ``check_s`` or so,
        at which ``done`` would have held on the records finished by then (None: it never did)."""
        ...

    def first_stop(self, records: Sequence[RequestRecord], *, workers: int,
                   check_s: float) -> tuple[float, bool] | None:
        """``first_stop_s`` and whether the rule stopped there on its confidence interval (``may_cancel_in_flight``)."""
        ...

    def may_cancel_in_flight(self, ci_rel: float | None, elapsed_s: float) -> bool:
        """Whether a closed-loop level stopping now, at this ``ci_rel``, may cancel its requests in flight
        instead of draining them (its window ends before the oldest of them was sent)."""
        ...


class LevelRunner(Protocol):
    """Runs one level; per-request failures are on the records, never raised.

    ``repeat`` (``--repeat``) numbers the measurements of the same level: repeat ``k`` draws its
    randomness (arrival schedule; on the twin the request lengths too) from ``seed + k - 1``, so
    repeats are distinct draws and the same sweep gives the same repeats again. ``attempt`` numbers a
    level measured again (resume); with ``repeat`` it keys the level's own prompts (``workload.feed``).
    """

    async def run_level(self, level: LevelSpec, *, label: str,
                        on_record: Callable[[RequestRecord], None] | None,
                        stop_rule: StopRule | None, repeat: int = 1, attempt: int = 1) -> LevelRun: ...
