"""The simulated continuous-batching engine: a vLLM-v1-style scheduler in virtual time.

Each call to the scheduler plans one *step* (one forward pass of the model):

1. Requests whose arrival time has come move to the waiting queue (FCFS).
2. Every running decode sequence gets one token of the step's budget (``max_num_batched_tokens``)
   and, when its next token starts a new KV block, one more block. When the cache has no free
   block, the most recently admitted running request is **preempted** (recompute mode, as in
   vLLM v1): its blocks are freed and it goes back to the head of the waiting queue. Tokens it
   already sent stay sent; prompt and sent tokens are recomputed as a prefill when it returns.
3. Partially prefilled requests continue (chunked prefill), then waiting requests are admitted in
   order while ``running < max_num_seqs``, budget is left and their first chunk's blocks fit.
   Under ``policy="prefill_first"`` (SGLang) a step holds either prefill chunks or decodes.
4. The step lasts ``StepModel.step_time(decode_seqs, prefill_tokens, kv_tokens_read)``. When it
   ends, each decode sequence has one more token and each completed prefill samples its first
   (or, after a preemption, its next) token.

Speed: a decoding request is not touched per step. Its token count is arithmetic on a global
decode-step counter ``G`` (``sent = sent_at_join + G - g_at_join``), finishes come from a heap
of the steps at which they happen (requests grouped per step), KV blocks are counted per residue
class of the context length modulo ``block_size`` (the classes that cross a block boundary at
step ``G`` are known), and while the batch composition cannot change (no prefill, nothing
admissible, no arrival, no finish, no block shortage) the engine jumps over many decode steps with
the closed form of ``StepModel.decode_run_time``. Only requests that start, finish or are
preempted cost Python work, and the per-request paths (submit, admission, first token, finish)
keep totals in locals and touch each request a handful of times.

The engine never sleeps and does no I/O: ``run_until(t)`` advances the virtual clock to ``t``.
A step that would end after ``t`` stays planned (admission and preemption already applied) and
is committed by a later call, so a real-time driver (the HTTP server) sees tokens when the step
that produced them ends.

Layout: ``request`` (the data types), ``core`` (the engine's fields), ``schedule`` (planning a
step: steps 1-3), ``commit`` (committing it: step 4); ``Engine`` here is the public API over them.
"""

from __future__ import annotations

import heapq

from plateau_bench.sim.commit import Committer
from plateau_bench.sim.request import (
    DECODE,
    DONE,
    PENDING,
    PREFILL,
    WAITING,
    EngineState,
    FinishCallback,
    RequestRejected,
    SimRequest,
    StepRecord,
)
from plateau_bench.sim.schedule import Scheduler

__all__ = ["DECODE", "DONE", "PENDING", "PREFILL", "WAITING", "Engine", "EngineState", "FinishCallback",
           "RequestRejected", "SimRequest", "StepRecord"]

_INF = float("inf")


