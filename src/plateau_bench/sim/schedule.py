"""Planning one step: arrivals, decode block allocation, chunked prefill, admission, preemption.

``Scheduler._plan`` decides what the next step runs (steps 1-3 of ``engine``'s docstring) and
how long it lasts; the KV blocks the step needs are taken at planning time, so a step that is
planned but not yet committed already holds them. When nothing can change for a while (a pure
decode batch, no block shortage, no arrival or finish due), ``_extend_to_jump`` turns the step
into ``k`` identical steps and takes their blocks at once.
"""

from __future__ import annotations

import heapq

from plateau_bench.sim.cached import PrefixCaching
from plateau_bench.sim.request import DECODE, DONE, PREFILL, WAITING, SimRequest, StepPlan

_INF = float("inf")


class Scheduler(PrefixCaching):
    """The planning half of ``engine.Engine``."""

    def _pull_arrivals(self) -> None:
        pending = self._pending
        while pending and pending[0][0] <= self.now:
            req = heapq.heappop(pending)[2]
            if req.state == DONE:
                continue
            req.state = WAITING
            self._waiting.append(req)

    def _plan(self, t_limit: float) -> StepPlan | None:
        if self._pending:
            self._pull_arrivals()
        if not self._running and not self._waiting:
            return None
        plan = StepPlan(self.now)
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
        if self._experts:
            plan.dt += self._model.expert_time(n_decode + plan.prefill_tokens)
        if n_decode and not plan.prefills and not plan.preempted:
            self._extend_to_jump(plan, t_limit, kv_read)
        if self._cache is not None:
            self._trim_cache()
        return plan

    def _allocate_decode(self, plan: StepPlan) -> None:
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

    def _plan_prefill(self, plan: StepPlan, budget: int) -> None:
        """Spend ``budget`` tokens on running prefills first, then on admitting waiting requests."""
        left = self._continue_prefills(plan, budget) if self._prefilling else budget
        if left is None:
            return
        if plan.preempted and self._waiting:
            # As vLLM v1: a step that had to preempt admits nobody (the cache is short).
            plan.blocked = "preempted"
            return
        if self._waiting:
            self._admit(plan, left)

    def _continue_prefills(self, plan: StepPlan, budget: int) -> int | None:
        """Next chunks of the running prefills, oldest first; returns the budget left, or None when
        a chunk's blocks do not fit (the step then admits nobody)."""
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
                return None
            req.blocks += new_blocks
            self._blocks_used += new_blocks
            if req.hashes is not None:
                self._register(req, computed + chunk)
            free -= new_blocks
            budget -= chunk
            prefills.append((req, chunk))
            tokens += chunk
            kv_read += computed
            i += 1
        plan.prefill_tokens = tokens
        plan.kv_read = kv_read
        return budget

    def _admit(self, plan: StepPlan, budget: int) -> None:
        """Admit waiting requests in order (FCFS) while the cap, the budget and the cache allow."""
        bs = self._bs
        free = self._num_blocks - self._blocks_used
        prefills = plan.prefills
        prefilling = self._prefilling
        waiting = self._waiting
        running = self._running
        tokens = plan.prefill_tokens
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
            if self._reserve:   # the whole request must fit beside every running one's promise
                full = self._full_blocks(req)
                if self._reserved + full > self._num_blocks:
                    plan.blocked, plan.blocked_need = "kv", full
                    break
                self._reserved += full
            if req.hashes is not None:
                taken = self._admit_cached(req, budget, free)
                if taken is None:
                    plan.blocked, plan.blocked_need = "kv", self._need
                    self._unreserve(req)
                    break
                chunk, blocks, hit = taken
                plan.kv_read += hit
                waiting.popleft()
            else:
                chunk = req.prompt + req.sent
                if chunk > budget:
                    chunk = budget
                blocks = -(-chunk // bs)
                if blocks > free:
                    plan.blocked, plan.blocked_need = "kv", blocks
                    self._unreserve(req)
                    break
                waiting.popleft()
                req.computed = 0
                req.blocks = blocks
            req.state = PREFILL
            if req.scheduled < 0:   # vLLM's queue time ends at the first scheduling (stats.py)
                req.scheduled = plan.t_start
            free -= blocks
            budget -= chunk
            running[req.rid] = req
            prefilling.append(req)
            prefills.append((req, chunk))
            tokens += chunk
            admitted += 1
        self._blocks_used = self._num_blocks - free
        plan.prefill_tokens = tokens

    def _extend_to_jump(self, plan: StepPlan, t_limit: float, kv0: int) -> None:
        """Turn a pure-decode step into ``k`` identical-composition steps when nothing can change."""
        g = self._g
        k = self._finish_steps[0] - g if self._finish_steps else 1
        if k <= 1 or not self.jump:
            return
        k = self._steps_whose_blocks_fit(k)
        model = self._model
        n = self._n_decode
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
        bs = self._bs
        phase = self._phase
        cycles = (k - 1) // bs
        extra = cycles * n
        for j in range(1 + cycles * bs, k):
            extra += phase[-(g + j) % bs]
        self._blocks_used += extra
        plan.k = k
        plan.dt = model.decode_run_time(k, n, kv0)

    def _steps_whose_blocks_fit(self, k: int) -> int:
        """The most of the next ``k`` decode steps whose new blocks fit in the free cache."""
        # Step 1 is already allocated; steps 2..k need the decoders crossing a boundary.
        # Every block_size consecutive steps cross each residue class once, i.e. cost n blocks.
        g = self._g
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
        return fit if fit < k else k

    def _preempt(self, req: SimRequest) -> None:
        del self._running[req.rid]
        self._unreserve(req)
        if req.state == DECODE:
            computed = req.key + self._g
            self._leave_decode(req)
            self._blocks_used -= self._freed(req, -(-computed // self._bs), computed)
        else:
            self._prefilling.remove(req)
            self._blocks_used -= self._freed(req, req.blocks, req.computed)
        req.state = WAITING
        req.computed = 0
        req.blocks = 0
        req.preemptions += 1
        self.preemptions += 1
        self._waiting.appendleft(req)

    def _leave_decode(self, req: SimRequest) -> None:
        """A decoder stops early (preempted or aborted); finishes are handled inline in the commit."""
        g = self._g
        if req.times is not None:
            req.times.extend(self._decode_times[req.base_g:g])
        req.sent += g - req.base_g
        self._finishing[req.finish_g].remove(req)
        self._n_decode -= 1
        self._phase[req.key % self._bs] -= 1
        self._key_sum -= req.key
