"""How long one engine step takes: ``t = t0 + a*decode_seqs + b*prefill_tokens + c*kv_tokens_read + s*slots``.

The four coefficients are the calibrated form of the roofline shape used by published serving
simulators (Vidur, LLMServingSim): a fixed per-step cost ``t0`` (weights streamed once per step,
kernel launches, collective latency), a per-sequence decode cost ``a`` (per-token GEMM work,
all-reduce volume, sampling), a per-prompt-token prefill cost ``b`` and an attention cost ``c``
per KV-cache token read. A step's KV read is the context every scheduled sequence attends to.
The last term is a cost ``s`` per slot the server allocates, whether a sequence runs in it or not:
llama.cpp sizes its batch and KV cells by ``--parallel``, so its step grows with the admission cap
even when fewer sequences run. The cap is the engine's (``EngineConfig.max_num_seqs``), fixed for a
run, so the engine folds ``s*slots`` into the fixed cost once (``at_cap``); 0, the default, is no
such cost.

Besides the single step, the model gives the closed form for ``k`` consecutive pure-decode steps
with a fixed batch of ``D`` sequences, whose KV read grows by ``D`` tokens per step:

    T(k) = k * (t0 + a*D + c*K0) + c*D*k*(k-1)/2

which lets the engine jump over many steps at once when the batch composition does not change.
"""

from __future__ import annotations

import math

import msgspec


class StepModel(msgspec.Struct, frozen=True, kw_only=True):
    """Step-time coefficients, all in seconds (per step, per sequence, per token)."""

    t0: float
    a: float = 0.0
    b: float = 0.0
    c: float = 0.0
    s: float = 0.0              # per allocated slot of the admission cap (llama.cpp's --parallel), per step
    # An optional concave term for MoE weights (a twin derived from the roofline): a step of n tokens
    # reads the routed experts they hit, experts * (1 - miss^(n * expert_tokens)) of them, expert_s each.
    experts: int = 0            # routed experts per MoE layer; 0: no such term
    expert_miss: float = 1.0    # 1 - top_k / experts: the chance a token misses a given expert
    expert_tokens: float = 1.0  # tokens through one copy of the experts per engine token
    expert_s: float = 0.0       # seconds to read one routed expert in every MoE layer

    def at_cap(self, slots: int) -> StepModel:
        """The model an engine with ``slots`` allocated slots runs: ``s*slots`` in the fixed cost (itself
        when ``s`` is 0). The step times below leave ``s`` out: they are those of a model at its cap."""
        if not self.s:
            return self
        return msgspec.structs.replace(self, t0=self.t0 + self.s * slots, s=0.0)

    def expert_time(self, tokens: int) -> float:
        if not self.experts or tokens <= 0:
            return 0.0
        return float(self.expert_s * self.experts * (1.0 - self.expert_miss ** (tokens * self.expert_tokens)))

    def step_time(self, decode_seqs: int, prefill_tokens: int, kv_tokens_read: int) -> float:
        t = self.t0 + self.a * decode_seqs + self.b * prefill_tokens + self.c * kv_tokens_read
        return t + self.expert_time(decode_seqs + prefill_tokens) if self.experts else t

    def _first_decode(self, decode_seqs: int, kv0: int) -> float:
        first = self.t0 + self.a * decode_seqs + self.c * kv0
        return first + self.expert_time(decode_seqs) if self.experts else first

    def decode_run_time(self, k: int, decode_seqs: int, kv0: int) -> float:
        """Total time of ``k`` pure-decode steps of ``decode_seqs`` sequences starting at KV ``kv0``."""
        first = self._first_decode(decode_seqs, kv0)
        return k * first + self.c * decode_seqs * k * (k - 1) / 2.0

    def decode_steps_within(self, budget_s: float, decode_seqs: int, kv0: int) -> int:
        """The largest ``k`` with ``decode_run_time(k) <= budget_s`` (0 when not even one fits)."""
        if budget_s <= 0:
            return 0
        first = self._first_decode(decode_seqs, kv0)
        growth = self.c * decode_seqs / 2.0
        if growth <= 0:
            k = int(budget_s / first) if first > 0 else 1 << 40
        else:
            lin = first - growth
            k = int((-lin + math.sqrt(lin * lin + 4.0 * growth * budget_s)) / (2.0 * growth))
        # The float solution may be off by one either way: settle it exactly.
        while k > 0 and self.decode_run_time(k, decode_seqs, kv0) > budget_s:
            k -= 1
        while self.decode_run_time(k + 1, decode_seqs, kv0) <= budget_s:
            k += 1
        return k

    def describe(self) -> str:
        text = (f"t = {self.t0 * 1e3:.3g} ms + {self.a * 1e6:.3g} us/seq + {self.b * 1e6:.3g} us/prefill token"
                f" + {self.c * 1e9:.3g} ns/KV token read")
        if self.s:
            text += f" + {self.s * 1e6:.3g} us per allocated slot"
        if self.experts:
            text += f" + {self.expert_s * 1e6:.3g} us per routed expert hit (of {self.experts})"
        return text
