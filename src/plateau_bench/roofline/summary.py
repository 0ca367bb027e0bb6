"""The roofline over a range of batches: the ceiling curve, what binds where, KV capacity.

``roofline_report`` evaluates the bound (``bound``) for decode batches from 1 to a few thousand and
for prefill chunks, and states the assumptions it made, so the table and ``--json`` say the same.
"""

from __future__ import annotations

import msgspec

from plateau_bench.roofline.bound import GIB, Resource, Roofline, StepTerms, decode_terms, prefill_terms
from plateau_bench.roofline.deployment import DTYPE_BYTES
from plateau_bench.roofline.hardware import GpuSpec, figure, source_of

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
DEFAULT_PREFILL = (512, 1024, 2048, 4096, 8192, 16384)


class Point(msgspec.Struct, frozen=True, kw_only=True):
    """The bound at one batch (decode: sequences; prefill: prompt tokens per step)."""

    batch: int
    step_s: float
    tok_s: float
    tok_s_per_gpu: float
    binding: Resource
    weights_s: float
    kv_s: float
    compute_s: float
    network_s: float
    overhead_s: float
    weight_bytes: float
    kv_bytes: float
    flops: float
    network_bytes: float
    active_experts: float
    tokens_per_expert: float
    intensity: float               # FLOP per byte read, the whole step
    expert_intensity: float        # FLOP per byte of the expert GEMMs: 2 x tokens per expert / bytes per weight


class RooflineReport(msgspec.Struct, frozen=True, kw_only=True):
    roofline: Roofline
    gpu_spec: GpuSpec
    total_params: int
    active_params: int             # per token: blocks with k experts, plus the output head
    weights_gib_per_gpu: float
    kv_bytes_per_token: float      # per GPU, all layers
    kv_capacity_tokens: int
    max_sequences: int             # KV capacity / (input + output length)
    ridge: float                   # FLOP per byte where compute starts to bind
    decode: list[Point]
    prefill: list[Point]
    assumptions: list[str]
    sources: list[str]             # where each hardware figure used comes from


def point(rf: Roofline, batch: int, terms: StepTerms) -> Point:
    step = terms.step_s
    tok_s = batch / step
    expert_intensity = 0.0
    if rf.model.is_moe:
        expert_intensity = 2.0 * terms.tokens_per_expert / DTYPE_BYTES[rf.deployment.dtype]
    return Point(
        batch=batch, step_s=step, tok_s=tok_s, tok_s_per_gpu=tok_s / rf.deployment.gpus, binding=terms.binding,
        weights_s=terms.weights_s, kv_s=terms.kv_s, compute_s=terms.compute_s, network_s=terms.network_s,
        overhead_s=terms.overhead_s, weight_bytes=terms.weight_bytes, kv_bytes=terms.kv_bytes,
        flops=terms.flops, network_bytes=terms.network_bytes, active_experts=terms.active_experts,
        tokens_per_expert=terms.tokens_per_expert, intensity=terms.intensity,
        expert_intensity=expert_intensity)


def decode_point(rf: Roofline, batch: int) -> Point:
    return point(rf, batch, decode_terms(rf, batch))


def prefill_point(rf: Roofline, tokens: int) -> Point:
    return point(rf, tokens, prefill_terms(rf, tokens))


def roofline_report(rf: Roofline, gpu: GpuSpec, batches: tuple[int, ...] | list[int] = DEFAULT_BATCHES,
                    prefill_tokens: tuple[int, ...] | list[int] = DEFAULT_PREFILL) -> RooflineReport:
    m, d = rf.model, rf.deployment
    kv_per_token = rf.kv_bytes_full + rf.kv_bytes_window
    return RooflineReport(
        roofline=rf, gpu_spec=gpu, total_params=m.total_params,
        active_params=m.active_block_params + m.head_params,
        weights_gib_per_gpu=rf.resident_bytes / GIB, kv_bytes_per_token=kv_per_token,
        kv_capacity_tokens=rf.kv_capacity_tokens,
        max_sequences=rf.kv_capacity_tokens // (d.input_len + d.output_len), ridge=rf.ridge,
        decode=[decode_point(rf, b) for b in sorted(set(batches))],
        prefill=[prefill_point(rf, p) for p in sorted(set(prefill_tokens))],
        assumptions=assumptions(rf, gpu), sources=sources(rf, gpu))


def sources(rf: Roofline, gpu: GpuSpec) -> list[str]:
    peak = {"fp4": gpu.tflops_fp4, "fp8": gpu.tflops_fp8, "fp16": gpu.tflops_fp16, "bf16": gpu.tflops_bf16}
    out = [f"memory: {source_of(gpu.memory_gib)}", f"bandwidth: {source_of(gpu.bandwidth_gbps)}"]
    for dtype in sorted({rf.linear_dtype, rf.attention_dtype}):
        value = peak[dtype] or gpu.tflops_bf16
        out.append(f"{dtype.upper()} peak: {source_of(value)}")
    out.append(f"link {rf.link.name}: {rf.link.source}")
    return out


def assumptions(rf: Roofline, gpu: GpuSpec) -> list[str]:
    """What the bound takes as given, in sentences (shown under the table and kept in the JSON)."""
    m, d = rf.model, rf.deployment
    out = [
        f"{gpu.name}: {figure(gpu.memory_gib):g} GiB, {rf.bandwidth / 1e9:,.0f} GB/s, "
        f"{rf.peak_linear / 1e12:,.1f} TFLOP/s dense {rf.linear_dtype.upper()}; link {rf.link.name} "
        f"{rf.link.bytes_per_s / 1e9:,.0f} GB/s per GPU and direction.",
        f"Layout: {d.gpus} GPUs, TP={d.tp}, EP={d.ep}, {d.dp} attention replica(s); weights {d.dtype.upper()} "
        f"({DTYPE_BYTES[d.dtype]:g} B each), embeddings and head 16-bit, KV cache {d.kv_dtype.upper()}.",
        f"Decode context {d.decode_context:g} tokens per sequence (input {d.input_len} + half of output "
        f"{d.output_len}); per-step overhead {d.step_overhead_s * 1e3:g} ms; {d.mem_fraction:.0%} of "
        "memory usable for weights and KV cache.",
        "Bound = overhead + max(memory, compute, interconnect): perfect overlap, peak datasheet figures, "
        "uniform expert routing, averages over GPUs (the busiest GPU is slower).",
    ]
    if rf.linear_dtype != d.dtype:
        out.append(f"{gpu.name} has no {d.dtype.upper()} tensor cores: those GEMMs at the "
                   f"{rf.linear_dtype.upper()} peak.")
    if m.attention == "mla":
        out.append("MLA: the latent KV cache is on every tensor-parallel rank; decode attention with "
                   "absorbed up-projections.")
    elif d.tp > m.kv_heads:
        out.append(f"TP={d.tp} exceeds the {m.kv_heads} KV heads: KV heads are replicated.")
    if m.window_layers:
        out.append(f"{m.window_layers} sliding-window layers read at most {m.window} tokens of context.")
    return out
