"""What the verdict and the twin take from the roofline: the ceiling at a batch, and step-time
coefficients from first principles.

* ``ceiling_at_batch(rf, batch)``: the highest decode throughput the hardware allows at that
  decoding batch, and the resource that sets it. ``share_of_ceiling`` is a measured throughput as a
  fraction of it; ``capped`` keeps a prediction at or below it.
* ``step_coefficients(rf, efficiency)``: the twin's step model ``t = t0 + a*decode_seqs +
  b*prefill_tokens + c*kv_tokens_read`` (seconds). Each term is the roofline's cost of that work
  divided by ``efficiency`` (the fraction of peak an engine reaches; 1 = the roofline), and the
  terms add instead of overlapping. The routed-expert weights read, concave in the tokens of a
  step (all experts are hit from a few hundred tokens on), enter as the tangent at ``batch_ref``
  tokens: exact there, above the curve everywhere else. So at any efficiency <= 1 the twin is never
  faster than the bound (``step_time_bound``), and the price is a pessimistic MoE at small batches
  (at batch 1 it reads nearly the weights of batch ``batch_ref``). A twin that can add a concave
  term takes ``experts="separate"`` and adds ``expert_weights_s`` itself: then it follows the bound's
  shape at every batch. ``calibrate_efficiency`` reads the factor off one measured level.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal, NamedTuple

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.bound import Resource, Roofline, decode_terms, expected_active_experts, step_terms
from plateau_bench.roofline.deployment import ACTIVATION_BYTES
from plateau_bench.roofline.efficiency import Efficiency

ExpertTerm = Literal["tangent", "separate"]


class Ceiling(NamedTuple):
    tok_s: float
    binding: Resource


class StepCoefficients(NamedTuple):
    t0: float
    a: float
    b: float
    c: float


def ceiling_at_batch(rf: Roofline, batch: float, context: float | None = None) -> Ceiling:
    """Decode tokens/s the hardware could reach with ``batch`` sequences decoding, and what binds.

    ``context``: the mean context each sequence attends to (default: the deployment's lengths)."""
    if batch <= 0:
        raise ConfigError(f"a decode batch must be > 0 (got {batch})")
    terms = decode_terms(rf, batch, context)
    return Ceiling(batch / terms.step_s, terms.binding)


def share_of_ceiling(rf: Roofline, batch: float, tok_s: float, context: float | None = None) -> float:
    """A measured decode throughput at ``batch`` as a fraction of the roofline there (0.31 = 31 %)."""
    return tok_s / ceiling_at_batch(rf, batch, context).tok_s


def capped(rf: Roofline, batch: float, predicted_tok_s: float, context: float | None = None) -> float:
    """A predicted throughput, never above the roofline at that batch."""
    return min(predicted_tok_s, ceiling_at_batch(rf, batch, context).tok_s)


def calibrate_efficiency(rf: Roofline, batch: float, measured_tok_s: float, *, batch_ref: int = 256,
                         experts: ExpertTerm = "tangent") -> float:
    """The efficiency factor that makes the twin's decode step at ``batch`` take what one measured
    level took (``batch / measured_tok_s``), at most 1."""
    if measured_tok_s <= 0 or batch <= 0:
        raise ConfigError(f"a measured level needs a batch and a throughput > 0 (got {batch}, {measured_tok_s})")
    ideal = step_coefficients(rf, 1.0, batch_ref=batch_ref, experts=experts)
    overhead = rf.deployment.step_overhead_s
    work = ideal.t0 - overhead + ideal.a * batch + ideal.c * batch * rf.deployment.decode_context
    if experts == "separate":
        work += expert_weights_s(rf, batch)
    measured_step = batch / measured_tok_s
    if measured_step <= overhead + work:
        return 1.0
    return work / (measured_step - overhead)


class Calibration(NamedTuple):
    efficiency: float          # fraction of the roofline the engine's work reaches
    step_overhead_s: float     # fixed cost of a step beyond the roofline (scheduling, launches, sampling)
    residuals: list[float]     # measured minus fitted step time per point (seconds)


def _work_s(rf: Roofline, batch: float, context: float) -> float:
    """A decode step's roofline work at efficiency 1, beyond the fixed overhead (terms added, experts apart)."""
    ideal = step_coefficients(rf, 1.0, experts="separate")
    return (ideal.t0 - rf.deployment.step_overhead_s + ideal.a * batch + ideal.c * batch * context
            + expert_weights_s(rf, batch))


def fit_overhead_and_efficiency(rf: Roofline, points: list[tuple[float, float, float]]) -> Calibration:
    """The step overhead and efficiency that best explain measured decode steps.

    ``points``: (decoding batch, measured step seconds, context tokens) per level. The model is
    ``step = overhead + work(batch) / efficiency`` with ``work`` the roofline's (``_work_s``),
    least squares over the points; one point (or batches all alike) keeps the roofline's overhead
    and reads the efficiency off the mean. The efficiency stays at most 1, the overhead at least 0.
    """
    if not points:
        raise ConfigError("calibration needs at least one measured level with a decoding batch and a TPOT")
    work = [_work_s(rf, b, ctx) for b, _, ctx in points]
    step = [t for _, t, _ in points]
    n, mw, mt = len(points), sum(work) / len(points), sum(step) / len(points)
    spread = sum((w - mw) ** 2 for w in work)
    if n >= 2 and spread > 1e-6 * mw * mw * n:
        inv = sum((w - mw) * (t - mt) for w, t in zip(work, step, strict=True)) / spread
        overhead = mt - inv * mw
    else:
        overhead, inv = rf.deployment.step_overhead_s, 0.0
    if overhead < 0 or inv <= 0:   # through the roofline's own overhead instead
        overhead = min(rf.deployment.step_overhead_s, min(step))
        inv = sum(w * (t - overhead) for w, t in zip(work, step, strict=True)) / sum(w * w for w in work)
    if inv < 1.0:                  # faster than the hardware allows: the roofline, and the rest overhead
        inv = 1.0
        overhead = max(0.0, mt - mw)
    residuals = [t - (overhead + w * inv) for w, t in zip(work, step, strict=True)]
    return Calibration(efficiency=1.0 / inv, step_overhead_s=overhead, residuals=residuals)


def step_time_bound(rf: Roofline, decode_seqs: float, prefill_tokens: float, kv_tokens_read: float) -> float:
    """The roofline for one mixed step (engine-wide counts, as the twin schedules them)."""
    d = rf.deployment
    ctx = (d.input_len + 1) / 2.0
    kv = kv_tokens_read / d.dp * (rf.kv_bytes_full + rf.kv_bytes_window)
    attn = (kv_tokens_read * (rf.attn_decode_full + rf.attn_decode_window)
            + prefill_tokens * ctx * (rf.attn_prefill_full + rf.attn_prefill_window)) / d.gpus
    heads = decode_seqs + prefill_tokens / d.input_len
    return step_terms(rf, decode_seqs + prefill_tokens, kv_bytes=kv, attn_flops=attn, head_tokens=heads).step_s


def expert_weights_s(rf: Roofline, tokens: float, efficiency: float = 1.0) -> float:
    """Seconds per step to read the routed experts ``tokens`` tokens (engine-wide) activate: the
    roofline's own term, concave in ``tokens``, for a twin that models it apart (``experts="separate"``)."""
    d, m = rf.deployment, rf.model
    active = expected_active_experts(m.experts, m.top_k, tokens * d.moe_ranks / d.gpus)
    return m.moe_layers * active * rf.expert_bytes / d.moe_ranks / rf.bandwidth / efficiency


def _expert_tangent(rf: Roofline, batch_ref: int) -> tuple[float, float]:
    """Intercept and slope (active experts per copy, per engine token) of the tangent at ``batch_ref``."""
    m, per_copy = rf.model, rf.deployment.moe_ranks / rf.deployment.gpus
    if not m.is_moe:
        return 0.0, 0.0
    at = expected_active_experts(m.experts, m.top_k, batch_ref * per_copy)
    miss = 1.0 - m.top_k / m.experts
    slope = per_copy * -m.experts * math.log(miss) * miss ** (batch_ref * per_copy) if miss > 0 else 0.0
    return at - batch_ref * slope, slope


def step_coefficients(rf: Roofline, efficiency: float | Efficiency, *, batch_ref: int = 256,
                      experts: ExpertTerm = "tangent") -> StepCoefficients:
    """The twin's step-time coefficients (seconds per step, per sequence, per prompt token, per KV token).

    ``efficiency``: one factor for every resource, or one per resource (``Efficiency``): bytes read
    are divided by the memory factor, FLOPs by the compute factor, collectives by the interconnect's.
    ``experts="tangent"`` folds the routed-expert reads into ``t0`` and the per-token terms as the
    tangent at ``batch_ref`` tokens; ``"separate"`` leaves them out (add ``expert_weights_s``)."""
    e = _efficiency(efficiency)
    if batch_ref < 1:
        raise ConfigError(f"the reference batch must be >= 1 (got {batch_ref})")
    d, m = rf.deployment, rf.model
    intercept, slope = _expert_tangent(rf, batch_ref) if experts == "tangent" else (0.0, 0.0)
    expert_read = m.moe_layers * rf.expert_bytes / d.moe_ranks / rf.bandwidth   # s per active expert
    network = rf.allreduces * 2.0 * (d.tp - 1) / d.tp * m.hidden * ACTIVATION_BYTES / d.dp
    if d.alltoall:
        network += m.moe_layers * 2.0 / d.gpus * m.top_k * m.hidden * ACTIVATION_BYTES * (d.ep - 1) / d.ep
    per_token = ((rf.block_dense_flops + rf.expert_flops) / d.gpus / rf.peak_linear / e.compute
                 + network / rf.link.bytes_per_s / e.interconnect + slope * expert_read / e.memory)
    ctx = (d.input_len + 1) / 2.0
    prefill_attn = ctx * (rf.attn_prefill_full + rf.attn_prefill_window) / d.gpus / rf.peak_attention / e.compute
    head = rf.head_flops / d.gpus / rf.peak_linear / e.compute
    kv = ((rf.kv_bytes_full + rf.kv_bytes_window) / d.dp / rf.bandwidth / e.memory
          + (rf.attn_decode_full + rf.attn_decode_window) / d.gpus / rf.peak_attention / e.compute)
    t0 = d.step_overhead_s + (rf.dense_bytes / rf.bandwidth + intercept * expert_read) / e.memory
    return StepCoefficients(t0=t0, a=per_token + head, b=per_token + head / d.input_len + prefill_attn, c=kv)


def _efficiency(efficiency: float | Efficiency) -> Efficiency:
    if isinstance(efficiency, Efficiency):
        return efficiency.check()
    if not 0 < efficiency <= 1:
        raise ConfigError(f"the efficiency factor must be in (0, 1] (got {efficiency})")
    return Efficiency.uniform(efficiency)


def read_roofline(path: Path) -> Roofline:
    """The roofline saved by ``plateau roofline --json`` (its ``roofline`` member), or a bare one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read roofline file {path}: {exc.strerror or exc}") from None

    class _Saved(msgspec.Struct):
        roofline: Roofline

    try:
        return msgspec.json.decode(data, type=_Saved).roofline
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise ConfigError(f"roofline file {path}: not JSON ({exc})") from None
    try:
        return msgspec.json.decode(data, type=Roofline)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"roofline file {path}: not a roofline ({exc})") from None
