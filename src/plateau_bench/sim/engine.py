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
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from operator import attrgetter
from typing import NamedTuple

from plateau_bench.sim.config import EngineConfig

PENDING, WAITING, PREFILL, DECODE, DONE = range(5)
_INF = float("inf")
_rid = attrgetter("rid")


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


class SimRequest:
    """One request inside the engine. Times are virtual seconds."""

    __slots__ = ("arrival", "base_g", "blocks", "computed", "end", "finish_g", "first_token", "key",
                 "output", "payload", "preemptions", "prompt", "rid", "sent", "state", "times", "worker")

    def __init__(self, rid: int, prompt: int, output: int, arrival: float, worker: int,
                 payload: object) -> None:
        self.rid = rid
        self.prompt = prompt
        self.output = output
        self.arrival = arrival
        self.worker = worker
        self.payload = payload
        self.state = PENDING
        self.sent = 0          # tokens sent; while decoding: tokens sent when it joined the batch
        self.computed = 0      # tokens in KV (not maintained while decoding: see ``key``)
        self.blocks = 0        # KV blocks held (not maintained while decoding)
        self.base_g = 0        # decode-step counter when it joined the decode batch
        self.key = 0           # computed - G while decoding
        self.finish_g = -1     # while decoding: the decode step at which it finishes
        self.first_token = -1.0
        self.end = -1.0
        self.preemptions = 0
        self.times: list[float] | None = None


class _Plan:
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


