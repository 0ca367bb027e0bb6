"""The roofline: a lower bound on the time of one engine step, per resource, on the busiest GPU.

A step moves ``n`` tokens through the model (a decode step: one per running sequence; a prefill
step: the prompt tokens of its chunk). On each GPU it cannot take less than any of:

* **memory**: the weight bytes it reads, plus the KV cache it reads, over the memory bandwidth.
  Weights: the attention, dense MLPs, shared experts and output head, split ``tp`` ways, and the
  routed experts the step's tokens activate. With ``E`` experts, ``k`` per token and ``m`` tokens
  through one copy of the experts, the expected number of distinct experts hit in a layer is
  ``E * (1 - (1 - k/E)^m)`` (each expert is missed by one token with probability ``1 - k/E``;
  routing is taken as uniform, which balanced routers aim for), split over the ``moe_ranks``
  that share the copy. KV: the context each sequence attends to (prompt plus half the answer on
  average), per layer: GQA keys and values of the rank's KV heads (replicated when ``tp`` exceeds
  the KV heads), the MLA latent (the same on every rank).
* **compute**: 2 FLOPs per weight per token for the linear layers (at the weight dtype's dense peak),
  plus attention (q.k and p.v over the context) at the KV dtype's peak.
* **interconnect**: bytes each GPU sends: a ring all-reduce sends ``2 (tp-1)/tp`` of the hidden
  states (two per layer: attention and MLP output); expert all-to-all (``ep > tp``) sends each token's
  hidden state to its ``k`` experts and back, ``(ep-1)/ep`` of them to other GPUs.

The bound is ``overhead + max(memory, compute, interconnect)``: perfect overlap of the three and a
fixed per-step cost (scheduling, sampling, launches). The binding resource is the largest term.
Everything is an average over GPUs, so the busiest one is at least this slow: the bound is a floor,
and a measured figure below it says how much of the hardware the engine leaves unused.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.deployment import ACTIVATION_BYTES, DTYPE_BYTES, HEAD_BYTES, Deployment
from plateau_bench.roofline.hardware import GpuSpec, Link, figure
from plateau_bench.roofline.model import Dtype, ModelShape

Resource = Literal["weights", "kv", "compute", "interconnect", "overhead"]
GIB = 1 << 30


def expected_active_experts(experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts ``tokens`` tokens hit when each picks ``top_k`` of ``experts`` uniformly."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return float(experts * (1.0 - (1.0 - top_k / experts) ** tokens))


class Roofline(msgspec.Struct, frozen=True, kw_only=True):
    """Per-GPU constants of one model on one deployment (all bytes and FLOPs per GPU unless named)."""

    model: ModelShape
    deployment: Deployment
    gpu: str
    link: Link
    bandwidth: float                 # memory bytes/s
    peak_linear: float               # FLOP/s at the weight dtype
    linear_dtype: Dtype              # the dtype the linear layers run at (wider when unsupported)
    peak_attention: float
    attention_dtype: Dtype
    dense_bytes: float               # read every step: attention, dense MLPs, shared experts, head
    expert_bytes: float              # one routed expert of one layer, whole
    resident_bytes: float            # every weight a GPU holds
    usable_bytes: float              # memory x mem_fraction
    kv_bytes_full: float             # per context token, full-attention layers
    kv_bytes_window: float           # per context token, sliding-window layers
    block_dense_flops: float         # per token, whole model: attention, dense MLP, shared experts
    expert_flops: float              # per token, whole model: its k experts in every MoE layer
    head_flops: float                # per token that needs logits
    attn_decode_full: float          # per query token per context token, whole model
    attn_decode_window: float
    attn_prefill_full: float
    attn_prefill_window: float
    allreduces: int                  # all-reduces of the hidden state per step
    kv_capacity_tokens: int          # KV cache in tokens, all replicas together

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a step is compute-bound (peak / bandwidth)."""
        return self.peak_linear / self.bandwidth


