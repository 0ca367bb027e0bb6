"""The scheduler limits a published table's engine ran with, where its benchmark tool derives them.

A table states its model, GPU and lengths, rarely the engine's batch and token limits; the benchmark
twin needs them, and a wrong one is a wrong prediction (a cap of 256 sequences where the engine ran
1,000 reads a long-output row 40 % low). Where the tool that measured the table sets them by a
documented rule, the rule is applied to the twin's own KV cache, row by row:

``trtllm-bench`` (TensorRT-LLM's ``trtllm-bench throughput``, ``tensorrt_llm/bench/build/tuning.py``:
``calc_engine_setting`` and ``finetune_setting``): the batch is the number of requests of the row's
input + output length that fit in the KV cache, at most 4,096, rounded up (to 32 below 256, at least 64;
to 128 below 1,024; else to 256); the step's token budget is that batch x (1 + input / output), at most
32,768, rounded up (to 256 below 4,096, at least 2,048; to 512 below 8,192; else to 1,024).

TensorRT-LLM admits a request only when the KV cache can hold its whole prompt and answer at once
(its default capacity policy, ``GUARANTEED_NO_EVICT``, documented in its ``SchedulerConfig`` and runtime-
options pages): it never preempts, and it runs no more requests than fit at full length. The twin runs
the same admission when told (``EngineConfig.reserve_kv``, ``sim --reserve-kv``): ``reserves_kv(rule)``.

A table whose tool has no rule here keeps the twin's defaults (vLLM's: 256 sequences, 8,192 tokens).
"""

from __future__ import annotations

import math

RULES = ("trtllm-bench",)


def _round_up(value: float, step: int) -> int:
    return step * math.ceil(value / step)


def trtllm_bench_limits(kv_tokens: float, input_len: int, output_len: int, pp: int = 1) -> tuple[int, int]:
    """(max batch size, max tokens per step) as ``trtllm-bench throughput`` picks them (module docstring)."""
    batch = min(kv_tokens / (input_len + output_len), 4096) / pp
    tokens = min(batch * (1 + input_len / output_len), 32768)
    max_batch = max(64, _round_up(batch, 32)) if batch < 256 else _round_up(batch, 128 if batch < 1024 else 256)
    if tokens < 4096:
        max_tokens = max(2048, _round_up(tokens, 256))
    else:
        max_tokens = _round_up(tokens, 512 if tokens < 8192 else 1024)
    return max_batch, max_tokens


def reserves_kv(rule: str | None) -> bool:
    """Whether the engine the rule's tool runs admits a request only when it fits at full length."""
    return rule == "trtllm-bench"


def limits(rule: str | None, kv_tokens: float, input_len: int, output_len: int, pp: int = 1) -> tuple[int, int] | None:
    """The rule's (max sequences, max batched tokens) for one row, or None for the twin's defaults."""
    if rule == "trtllm-bench":
        return trtllm_bench_limits(kv_tokens, input_len, output_len, pp)
    if rule is not None:
        raise ValueError(f"no scheduler rule named {rule!r} (known: {', '.join(RULES)})")
    return None