class Engine(Scheduler, Committer):
    """See the module docstring. ``on_finish`` is called once per request when it ends.

    ``Engine(config, *, chunks=False, trace=False, on_finish=None, probe=None)``: ``chunks`` keeps every
    token's time on its request, ``trace`` keeps a ``StepRecord`` per step (both cost speed), ``probe``
    (``sim.probe.Probe``) records what kept waiting requests out, step by step.
    """

    # -- public API ---------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, *, arrival: float | None = None,
               worker: int = -1, payload: object = None, block_hashes: list[int] | None = None) -> SimRequest:
        """Queue a request arriving at ``arrival`` (default: now). Raises RequestRejected.

        ``block_hashes``: the chain keys of the full blocks of its tokens, prompt then output
        (``prefix_cache.block_hashes``), for prefix caching; without them it is never cached.
        """
        total = prompt_tokens + max_tokens
        # One test for the common case; _reject re-checks in order to name the first broken rule.
        # (A request needs ceil((total - 1) / block_size) blocks: more than the cache has exactly
        # when total - 1 exceeds the cache's token capacity.)
        if (max_tokens < 1 or prompt_tokens < 1 or total > self._max_len or self._cap == 0
                or total - 1 > self._kv_capacity):
            self._reject(prompt_tokens, max_tokens)
        now = self.now
        # Same choice as max(arrival, now), including which of two equal values is kept.
        when = now if arrival is None else (now if now > arrival else arrival)
        req = SimRequest(self._next_rid, prompt_tokens, max_tokens, when, worker, payload)
        self._next_rid += 1
        if self.chunks:
            req.times = []
        if block_hashes and self._cache is not None:
            req.hashes = block_hashes
        if self._front_end_s:
            self._through_front_end(req, when)
        elif when <= now and self._inflight is None:
            req.state = WAITING
            self._waiting.append(req)
        else:
            heapq.heappush(self._pending, (when, req.rid, req))
        return req

    def _through_front_end(self, req: SimRequest, when: float) -> None:
        """Queue the request behind the front end: it reaches the engine when the front end is done with it."""
        exit_at = (self._front_end_free if self._front_end_free > when else when) + self._front_end_s
        self._front_end_free = exit_at
        self.front_end_busy_s += self._front_end_s
        self._front_end_exits.append(exit_at)
        req.entered = exit_at
        heapq.heappush(self._pending, (exit_at, req.rid, req))

    def set_block_hashes(self, req: SimRequest, block_hashes: list[int]) -> None:
        """Give a request submitted without them its block keys (see ``submit``), before it is admitted."""
        if req.state in (PENDING, WAITING) and req.preemptions == 0 and block_hashes and self._cache is not None:
            req.hashes = block_hashes

    def _reject(self, prompt_tokens: int, max_tokens: int) -> None:
        cfg = self.config
        if max_tokens < 1:
            raise RequestRejected(f"max_tokens must be at least 1, got {max_tokens}.")
        if prompt_tokens < 1:
            raise RequestRejected("the prompt is empty.")
        if prompt_tokens + max_tokens > cfg.max_model_len:
            raise RequestRejected(
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you "
                f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion).")
        if self._cap == 0:
            raise RequestRejected("the engine admits no requests (max_num_seqs is 0).")
        needed = -(-(prompt_tokens + max_tokens - 1) // self._bs)
        if needed > self._num_blocks:
            raise RequestRejected(
                f"the request needs {prompt_tokens + max_tokens - 1} KV-cache tokens but the cache holds "
                f"{self._num_blocks * self._bs}.")

    def abort(self, req: SimRequest) -> None:
        """Drop a request (its client went away): free its KV blocks; no finish callback."""
        state = req.state
        if state == DONE:
            return
        req.state = DONE
        if state == WAITING:
            self._waiting.remove(req)
        elif state == PREFILL:
            del self._running[req.rid]
            self._unreserve(req)
            self._prefilling.remove(req)
            self._blocks_used -= self._freed(req, req.blocks, req.computed)
        elif state == DECODE:
            del self._running[req.rid]
            self._unreserve(req)
            computed = req.key + self._g
            self._leave_decode(req)
            freed = self._freed(req, -(-computed // self._bs), computed)
            if self._inflight is not None and self._inflight.n_decode and computed % self._bs == 0:
                freed += 1   # the planned step already gave it the block for its next token
            self._blocks_used -= freed
        # PENDING: skipped when it would arrive (see _pull_arrivals).

    def sent_tokens(self, req: SimRequest) -> int:
        """Tokens this request has produced so far (as of the last committed step)."""
        if req.state == DECODE:
            return req.sent + self._g - req.base_g
        return req.sent

    def state(self) -> EngineState:
        used = self._blocks_used
        cache = self._cache
        running, waiting = self._counts()
        return EngineState(self.now, running, waiting, used,
                           self._num_blocks, self._bs, used / self._num_blocks, self.preemptions,
                           self.prompt_tokens_total, self.generation_tokens_total,
                           cache.queries if cache is not None else 0, cache.hits if cache is not None else 0,
                           self.front_end_cpu_at(self.now) if self._front_end_s else None)

    def next_event_time(self) -> float | None:
        """When the engine next has something to do: the planned step's end, or the next arrival."""
        if self._inflight is not None:
            return self._inflight.t_start + self._inflight.dt
        if self._running or self._waiting:
            return self.now
        if self._pending:
            return self._pending[0][0]
        return None

    @property
    def idle(self) -> bool:
        return not (self._running or self._waiting or self._pending or self._inflight)

    def run(self) -> None:
        """Run until every submitted request has finished (callbacks may submit more)."""
        self.run_until(_INF)

    def run_until(self, t_limit: float) -> None:
        """Commit every step that ends at or before ``t_limit``; leave the clock at ``t_limit``
        when the engine is idle (a finite limit), else at the start of the planned step."""
        while True:
            plan = self._inflight
            if plan is None:
                plan = self._plan(t_limit)
                if plan is None:
                    if self._pending and self._pending[0][0] <= t_limit:
                        self.now = max(self.now, self._pending[0][0])
                        continue
                    if t_limit != _INF:
                        self.now = max(self.now, t_limit)
                    return
            if plan.t_start + plan.dt > t_limit:
                self._inflight = plan
                return
            self._inflight = None
            self._commit(plan)