class StepTerms(msgspec.Struct, frozen=True, kw_only=True):
    """One step's lower bound, resource by resource (seconds, bytes and FLOPs per GPU)."""

    weights_s: float
    kv_s: float
    compute_s: float
    network_s: float
    overhead_s: float
    weight_bytes: float
    kv_bytes: float
    flops: float
    network_bytes: float
    active_experts: float            # distinct experts hit per MoE layer in one copy of the experts
    tokens_per_expert: float         # tokens each hit expert multiplies (its GEMM's batch)

    @property
    def step_s(self) -> float:
        return self.overhead_s + max(self.weights_s + self.kv_s, self.compute_s, self.network_s)

    @property
    def binding(self) -> Resource:
        memory = self.weights_s + self.kv_s
        top = max(memory, self.compute_s, self.network_s)
        if self.overhead_s > top:
            return "overhead"
        if memory >= self.compute_s and memory >= self.network_s:
            return "weights" if self.weights_s >= self.kv_s else "kv"
        return "compute" if self.compute_s >= self.network_s else "interconnect"

    @property
    def intensity(self) -> float:
        """FLOPs per byte read from memory."""
        read = self.weight_bytes + self.kv_bytes
        return self.flops / read if read else 0.0


def build_roofline(model: ModelShape, gpu: GpuSpec, deployment: Deployment, link: Link) -> Roofline:
    """The per-GPU constants; ConfigError when the layout is impossible or the weights do not fit."""
    d = deployment
    d.check(model)
    wb = DTYPE_BYTES[d.dtype]
    peak_linear, linear_dtype = gpu.peak(d.dtype)
    peak_attention, attention_dtype = gpu.peak(d.kv_dtype)
    tp, moe_ranks = d.tp, d.moe_ranks
    dense_block = float(model.layers * model.attn_params + model.dense_layers * model.dense_mlp_params
                        + model.moe_layers * model.shared_params)
    head_read = model.head_params * HEAD_BYTES / tp
    embed_resident = model.head_params * HEAD_BYTES / tp * (1 if model.tied_embeddings else 2)
    expert_bytes = model.expert_params * wb
    resident = (dense_block * wb / tp + embed_resident
                + model.moe_layers * model.experts * expert_bytes / moe_ranks)
    usable = figure(gpu.memory_gib) * GIB * d.mem_fraction
    # GQA shards KV heads over the TP group (one per rank at least); the MLA latent is on every rank.
    kv_token_layer = model.kv_elems * DTYPE_BYTES[d.kv_dtype] / min(tp, model.kv_heads)
    full_layers = model.layers - model.window_layers
    kv_full = full_layers * kv_token_layer
    kv_window = model.window_layers * kv_token_layer
    capacity = _kv_capacity(usable - resident, kv_full + kv_window, d.dp, gpu, resident, usable)
    allreduces = 0
    if tp > 1:
        allreduces = model.layers + (model.dense_layers if d.alltoall else model.layers)
    return Roofline(
        model=model, deployment=d, gpu=gpu.name, link=link, bandwidth=figure(gpu.bandwidth_gbps) * 1e9,
        peak_linear=peak_linear, linear_dtype=linear_dtype, peak_attention=peak_attention,
        attention_dtype=attention_dtype, dense_bytes=dense_block * wb / tp + head_read,
        expert_bytes=expert_bytes, resident_bytes=resident, usable_bytes=usable,
        kv_bytes_full=kv_full, kv_bytes_window=kv_window, block_dense_flops=2.0 * dense_block,
        expert_flops=2.0 * model.top_k * model.expert_params * model.moe_layers,
        head_flops=2.0 * model.head_params,
        attn_decode_full=full_layers * model.decode_attn_flops,
        attn_decode_window=model.window_layers * model.decode_attn_flops,
        attn_prefill_full=full_layers * model.prefill_attn_flops,
        attn_prefill_window=model.window_layers * model.prefill_attn_flops,
        allreduces=allreduces, kv_capacity_tokens=capacity)


