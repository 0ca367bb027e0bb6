"""The engine's plain data: a request's state, one planned step, and what the engine reports.

``SimRequest`` is mutable on purpose and has ``__slots__``: the engine touches each request a
handful of times on its hot path, and attribute access on a slotted object is the cheapest there is.
While a request decodes, several of its fields are not maintained per step but derived from the
engine's decode-step counter (see ``engine``'s docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

PENDING, WAITING, PREFILL, DECODE, DONE = range(5)


class RequestRejected(Exception):
    """The engine can never serve this request (too long, larger than the KV cache, cap 0)."""


class StepRecord(NamedTuple):
    """One engine step, for traces. ``blocked`` says why waiting requests were not admitted."""

    t_start: float
    duration: float
    decode_seqs: int
    prefill_tokens: int
    kv_blocks_used: int
    waiting: int
    running: int
    preempted: int
    blocked: str          # "" (none waiting) | "cap" | "budget" | "kv" | "preempted" (this step)
    blocked_need: int     # blocks the blocked request needed (when blocked == "kv")


class EngineState(NamedTuple):
    now: float
    running: int
    waiting: int
    kv_blocks_used: int
    num_gpu_blocks: int
    block_size: int
    kv_usage: float
    preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int
    prefix_cache_queries: int = 0   # tokens looked up in the prefix cache (first admissions)
    prefix_cache_hits: int = 0      # of which found cached
    front_end_cpu_s: float | None = None   # the front end's busy time so far; None: the engine has none


class SimRequest:
    """One request inside the engine. Times are virtual seconds."""

    __slots__ = ("arrival", "base_g", "blocks", "computed", "end", "entered", "finish_g", "first_token", "hashes",
                 "key", "output", "payload", "preemptions", "prompt", "registered", "rid", "scheduled", "sent",
                 "shared", "state", "times", "worker")

    def __init__(self, rid: int, prompt: int, output: int, arrival: float, worker: int,
                 payload: object) -> None:
        self.rid = rid
        self.prompt = prompt
        self.output = output
        self.arrival = arrival
        self.entered = arrival  # when it reached the engine's queue: after the front end, when there is one
        self.worker = worker
        self.payload = payload
        self.state = PENDING
        self.sent = 0          # tokens sent; while decoding: tokens sent when it joined the batch
        self.computed = 0      # tokens in KV (not maintained while decoding: see ``key``)
        self.blocks = 0        # KV blocks held (not maintained while decoding)
        self.base_g = 0        # decode-step counter when it joined the decode batch
        self.key = 0           # computed - G while decoding
        self.finish_g = -1     # while decoding: the decode step at which it finishes
        self.scheduled = -1.0  # the start of the step that first admitted it (a preemption does not reset it)
        self.first_token = -1.0
        self.end = -1.0
        self.preemptions = 0
        self.times: list[float] | None = None
        # Prefix caching (``prefix_cache``): the chain keys of its full blocks, None when unknown;
        # the keys of the blocks it holds through the cache; the blocks registered so far.
        self.hashes: list[int] | None = None
        self.shared: list[int] = []
        self.registered = 0


class StepPlan:
    """One planned step (or ``k`` identical decode steps): what runs in it and for how long."""

    __slots__ = ("blocked", "blocked_need", "dt", "k", "kv_read", "n_decode", "preempted", "prefill_tokens",
                 "prefills", "t_start")

    def __init__(self, t_start: float) -> None:
        self.t_start = t_start
        self.dt = 0.0
        self.k = 1
        self.n_decode = 0
        self.prefills: list[tuple[SimRequest, int]] = []
        self.prefill_tokens = 0     # sum of the prefill chunks
        self.kv_read = 0            # KV tokens the prefill chunks attend to
        self.preempted = 0
        self.blocked = ""
        self.blocked_need = 0


FinishCallback = Callable[[SimRequest], None]
