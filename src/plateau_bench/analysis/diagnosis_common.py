"""What the diagnosis checks share: engine flags, formatting, and the sweep as the checks see it.

``Sweep`` is built once per verdict: the successful closed-loop levels in concurrency order, the
plateau and its levels (``top``), whether the server's ``/metrics`` were recorded, and the prefill
estimate (``diagnosis_compute.prefill_estimate``). The checks read it; none of them mutates it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plateau_bench.analysis.unmeasured import counted
from plateau_bench.result import Knee, LevelResult, Plateau

ENGINE_FLAGS: dict[str, dict[str, str]] = {
    "vllm": {"cap": "vllm serve --max-num-seqs {n}", "batch": "--max-num-batched-tokens",
             "kv": "--gpu-memory-utilization (more KV blocks) or a smaller --max-model-len",
             "prefill": "--max-num-batched-tokens (the chunked-prefill budget per step)"},
    "sglang": {"cap": "--max-running-requests {n}", "batch": "--num-continuous-decode-steps, CUDA graphs",
               "kv": "--mem-fraction-static (more KV pool)",
               "prefill": "--chunked-prefill-size (and --max-prefill-tokens)"},
    "llamacpp": {"cap": "llama-server --parallel {n} (and raise --ctx-size: it is split across slots)",
                 "batch": "-b/-ub batch sizes", "kv": "--ctx-size (split across --parallel slots)",
                 "prefill": "-b/-ub (the prompt batch sizes)"},
    "tgi": {"cap": "--max-concurrent-requests / --max-batch-total-tokens",
            "batch": "--max-batch-prefill-tokens", "kv": "--max-batch-total-tokens",
            "prefill": "--max-batch-prefill-tokens"},
    "trtllm": {"cap": "trtllm-serve --max_batch_size {n}", "batch": "--max_num_tokens, CUDA graphs",
               "kv": "--kv_cache_free_gpu_memory_fraction (more KV blocks)",
               "prefill": "--max_num_tokens (the tokens one iteration may carry)"},
}
GENERIC_CAP = ("the server's running-request cap: vLLM --max-num-seqs {n}, SGLang --max-running-requests {n}, "
               "llama.cpp --parallel {n}, TGI --max-concurrent-requests")
GENERIC_KV = ("give the KV cache more memory (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, "
              "llama.cpp --ctx-size)")
GENERIC_PREFILL = ("the per-step token budget: vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size, "
                   "TGI --max-batch-prefill-tokens")


def flag(engine: str | None, key: str) -> str | None:
    flags = ENGINE_FLAGS.get(engine or "")
    return flags[key] if flags else None


def ms(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v / 1000:.1f} s" if v >= 10_000 else f"{v:.0f} ms"


def conc(level: LevelResult) -> int:
    return level.concurrency or 0


def at(level: LevelResult) -> str:
    return f"C={level.concurrency}" if level.concurrency else level.label


def by_concurrency(levels: Sequence[LevelResult]) -> list[LevelResult]:
    """One level per concurrency (the last one given), in concurrency order: levels that sent requests, or
    served tokens without counting them (a table of tok/s)."""
    by_c: dict[int, LevelResult] = {}
    for lv in levels:
        if lv.concurrency and (lv.num_requests > 0 or counted(lv)):
            by_c[lv.concurrency] = lv
    return [by_c[c] for c in sorted(by_c)]


def stall_ratio(levels: Sequence[LevelResult]) -> float:
    """The largest inter-token gap over its level's median, on the levels given (0 when not measurable).

    A median of (near) zero means chunks arrived bunched: no ratio against it means anything.
    """
    ratios = [(lv.itl_ms.max or 0.0) / p50 for lv in levels if (p50 := lv.itl_ms.p50 or 0.0) >= 0.1]
    return max(ratios, default=0.0)


def mean_lengths(level: LevelResult) -> tuple[float, float]:
    """Mean prompt and output tokens per request over the level's window (0 when unknown).

    Rates over the window divided by the request rate (in a steady state requests start and end at the
    same rate); the counts are over different request sets (prompts of requests sent in the window,
    outputs of tokens arriving in it), so dividing them by one count would not be a mean.
    """
    if level.request_throughput > 0:
        return (max(0.0, level.total_throughput - level.output_throughput) / level.request_throughput,
                level.output_throughput / level.request_throughput)
    n = max(level.completed, 1)
    return level.input_tokens / n if level.input_tokens else 0.0, level.output_tokens / n


@dataclass(frozen=True)
class Prefill:
    """How much of the engine's time prompts take at the plateau, measured from the client alone.

    At the lowest level (ideally C=1) a request's TTFT is its prefill plus one step, and its TPOT is
    one step, so ``(TTFT - TPOT) / prompt tokens`` is the cost of a prompt token. Times the prompt
    tokens the plateau processes per second, it is the share of each second spent on prefill.
    """

    share: float
    us_per_token: float
    prompt_tokens: float
    output_tokens: float
    measured_at: int          # the concurrency of the level the cost was read from


@dataclass(frozen=True)
class Sweep:
    levels: list[LevelResult]       # successful levels, concurrency order
    plateau: Plateau
    knee: Knee
    engine: str | None
    top: list[LevelResult]          # the plateau's levels: C >= plateau.concurrency
    prefill: Prefill | None

    @property
    def telemetry(self) -> bool:
        """The server's /metrics were recorded on the plateau."""
        return any(lv.telemetry.running_max is not None or lv.telemetry.kv_usage_max is not None
                   for lv in self.top)

    @property
    def prefill_share(self) -> float:
        return self.prefill.share if self.prefill else 0.0

    def plateau_line(self) -> str:
        return (f"plateau ~{self.plateau.throughput:,.0f} tok/s from C={self.plateau.concurrency}, "
                f"knee at C~{self.knee.concurrency:.0f}")