def _kv_capacity(free: float, kv_per_token: float, dp: int, gpu: GpuSpec, resident: float,
                 usable: float) -> int:
    if free <= 0:
        raise ConfigError(
            f"the weights need {resident / GIB:.1f} GiB per GPU, more than the {usable / GIB:.1f} GiB usable "
            f"on {gpu.name}: use more GPUs (--gpus/--tp/--ep), a smaller --dtype or a larger --mem-fraction")
    return int(free / kv_per_token) * dp if kv_per_token > 0 else 0


def step_terms(rf: Roofline, tokens: float, *, kv_bytes: float, attn_flops: float,
               head_tokens: float) -> StepTerms:
    """The bound for a step moving ``tokens`` tokens (engine-wide) through the layers, reading
    ``kv_bytes`` of KV cache and doing ``attn_flops`` of attention per GPU, ``head_tokens`` of them
    needing logits."""
    d, m = rf.deployment, rf.model
    replica_tokens = tokens / d.dp
    expert_tokens = tokens * d.moe_ranks / d.gpus
    active = expected_active_experts(m.experts, m.top_k, expert_tokens)
    weight_bytes = rf.dense_bytes + m.moe_layers * active * rf.expert_bytes / d.moe_ranks
    linear = (replica_tokens * rf.block_dense_flops / d.tp + tokens * rf.expert_flops / d.gpus
              + head_tokens / d.dp * rf.head_flops / d.tp)
    network = rf.allreduces * 2.0 * (d.tp - 1) / d.tp * replica_tokens * m.hidden * ACTIVATION_BYTES
    if d.alltoall:
        network += (m.moe_layers * 2.0 * tokens / d.gpus * m.top_k * m.hidden * ACTIVATION_BYTES
                    * (d.ep - 1) / d.ep)
    return StepTerms(
        weights_s=weight_bytes / rf.bandwidth, kv_s=kv_bytes / rf.bandwidth,
        compute_s=linear / rf.peak_linear + attn_flops / rf.peak_attention,
        network_s=network / rf.link.bytes_per_s, overhead_s=d.step_overhead_s,
        weight_bytes=weight_bytes, kv_bytes=kv_bytes, flops=linear + attn_flops, network_bytes=network,
        active_experts=active, tokens_per_expert=expert_tokens * m.top_k / active if active else 0.0)


def decode_terms(rf: Roofline, batch: float, context: float | None = None) -> StepTerms:
    """A decode step of ``batch`` sequences, each attending to ``context`` tokens (default: the
    deployment's prompt plus half its answer)."""
    d = rf.deployment
    ctx = d.decode_context if context is None else context
    windowed = min(ctx, rf.model.window) if rf.model.window else 0.0
    seqs = batch / d.dp
    kv = seqs * (ctx * rf.kv_bytes_full + windowed * rf.kv_bytes_window)
    attn = seqs * (ctx * rf.attn_decode_full + windowed * rf.attn_decode_window) / d.tp
    return step_terms(rf, batch, kv_bytes=kv, attn_flops=attn, head_tokens=batch)


def prefill_terms(rf: Roofline, tokens: float) -> StepTerms:
    """A prefill step of ``tokens`` prompt tokens from prompts of the deployment's input length."""
    d = rf.deployment
    ctx = (d.input_len + 1) / 2.0          # causal: the mean query attends to half its prompt
    windowed = min(ctx, rf.model.window) if rf.model.window else 0.0
    replica = tokens / d.dp
    kv = replica * (rf.kv_bytes_full + rf.kv_bytes_window)   # written once
    attn = replica * (ctx * rf.attn_prefill_full + windowed * rf.attn_prefill_window) / d.tp
    return step_terms(rf, tokens, kv_bytes=kv, attn_flops=attn, head_tokens=tokens / d.input_len)
