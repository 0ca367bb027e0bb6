"""Committing a planned step: the clock moves to its end and its tokens are produced.

Step 4 of ``engine``'s docstring: decoders advance by bumping the global decode-step counter
(never one by one), each completed prefill samples its first (or, after a preemption, its next)
token and joins the decode batch, decoders whose finish step has come leave it, and the finish
callback runs once per finished request, in the order prefill finishes then decode finishes
(same-step decode finishes by request id).
"""

from __future__ import annotations

import heapq
from operator import attrgetter

from plateau_bench.sim.cached import PrefixCaching
from plateau_bench.sim.request import DECODE, DONE, PREFILL, SimRequest, StepPlan, StepRecord

_rid = attrgetter("rid")


class Committer(PrefixCaching):
    """The committing half of ``engine.Engine``."""

    def _commit(self, plan: StepPlan) -> None:
        self.now = end = plan.t_start + plan.dt
        probe = self.probe
        if probe is not None:
            probe.on_step(self, plan, len(self._running))
        n = plan.n_decode
        if n:
            k = plan.k
            if self.step_times or self.trace is not None:
                self._record_steps(plan)
            self._g += k
            self.generation_tokens_total += k * n
        elif self.trace is not None:
            self._record_steps(plan)
        finished: list[SimRequest] = []
        if plan.prefills:
            self._commit_prefills(plan.prefills, end, finished)
        steps = self._finish_steps
        if steps and steps[0] <= self._g:
            self._finish_decoders(finished)
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

    def _commit_prefills(self, prefills: list[tuple[SimRequest, int]], end: float,
                         finished: list[SimRequest]) -> None:
        """Account the step's prefill chunks; a completed prefill emits a token and starts decoding
        (or finishes, when that token was its last)."""
        g = self._g
        running = self._running
        bs = self._bs
        phase = self._phase
        steps = self._finish_steps
        finishing = self._finishing
        joined = 0
        key_sum = 0
        tokens = 0
        prompt_tokens = 0
        completed: list[SimRequest] = []
        for req, chunk in prefills:
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
                self._unreserve(req)
                self._blocks_used -= req.blocks if req.hashes is None else self._freed(req, req.blocks, computed)
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
            self._drop_completed_prefills(completed)
        self.generation_tokens_total += tokens
        self.prompt_tokens_total += prompt_tokens
        self._n_decode += joined
        self._key_sum += key_sum

    def _drop_completed_prefills(self, completed: list[SimRequest]) -> None:
        # Only a plan's last chunk can leave a prefill unfinished, so the completed ones are
        # usually the head of ``prefilling`` (same order): they are when both ends match.
        prefilling = self._prefilling
        c = len(completed)
        if prefilling[0] is completed[0] and prefilling[c - 1] is completed[-1]:
            del prefilling[:c]
        else:
            for req in completed:
                prefilling.remove(req)

    def _finish_decoders(self, finished: list[SimRequest]) -> None:
        """Take out every decoder whose finish step has come, freeing its blocks."""
        g = self._g
        running = self._running
        steps = self._finish_steps
        bs = self._bs
        phase = self._phase
        decode_times = self._decode_times
        finishing = self._finishing
        left = 0
        key_sum = 0
        freed = 0
        reserve = self._reserve
        promised = 0                # the finished requests' reservations (reserve_kv), _full_blocks inlined
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
                if reserve:
                    promised += -(-(req.prompt + req.output - 1) // bs)
                if req.hashes is None:
                    freed += -(-(key + g) // bs)
                else:
                    freed += self._freed(req, -(-(key + g) // bs), key + g)
                finished.append(req)
            left += len(bucket)
        self._n_decode -= left
        self._key_sum -= key_sum
        self._blocks_used -= freed
        self._reserved -= promised

    def _record_steps(self, plan: StepPlan) -> None:
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
            if self.step_times and n:
                self._decode_times.append(t + dt)
            if self.trace is not None:
                first = j == 0
                self.trace.append(StepRecord(
                    t, dt, n, prefill_tokens if first else 0, used,
                    len(self._waiting), len(self._running),
                    plan.preempted if first else 0, plan.blocked if first else
                    ("" if not self._waiting else plan.blocked), plan.blocked_need))
            t += dt
        if plan.k > 1 and self.step_times and n:
            # Keep the last step's end identical to the committed clock despite float rounding.
            self._decode_times[-1] = plan.t_start + plan.dt
