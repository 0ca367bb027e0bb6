"""The simulated engine's configuration: scheduler limits, KV cache, step-time model.

``EngineConfig`` mirrors the knobs of a vLLM/SGLang deployment that shape a throughput curve:

* ``max_num_seqs``: the admission cap (vLLM ``--max-num-seqs``, SGLang ``--max-running-requests``).
* ``max_num_batched_tokens``: the per-step token budget (vLLM ``--max-num-batched-tokens``,
  SGLang ``--chunked-prefill-size``); prefills longer than what is left are chunked.
* ``kv_tokens`` / ``block_size``: KV-cache capacity, allocated in blocks of ``block_size`` tokens.
* ``prefix_caching``: reuse the KV blocks of cached prompt prefixes (``prefix_cache``), on by
  default as in vLLM v1; it acts only on requests whose token blocks are known (the HTTP server's).
* ``policy``: ``"mixed"`` is vLLM v1 (decodes and chunked prefill share a step); ``"prefill_first"``
  is SGLang's default (a step is either a prefill batch, run whenever waiting requests can be
  admitted, or a decode batch).
* ``step``: the step-time model (``sim.step_model``); its per-slot cost ``s`` is paid for every slot of
  ``max_num_seqs`` (``step_at_cap``), as llama.cpp pays for every ``--parallel`` slot.
* ``reserve_kv``: admit a request only when its whole prompt and answer fit in the KV cache beside
  every running request's, so nothing is ever preempted (TensorRT-LLM's default capacity policy,
  ``GUARANTEED_NO_EVICT``); off, the default, admits what the cache holds now and preempts the newest
  when it fills (vLLM, SGLang).
* ``front_end_ms_per_request``: CPU time the API server process (HTTP, tokenizer, detokenizer) spends
  on each request before it reaches the engine's queue, served one request at a time in arrival order
  (one process, one core). 0, the default, is no front end: requests reach the queue when sent.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.sim.step_model import StepModel

Policy = Literal["mixed", "prefill_first"]


class EngineConfig(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    step: StepModel
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int
    block_size: int = 16
    max_model_len: int = 32768
    policy: Policy = "mixed"
    prefix_caching: bool = True   # vLLM's automatic prefix caching (--no-prefix-cache turns it off)
    model_name: str = "sim-model"
    description: str = ""
    replicas: int = 1                  # data-parallel copies behind a balancer (``sim.replicas``)
    balancer: str = "round_robin"      # round_robin | least_outstanding
    front_end_ms_per_request: float = 0.0   # the API server's CPU per request, one at a time (0: none)
    reserve_kv: bool = False           # admit only what fits at full length, never preempt (see the docstring)

    @property
    def step_at_cap(self) -> StepModel:
        """The step model at this engine's cap: the per-slot cost paid for all ``max_num_seqs`` slots."""
        return self.step.at_cap(self.max_num_seqs)

    @property
    def num_gpu_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    def validate(self) -> None:
        """Raise ConfigError for settings no engine could run with.

        A cap of 0 is accepted on purpose: the HTTP server then answers every request with a 400,
        which is what tests of the error paths need.
        """
        if self.max_num_seqs < 0:
            raise ConfigError(f"--max-num-seqs must be >= 0 (got {self.max_num_seqs})")
        if self.block_size < 1:
            raise ConfigError(f"block size must be >= 1 (got {self.block_size})")
        if self.kv_tokens < self.block_size:
            raise ConfigError(f"--kv-tokens must hold at least one block of {self.block_size} tokens "
                              f"(got {self.kv_tokens})")
        if self.max_num_batched_tokens < max(self.max_num_seqs, 1):
            raise ConfigError(
                f"--max-num-batched-tokens ({self.max_num_batched_tokens}) must be >= --max-num-seqs "
                f"({self.max_num_seqs}): every running sequence needs one token per step")
        if self.replicas < 1:
            raise ConfigError(f"--replicas must be >= 1 (got {self.replicas})")
        if self.balancer not in ("round_robin", "least_outstanding"):
            raise ConfigError(f"--balancer must be round-robin or least-outstanding (got {self.balancer!r})")
        if not (math.isfinite(self.front_end_ms_per_request) and self.front_end_ms_per_request >= 0):
            raise ConfigError(f"--front-end-ms must be finite and >= 0 (got {self.front_end_ms_per_request})")
        if self.max_model_len < 2:
            raise ConfigError(f"--max-model-len must be >= 2 (got {self.max_model_len})")
        terms = (self.step.t0, self.step.a, self.step.b, self.step.c, self.step.expert_s, self.step.s)
        if not all(math.isfinite(t) for t in terms) or self.step.t0 <= 0 or min(terms[1:]) < 0:
            raise ConfigError("step-time coefficients must be finite and >= 0, with t0 > 0")
        if self.step.experts < 0 or not 0 <= self.step.expert_miss <= 1 or self.step.expert_tokens <= 0:
            raise ConfigError("the expert term needs experts >= 0, a miss chance in [0, 1] and tokens per copy > 0")

    def with_overrides(
        self,
        *,
        max_num_seqs: int | None = None,
        kv_tokens: int | None = None,
        max_num_batched_tokens: int | None = None,
        max_model_len: int | None = None,
        t0_ms: float | None = None,
        a_ms: float | None = None,
        b_ms: float | None = None,
        c_us: float | None = None,
        slot_us: float | None = None,
        replicas: int | None = None,
        balancer: str | None = None,
        front_end_ms: float | None = None,
    ) -> EngineConfig:
        """A copy with the given settings replaced, validated.

        Raising the cap above the token budget raises the budget with it (vLLM refuses a budget
        below the cap); an explicit ``max_num_batched_tokens`` is kept as given.
        """
        changes: dict[str, object] = {}
        if max_num_seqs is not None:
            changes["max_num_seqs"] = max_num_seqs
            if max_num_batched_tokens is None and max_num_seqs > self.max_num_batched_tokens:
                changes["max_num_batched_tokens"] = max_num_seqs
        if kv_tokens is not None:
            changes["kv_tokens"] = kv_tokens
        if max_num_batched_tokens is not None:
            changes["max_num_batched_tokens"] = max_num_batched_tokens
        if max_model_len is not None:
            changes["max_model_len"] = max_model_len
        if replicas is not None:
            changes["replicas"] = replicas
        if balancer is not None:
            changes["balancer"] = balancer
        if front_end_ms is not None:
            changes["front_end_ms_per_request"] = front_end_ms
        step_changes: dict[str, float] = {}
        if t0_ms is not None:
            step_changes["t0"] = t0_ms / 1e3
        if a_ms is not None:
            step_changes["a"] = a_ms / 1e3
        if b_ms is not None:
            step_changes["b"] = b_ms / 1e3
        if c_us is not None:
            step_changes["c"] = c_us / 1e6
        if slot_us is not None:
            if not (math.isfinite(slot_us) and slot_us >= 0):
                raise ConfigError(f"--slot-us must be a finite number >= 0 microseconds (got {slot_us:g})")
            step_changes["s"] = slot_us / 1e6
        if step_changes:
            changes["step"] = msgspec.structs.replace(self.step, **step_changes)
        out = msgspec.structs.replace(self, **changes) if changes else self
        out.validate()
        return out

    def overrides_from(self, base: EngineConfig) -> dict[str, str | int | float | bool | None]:
        """The settings that differ from ``base`` (for labelling what-if results), nested ones by their
        dotted name (``step.a``), so that every value is a plain scalar a result file can hold."""
        mine = _flat(msgspec.to_builtins(self))
        theirs = _flat(msgspec.to_builtins(base))
        return {k: v for k, v in mine.items() if theirs.get(k) != v and k != "description"}


def _flat(data: dict[str, object], prefix: str = "") -> dict[str, str | int | float | bool | None]:
    out: dict[str, str | int | float | bool | None] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        elif value is None or isinstance(value, str | int | float | bool):
            out[f"{prefix}{key}"] = value
        else:
            out[f"{prefix}{key}"] = str(value)
    return out
