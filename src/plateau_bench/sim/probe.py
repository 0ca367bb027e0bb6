"""The engine's own record of what limited it: ground truth for the diagnosis (the "oracle").

A ``Probe`` attached to an engine (``Engine(config, probe=Probe())``) is told about every committed
step and accumulates, in virtual seconds:

* **why waiting requests stayed out** during the step (``blocked_s`` by reason): ``none`` (nobody was
  waiting: everything that arrived was admitted), ``cap`` (``max_num_seqs`` requests were running),
  ``kv`` (the next request's first blocks did not fit in the free KV cache), ``budget`` (the step's
  token budget, ``max_num_batched_tokens``, was spent on running requests and earlier admissions),
  ``preempted`` (the cache ran short and the step evicted running requests: it admits nobody);
* **what the step time was spent on**, by the terms of ``StepModel``: ``prefill_s`` (prompt tokens
  and the context they attend to, ``b*prefill_tokens + c*prefill_kv_read``), and ``busy_s``;
* time integrals of the running count, the decode batch and the KV blocks held;
* the steps by their token count (``step_tokens``), for ``/metrics``' tokens per engine step.

It also keeps a ``Snapshot`` of those cumulative counters and of the gauges (running, waiting, KV
usage, preemptions, token counters) every ``sample_s`` of virtual time, as a scraper polling
``/metrics`` at that moment would see them: the gauges of the step running then (a multi-step jump
holds one batch, so every sample inside it sees that batch), the counters as of the last committed
step, and the cumulative shares up to that instant. ``window`` turns two
points of that series into shares over a window; ``server_samples`` turns it into the samples a
``/metrics`` scrape of vLLM would give (``records.TelemetrySample``), so a level run in
virtual time can carry server telemetry.

Cost: with no probe attached the engine pays one attribute test per committed step, and nothing it
computes changes: records are identical with and without a probe.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from plateau_bench.records import TelemetrySample
from plateau_bench.sim.request import StepPlan
from plateau_bench.units import NS

REASONS = ("none", "cap", "kv", "budget", "preempted")
_INDEX = {"": 0, "cap": 1, "kv": 2, "budget": 3, "preempted": 4}


class _Engine(Protocol):
    """What the probe reads from the engine (``core.EngineCore``'s fields)."""

    now: float
    preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    _blocks_used: int
    _num_blocks: int
    _bs: int
    _n_decode: int
    _b: float
    _c: float

    def _counts(self) -> tuple[int, int]: ...

    def front_end_cpu_at(self, t: float) -> float: ...


class Snapshot(NamedTuple):
    """Cumulative counters and gauges at virtual time ``t`` (seconds)."""

    t: float
    blocked_s: tuple[float, ...]   # by REASONS
    busy_s: float
    prefill_s: float
    running_s: float               # integral of the running count
    decoding_s: float              # integral of the decode batch
    kv_blocks_s: float             # integral of the KV blocks held
    running: int
    waiting: int
    kv_usage: float
    preemptions: int
    prompt_tokens: int
    generation_tokens: int
    front_end_cpu_s: float = 0.0   # the front end's busy time so far (``config.front_end_ms_per_request``)


class Window(NamedTuple):
    """What limited the engine over a window: shares of its length, and time averages."""

    start_s: float
    end_s: float
    blocked: dict[str, float]      # share of the window per reason (idle time counts as "none")
    prefill_share: float           # share of busy time spent on prefill
    busy_share: float
    running_mean: float
    decoding_mean: float
    kv_usage_mean: float
    preemptions: int
    front_end_busy_share: float = 0.0   # share of the window the front end was busy (1: it binds)

    @property
    def kv_share(self) -> float:
        """Admission held back by the KV cache: blocked on blocks, or evicting to make room."""
        return self.blocked["kv"] + self.blocked["preempted"]


class Probe:
    """See the module docstring. ``sample_s``: virtual seconds between snapshots (None: counters only,
    as the HTTP server keeps them for ``/metrics``)."""

    def __init__(self, sample_s: float | None = 0.1) -> None:
        if sample_s is not None and sample_s <= 0:
            raise ValueError("sample_s must be positive")
        self.sample_s = sample_s if sample_s is not None else float("inf")
        self.blocked_s = [0.0] * len(REASONS)
        self.busy_s = 0.0
        self.prefill_s = 0.0
        self.running_s = 0.0
        self.decoding_s = 0.0
        self.kv_blocks_s = 0.0
        self.snapshots: list[Snapshot] = []
        self._next = 0.0 if sample_s is not None else float("inf")
        # tokens per step (prefill chunks + decoded sequences) -> steps, for /metrics' iteration tokens
        self.step_tokens: dict[int, int] = {}

    def on_step(self, engine: _Engine, plan: StepPlan, running: int) -> None:
        """Account one committed plan (``k`` steps) run with ``running`` requests in the batch."""
        dt = plan.dt
        start = plan.t_start
        reason = _INDEX[plan.blocked]
        prefill = engine._b * plan.prefill_tokens + engine._c * plan.kv_read if plan.prefill_tokens else 0.0
        kv = engine._blocks_used
        tokens = plan.prefill_tokens + plan.n_decode   # a plan of k steps is k identical decode steps
        self.step_tokens[tokens] = self.step_tokens.get(tokens, 0) + plan.k
        if self._next <= start + dt:
            waiting = engine._counts()[1]
            while self._next < start:    # the engine sat idle: nothing running, nothing waiting
                self._record(self._next, engine, 0.0, 0, 0, 0, 0, reason, 0.0)
            while self._next <= start + dt:   # a scrape during the step sees the step's state
                part = self._next - start
                self._record(self._next, engine, part, running, waiting, kv, plan.n_decode, reason,
                             prefill * part / dt if dt > 0 else prefill)
        self.blocked_s[reason] += dt
        self.busy_s += dt
        self.prefill_s += prefill
        self.running_s += running * dt
        self.decoding_s += plan.n_decode * dt
        self.kv_blocks_s += kv * dt

    def _record(self, t: float, engine: _Engine, part: float, running: int, waiting: int, kv: int, decoding: int,
                reason: int, prefill: float) -> None:
        blocked = list(self.blocked_s)
        blocked[reason] += part
        self.snapshots.append(Snapshot(
            t, tuple(blocked), self.busy_s + part, self.prefill_s + prefill, self.running_s + running * part,
            self.decoding_s + decoding * part, self.kv_blocks_s + kv * part, running, waiting,
            kv / engine._num_blocks, engine.preemptions, engine.prompt_tokens_total,
            engine.generation_tokens_total, engine.front_end_cpu_at(t)))
        self._next = t + self.sample_s

    def snapshot(self, engine: _Engine) -> None:
        """Record the counters and gauges now (at the start and the end of a run)."""
        running, waiting = engine._counts()
        self._record(engine.now, engine, 0.0, running, waiting, engine._blocks_used, engine._n_decode, 0, 0.0)


def _at(snapshots: Sequence[Snapshot], t: float) -> tuple[float, ...]:
    """The cumulative counters at ``t``, interpolated linearly between snapshots."""
    def flat(s: Snapshot) -> tuple[float, ...]:
        return (*s.blocked_s, s.busy_s, s.prefill_s, s.running_s, s.decoding_s, s.kv_blocks_s, float(s.preemptions),
                s.front_end_cpu_s)

    if t <= snapshots[0].t:
        return flat(snapshots[0])
    for a, b in itertools.pairwise(snapshots):
        if t <= b.t:
            fa, fb = flat(a), flat(b)
            w = (t - a.t) / (b.t - a.t) if b.t > a.t else 1.0
            return tuple(x + (y - x) * w for x, y in zip(fa, fb, strict=True))
    return flat(snapshots[-1])


def window(snapshots: Sequence[Snapshot], start_s: float, end_s: float, num_blocks: int) -> Window | None:
    """Shares and averages over ``[start_s, end_s]`` (None without snapshots or with an empty window)."""
    if not snapshots or end_s <= start_s:
        return None
    a, b = _at(snapshots, start_s), _at(snapshots, end_s)
    d = [y - x for x, y in zip(a, b, strict=True)]
    length = end_s - start_s
    n = len(REASONS)
    blocked = {r: d[i] / length for i, r in enumerate(REASONS)}
    busy, prefill, running, decoding, kv_blocks, preemptions, front_end = d[n:]
    blocked["none"] += max(0.0, 1.0 - sum(blocked.values()))   # idle: nothing waiting either
    return Window(start_s, end_s, blocked, prefill / busy if busy > 0 else 0.0, busy / length,
                  running / length, decoding / length, kv_blocks / length / num_blocks, round(preemptions),
                  front_end / length)


def server_samples(snapshots: Sequence[Snapshot], kv_capacity_tokens: int, *, interval_s: float = 0.5,
                   engine: str = "vllm", front_end: bool = False) -> list[TelemetrySample]:
    """The snapshots as a ``/metrics`` scraper polling every ``interval_s`` would have recorded them.

    ``front_end``: the engine models its API server (``config.front_end_ms_per_request``), whose busy
    time is the ``process_cpu`` counter (``process_cpu_seconds_total``); without one there is no process
    to measure, and the samples stay as they were.
    """
    out: list[TelemetrySample] = []
    due = -1.0
    for s in snapshots:
        if s.t < due:
            continue
        due = s.t + interval_s
        values = {
            "running": float(s.running), "waiting": float(s.waiting), "kv_usage": s.kv_usage,
            "preemptions": float(s.preemptions), "prompt_tokens": float(s.prompt_tokens),
            "generation_tokens": float(s.generation_tokens), "kv_capacity_tokens": float(kv_capacity_tokens)}
        if front_end:
            values["process_cpu"] = s.front_end_cpu_s
        out.append(TelemetrySample(t_ns=round(s.t * NS), engine=engine, values=values))
    return out
