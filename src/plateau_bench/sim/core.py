"""The engine's state, shared by the scheduler (``schedule``) and the step commit (``commit``).

``EngineCore`` only holds the fields; ``Scheduler`` and ``Committer`` add the two halves of a step
as methods on it, and ``engine.Engine`` combines them behind the public API. They are methods of
one object, not functions over a state record, because the hot path reads these fields many
times per step and ``self._x`` is the cheapest access Python has.

KV blocks are counted, not tracked per block: ``_blocks_used`` is the total held, prefilling
requests keep their own ``blocks``, and decoders are counted per residue class of their context
length modulo ``block_size`` (``_phase``), which says how many of them start a new block at
decode step ``G``.
"""

from __future__ import annotations

from collections import deque

from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.prefix_cache import PrefixCache
from plateau_bench.sim.probe import Probe
from plateau_bench.sim.request import FinishCallback, SimRequest, StepPlan, StepRecord


class EngineCore:
    """The fields of ``engine.Engine``; see the module docstring."""

    # Multi-step jumps; tests turn them off to check that they change nothing.
    jump = True

    def __init__(self, config: EngineConfig, *, chunks: bool = False, trace: bool = False,
                 on_finish: FinishCallback | None = None, probe: Probe | None = None, rid_base: int = 0) -> None:
        config.validate()
        self.config = config
        self.on_finish = on_finish
        self.probe = probe
        self.chunks = chunks
        self.step_times = chunks    # keep every decode step's end (``_decode_times``): chunks, or a caller's
        self.trace: list[StepRecord] | None = [] if trace else None
        self.now = 0.0
        self._bs = config.block_size
        self._num_blocks = config.num_gpu_blocks
        self._cap = config.max_num_seqs
        self._budget = config.max_num_batched_tokens
        self._mixed = config.policy == "mixed"
        self._model = model = config.step_at_cap      # the per-slot cost paid for every slot of the cap
        # The step-time coefficients, read once per step on the hot path (same formula as step_time).
        self._t0, self._a, self._b, self._c = model.t0, model.a, model.b, model.c
        self._experts = model.experts
        self._max_len = config.max_model_len
        self._kv_capacity = self._num_blocks * self._bs
        self._g = 0
        self._next_rid = rid_base   # request ids unique across the replicas of a ReplicaSet
        self._pending: list[tuple[float, int, SimRequest]] = []
        self._waiting: deque[SimRequest] = deque()
        self._running: dict[int, SimRequest] = {}          # admission order
        self._prefilling: list[SimRequest] = []            # running, not yet decoding, admission order
        # Decoders by the decode step at which they finish: a heap of those steps, and per step the
        # requests in join order. A step is in the heap exactly while it has a bucket (maybe emptied
        # by preemptions); grouping keeps the heap small and its entries plain ints.
        self._finish_steps: list[int] = []
        self._finishing: dict[int, list[SimRequest]] = {}
        self._n_decode = 0
        self._phase = [0] * self._bs                      # decoders per (context - G) mod block_size
        self._key_sum = 0                                  # sum of (context - G) over decoders
        self._blocks_used = 0
        self._decode_times: list[float] = []               # end time of decode step g at index g-1
        self._inflight: StepPlan | None = None
        self._cache = PrefixCache() if config.prefix_caching else None
        self._need = 0                                     # blocks a cached admission lacked
        self._reserve = config.reserve_kv
        self._reserved = 0                                 # reserve_kv: blocks promised to running requests
        # The front end (``config.front_end_ms_per_request``): one process serving requests in arrival
        # order, so a request leaves it at max(its arrival, the previous one's exit) + the cost.
        self._front_end_s = config.front_end_ms_per_request / 1e3
        self._front_end_free = 0.0                         # when the front end finishes its last request
        self._front_end_exits: deque[float] = deque()      # exits still ahead of ``now``, in order
        self.front_end_busy_s = 0.0                        # CPU seconds it has spent (process_cpu_seconds)
        self.preemptions = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    def _full_blocks(self, req: SimRequest) -> int:
        """The blocks a request holds at its longest (its last token is never cached, as ``submit`` counts)."""
        return -(-(req.prompt + req.output - 1) // self._bs)

    def _unreserve(self, req: SimRequest) -> None:
        """A running request leaves (finished, preempted, aborted): its promise is released."""
        if self._reserve:
            self._reserved -= self._full_blocks(req)

    def _counts(self) -> tuple[int, int]:
        """Running and waiting requests (waiting includes arrivals not yet pulled), as /metrics shows them.

        Requests still in the front end are in neither: vLLM counts a request once its engine core has it.
        """
        return len(self._running), len(self._waiting) + len(self._pending) - self.in_front_end()

    def in_front_end(self) -> int:
        """Requests the front end has not handed to the engine yet (at ``now``)."""
        exits = self._front_end_exits
        while exits and exits[0] <= self.now:
            exits.popleft()
        return len(exits)

    def front_end_cpu_at(self, t: float) -> float:
        """The front end's CPU seconds up to ``t`` (the part of the request in hand included).

        Exact when every request submitted so far arrived by ``t`` (the probe asks about the step just
        committed, before its finishes submit more): the front end is then busy without a gap from ``t``
        until it is free, so the work still ahead of it is ``free - t``.
        """
        return self.front_end_busy_s - max(0.0, self._front_end_free - t)
