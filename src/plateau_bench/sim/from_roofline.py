"""A twin from first principles: the engine's step time and KV cache derived from the roofline.

``sim --model CONFIG --gpu ... --tp ...`` and ``serve-sim`` with the same flags explore a
deployment before it exists. The step-time coefficients are the roofline's cost of each kind of
work (``roofline.step_coefficients``: weights and KV over bandwidth, FLOPs over peak, collectives
over the link, a fixed overhead) divided by an efficiency factor, the fraction of the hardware an
engine reaches. The KV cache is what the memory holds after the weights. The scheduler's limits
are vLLM's defaults unless given: 256 running sequences, an 8,192-token step budget.

The factor is the one unknown a datasheet cannot give. By default it is one per resource, as
measured on a GPU (``roofline.measured_efficiency``: the weights streamed at 0.79 of the memory
bandwidth, large products at 0.69 of the compute peak, the interconnect at 0.5, not measured); set
one factor for all (``--efficiency``) or read it off a measured sweep of a similar deployment
(``--efficiency-from RUN_DIR``, see ``analysis.roofline_place.efficiency_from_levels``).
"""

from __future__ import annotations

import msgspec

from plateau_bench.roofline import Efficiency, Roofline, measured_efficiency, step_coefficients
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.step_model import StepModel

DEFAULT_MAX_NUM_SEQS = 256          # vLLM --max-num-seqs default
DEFAULT_BATCHED_TOKENS = 8192       # vLLM's step budget for online serving on data-centre GPUs


def engine_from_roofline(rf: Roofline, efficiency: float | Efficiency | None = None,
                         step_overhead_s: float | None = None) -> EngineConfig:
    """An engine whose steps take the roofline's time over ``efficiency`` (one factor, or one per
    resource; default: the measured ones; ConfigError outside (0, 1]) plus a fixed overhead (default:
    the roofline's)."""
    if efficiency is None:
        efficiency = measured_efficiency()
    per_resource = efficiency if isinstance(efficiency, Efficiency) else Efficiency.uniform(efficiency)
    if step_overhead_s is not None:
        rf = msgspec.structs.replace(rf, deployment=msgspec.structs.replace(rf.deployment,
                                                                           step_overhead_s=step_overhead_s))
    coeffs = step_coefficients(rf, efficiency, experts="separate")
    d, m = rf.deployment, rf.model
    step = StepModel(t0=coeffs.t0, a=coeffs.a, b=coeffs.b, c=coeffs.c)
    if m.is_moe:   # the routed experts as the roofline reads them: concave in the step's tokens
        step = msgspec.structs.replace(
            step, experts=m.experts, expert_miss=1.0 - m.top_k / m.experts, expert_tokens=d.moe_ranks / d.gpus,
            expert_s=m.moe_layers * rf.expert_bytes / d.moe_ranks / rf.bandwidth / per_resource.memory)
    layout = f"TP={d.tp}" + (f" EP={d.ep}" if d.ep > 1 else "")
    name = f"{m.name} on {d.gpus}x {rf.gpu} ({layout}, {d.dtype})"
    config = EngineConfig(
        name=name, model_name=m.name,
        description=(f"derived from the roofline at {per_resource.describe()}: {name}; KV cache "
                     f"{rf.kv_capacity_tokens:,} tokens from the memory left after the weights"),
        step=step,
        max_num_seqs=DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens=DEFAULT_BATCHED_TOKENS,
        kv_tokens=max(rf.kv_capacity_tokens, 16))
    config.validate()
    return config