class Engine:
    """See the module docstring. ``on_finish`` is called once per request when it ends."""

    # Multi-step jumps; tests turn them off to check that they change nothing.
    jump = True

    def __init__(self, config: EngineConfig, *, chunks: bool = False, trace: bool = False,
                 on_finish: FinishCallback | None = None) -> None:
        config.validate()
        self.config = config
        self.on_finish = on_finish
        self.chunks = chunks
        self.trace: list[StepRecord] | None = [] if trace else None
        self.now = 0.0
        self._bs = config.block_size
        self._num_blocks = config.num_gpu_blocks
        self._cap = config.max_num_seqs
        self._budget = config.max_num_batched_tokens
        self._mixed = config.policy == "mixed"
        self._model = model = config.step
        # The step-time coefficients, read once per step on the hot path (same formula as step_time).
        self._t0, self._a, self._b, self._c = model.t0, model.a, model.b, model.c
        self._max_len = config.max_model_len
        self._kv_capacity = self._num_blocks * self._bs
        self._g = 0
        self._next_rid = 0
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
        self._inflight: _Plan | None = None
        self.preemptions = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    # -- public API ---------------------------------------------------------------------
    def submit(self, prompt_tokens: int, max_tokens: int, *, arrival: float | None = None,
               worker: int = -1, payload: object = None) -> SimRequest:
        """Queue a request arriving at ``arrival`` (default: now). Raises RequestRejected."""
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
        if when <= now and self._inflight is None:
            req.state = WAITING
            self._waiting.append(req)
        else:
            heapq.heappush(self._pending, (when, req.rid, req))
        return req

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
            self._prefilling.remove(req)
            self._blocks_used -= req.blocks
        elif state == DECODE:
            del self._running[req.rid]
            computed = req.key + self._g
            self._leave_decode(req)
            freed = -(-computed // self._bs)
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
        return EngineState(self.now, len(self._running), len(self._waiting) + len(self._pending), used,
                           self._num_blocks, self._bs, used / self._num_blocks, self.preemptions,
                           self.prompt_tokens_total, self.generation_tokens_total)

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

    # -- scheduling ---------------------------------------------------------------------
    def _pull_arrivals(self) -> None:
        pending = self._pending
        while pending and pending[0][0] <= self.now:
            req = heapq.heappop(pending)[2]
            if req.state == DONE:
                continue
            req.state = WAITING
            self._waiting.append(req)

    def _plan(self, t_limit: float) -> _Plan | None:
        if self._pending:
            self._pull_arrivals()
        if not self._running and not self._waiting:
            return None
        plan = _Plan(self.now)
        if self._mixed:
            if self._n_decode:
                # _allocate_decode's common case inlined: the decoders' new blocks fit.
                need = self._phase[-self._g % self._bs]
                if need <= self._num_blocks - self._blocks_used:
                    self._blocks_used += need
                else:
                    self._allocate_decode(plan)
            self._plan_prefill(plan, self._budget - self._n_decode)
            plan.n_decode = n_decode = self._n_decode
        else:
            self._plan_prefill(plan, self._budget)
            if not plan.prefills and self._n_decode:
                self._allocate_decode(plan)
            plan.n_decode = n_decode = 0 if plan.prefills else self._n_decode
        kv_read = plan.kv_read
        if n_decode:
            kv_read += self._key_sum + n_decode * self._g
        # StepModel.step_time, inlined (same operations in the same order).
        plan.dt = self._t0 + self._a * n_decode + self._b * plan.prefill_tokens + self._c * kv_read
        if n_decode and not plan.prefills and not plan.preempted:
            self._extend_to_jump(plan, t_limit, kv_read)
        return plan

    def _allocate_decode(self, plan: _Plan) -> None:
        """Give every decoder its block for this step, preempting the newest requests if needed."""
        bs = self._bs
        phase = self._phase
        running = self._running
        while True:
            need = phase[-self._g % bs]
            if need <= self._num_blocks - self._blocks_used:
                self._blocks_used += need
                return
            self._preempt(running[next(reversed(running))])
            plan.preempted += 1
            plan.blocked = "preempted"
            if not self._n_decode:
                return

    def _plan_prefill(self, plan: _Plan, budget: int) -> None:
        bs = self._bs
        free = self._num_blocks - self._blocks_used
        prefills = plan.prefills
        prefilling = self._prefilling
        tokens = 0
        kv_read = 0
        i = 0
        while i < len(prefilling) and budget > 0:
            req = prefilling[i]
            computed = req.computed
            chunk = req.prompt + req.sent - computed
            if chunk > budget:
                chunk = budget
            new_blocks = -(-(computed + chunk) // bs) - req.blocks
            if new_blocks > free and not self._n_decode:
                # Only prefills hold the cache: the oldest may evict younger ones (they are the newest).
                while new_blocks > free and prefilling[-1] is not req:
                    self._preempt(prefilling[-1])
                    plan.preempted += 1
                    free = self._num_blocks - self._blocks_used
            if new_blocks > free:
                plan.blocked, plan.blocked_need = ("kv", new_blocks) if self._waiting else ("", 0)
                plan.prefill_tokens = tokens
                plan.kv_read = kv_read
                return
            req.blocks += new_blocks
            self._blocks_used += new_blocks
            free -= new_blocks
            budget -= chunk
            prefills.append((req, chunk))
            tokens += chunk
            kv_read += computed
            i += 1
        plan.kv_read = kv_read
        waiting = self._waiting
        if plan.preempted and waiting:
            # As vLLM v1: a step that had to preempt admits nobody (the cache is short).
            plan.blocked = "preempted"
            plan.prefill_tokens = tokens
            return
        running = self._running
        room = self._cap - len(running)
        admitted = 0
        while waiting:
            if admitted >= room:
                plan.blocked = "cap"
                break
            if budget <= 0:
                plan.blocked = "budget"
                break
            req = waiting[0]
            chunk = req.prompt + req.sent
            if chunk > budget:
                chunk = budget
            blocks = -(-chunk // bs)
            if blocks > free:
                plan.blocked, plan.blocked_need = "kv", blocks
                break
            waiting.popleft()
            req.state = PREFILL
            req.computed = 0
            req.blocks = blocks
            free -= blocks
            budget -= chunk
            running[req.rid] = req
            prefilling.append(req)
            prefills.append((req, chunk))
            tokens += chunk
            admitted += 1
        self._blocks_used = self._num_blocks - free
        plan.prefill_tokens = tokens

    def _extend_to_jump(self, plan: _Plan, t_limit: float, kv0: int) -> None:
        """Turn a pure-decode step into ``k`` identical-composition steps when nothing can change."""
        g = self._g
        k = self._finish_steps[0] - g if self._finish_steps else 1
        if k <= 1 or not self.jump:
            return
        # Blocks: step 1 is already allocated; steps 2..k need the decoders crossing a boundary.
        # Every block_size consecutive steps cross each residue class once, i.e. cost n blocks.
        free = self._num_blocks - self._blocks_used
        bs = self._bs
        phase = self._phase
        n = self._n_decode
        full_cycles = free // n if n else k
        fit = 1 + full_cycles * bs
        spent = full_cycles * n
        if fit < k:
            j = fit
            while j < k:
                spent += phase[-(g + j) % bs]
                if spent > free:
                    break
                j += 1
            fit = j
        if fit < k:
            k = fit
        model = self._model
        if t_limit != _INF:
            k = min(k, max(1, model.decode_steps_within(t_limit - self.now, n, kv0)))
        if self._pending:
            gap = self._pending[0][0] - self.now
            within = model.decode_steps_within(gap, n, kv0)
            if model.decode_run_time(within, n, kv0) < gap:
                within += 1
            k = min(k, max(1, within))
        if k <= 1:
            return
        cycles = (k - 1) // bs
        extra = cycles * n
        for j in range(1 + cycles * bs, k):
            extra += phase[-(g + j) % bs]
        self._blocks_used += extra
        plan.k = k
        plan.dt = model.decode_run_time(k, n, kv0)

    def _preempt(self, req: SimRequest) -> None:
        del self._running[req.rid]
        if req.state == DECODE:
            computed = req.key + self._g
            self._leave_decode(req)
            self._blocks_used -= -(-computed // self._bs)
        else:
            self._prefilling.remove(req)
            self._blocks_used -= req.blocks
        req.state = WAITING
        req.computed = 0
        req.blocks = 0
        req.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(req)

    def _leave_decode(self, req: SimRequest) -> None:
        """A decoder stops early (preempted or aborted); finishes are handled inline in _commit."""
        g = self._g
        if req.times is not None:
            req.times.extend(self._decode_times[req.base_g:g])
        req.sent += g - req.base_g
        self._finishing[req.finish_g].remove(req)
        self._n_decode -= 1
        self._phase[req.key % self._bs] -= 1
        self._key_sum -= req.key

    # -- committing ---------------------------------------------------------------------
    def _commit(self, plan: _Plan) -> None:
        t0 = plan.t_start
        self.now = end = t0 + plan.dt
        n = plan.n_decode
        if n:
            k = plan.k
            if self.chunks or self.trace is not None:
                self._record_steps(plan)
            self._g += k
            self.generation_tokens_total += k * n
        elif self.trace is not None:
            self._record_steps(plan)
        finished: list[SimRequest] = []
        g = self._g
        running = self._running
        if plan.prefills:
            bs = self._bs
            phase = self._phase
            steps = self._finish_steps
            finishing = self._finishing
            prefilling = self._prefilling
            joined = 0
            key_sum = 0
            tokens = 0
            prompt_tokens = 0
            completed: list[SimRequest] = []
            for req, chunk in plan.prefills:
                if req.state != PREFILL:
                    continue   # aborted while its step ran
                req.computed = computed = req.computed + chunk
                sent = req.sent
                if computed < req.prompt + sent:
                    continue
                completed.append(req)
                req.sent = sent = sent + 1
                tokens += 1
                if req.first_token < 0:
                    req.first_token = end
                    prompt_tokens += req.prompt
                if req.times is not None:
                    req.times.append(end)
                if sent >= req.output:
                    del running[req.rid]
                    self._blocks_used -= req.blocks
                    finished.append(req)
                    continue
                req.state = DECODE
                req.base_g = g
                req.key = key = computed - g
                req.finish_g = finish_g = g + req.output - sent
                joined += 1
                phase[key % bs] += 1
                key_sum += key
                bucket = finishing.get(finish_g)
                if bucket is None:
                    finishing[finish_g] = [req]
                    heapq.heappush(steps, finish_g)
                else:
                    bucket.append(req)
            if completed:
                # Only a plan's last chunk can leave a prefill unfinished, so the completed ones are
                # usually the head of ``prefilling`` (same order): they are when both ends match.
                c = len(completed)
                if prefilling[0] is completed[0] and prefilling[c - 1] is completed[-1]:
                    del prefilling[:c]
                else:
                    for req in completed:
                        prefilling.remove(req)
            self.generation_tokens_total += tokens
            self.prompt_tokens_total += prompt_tokens
            self._n_decode += joined
            self._key_sum += key_sum
        steps = self._finish_steps
        if steps and steps[0] <= g:
            bs = self._bs
            phase = self._phase
            decode_times = self._decode_times
            finishing = self._finishing
            left = 0
            key_sum = 0
            freed = 0
            while steps and steps[0] <= g:
                bucket = finishing.pop(heapq.heappop(steps))
                if len(bucket) > 1:
                    bucket.sort(key=_rid)   # same-step finishes in request order
                for req in bucket:
                    # _leave_decode, inlined (its bucket is gone already): this runs once per request.
                    key = req.key
                    if req.times is not None:
                        req.times.extend(decode_times[req.base_g:g])
                    req.sent += g - req.base_g
                    phase[key % bs] -= 1
                    key_sum += key
                    del running[req.rid]
                    freed += -(-(key + g) // bs)
                    finished.append(req)
                left += len(bucket)
            self._n_decode -= left
            self._key_sum -= key_sum
            self._blocks_used -= freed
        # Buckets emptied by preemptions would otherwise hide the next real finish.
        if steps and not self._finishing[steps[0]]:
            finishing = self._finishing
            while steps and not finishing[steps[0]]:
                del finishing[heapq.heappop(steps)]
        if finished:
            on_finish = self.on_finish
            for req in finished:
                req.state = DONE
                req.end = end
                if on_finish is not None:
                    on_finish(req)

    def _record_steps(self, plan: _Plan) -> None:
        """Per-step end times (chunk mode) and trace rows, for the ``k`` steps of a plan."""
        model = self._model
        n = plan.n_decode
        t = plan.t_start
        kv0 = self._key_sum + n * self._g
        prefill_tokens = sum(c for _, c in plan.prefills)
        used = self._blocks_used
        if plan.k > 1:
            # Undo the jump's extra allocations so each row shows the blocks used at its own step.
            bs = self._bs
            used -= sum(self._phase[-(self._g + j) % bs] for j in range(1, plan.k))
        for j in range(plan.k):
            if plan.k == 1:
                dt = plan.dt
            else:
                dt = model.step_time(n, 0, kv0 + j * n)
                if j:
                    used += self._phase[-(self._g + j) % self._bs]
            if self.chunks and n:
                self._decode_times.append(t + dt)
            if self.trace is not None:
                first = j == 0
                self.trace.append(StepRecord(
                    t, dt, n, prefill_tokens if first else 0, used,
                    len(self._waiting), len(self._running),
                    plan.preempted if first else 0, plan.blocked if first else
                    ("" if not self._waiting else plan.blocked), plan.blocked_need))
            t += dt
        if plan.k > 1 and self.chunks and n:
            # Keep the last step's end identical to the committed clock despite float rounding.
            self._decode_times[-1] = plan.t_start + plan.dt
