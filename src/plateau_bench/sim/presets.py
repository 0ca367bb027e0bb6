"""Engine presets: calibrated twins of the reference runs and generic deployments.

Each preset's ``description`` says where its numbers come from. The reference runs are in
``reference/seed-runs.md``; generic presets derive the step-time coefficients from a roofline
(weights and KV bytes over HBM bandwidth, FLOPs over a realistic fraction of peak) and state the
assumptions, so they give the right shape, not a measurement of any particular machine.
"""

from __future__ import annotations

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.result import EngineSummary, StepCoefficients
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.step_model import StepModel

_PRESETS: dict[str, EngineConfig] = {}


def _add(config: EngineConfig) -> None:
    config.validate()
    _PRESETS[config.name] = config


_add(EngineConfig(
    name="seed-a-tp8ep",
    model_name="seed-a-tp8ep",
    description=(
        "Run A, TP=8 with expert parallelism: 230B FP8 MoE on 8x 96 GB PCIe GPUs, vLLM, admission cap 256. "
        "t0 and a fitted to 71 tok/s at C=1 and 3,962.8 tok/s / 33.1 s wall at C=256 (512 output tokens, "
        "128 input tokens assumed); c = KV bytes read per token (62 layers x 8 KV heads x 128 x 2, FP8, "
        "split over 8 GPUs) / 1.8 TB/s; b assumes compute-efficient prefill (~50k tok/s). Token budget "
        "16,384 (assumed); KV: ~480 GB free over 8 GPUs at 127 kB/token."),
    step=StepModel(t0=13.9e-3, a=0.1895e-3, b=20e-6, c=9e-9),
    max_num_seqs=256, max_num_batched_tokens=16384, kv_tokens=3_800_000, max_model_len=196_608,
))
_add(EngineConfig(
    name="seed-a-tp4",
    model_name="seed-a-tp4",
    description=(
        "Run A's other configuration, TP=4 without EP on 4 GPUs: fitted to 84 tok/s at C=1 and 2,586 tok/s "
        "at C=256; cap 256 as for TP=8 (not stated in the reference). Per-GPU KV read and prefill cost are "
        "twice TP=8's; KV ~100 GB free over 4 GPUs. Crosses the TP=8+EP curve between C=12 and C=16, as "
        "measured."),
    step=StepModel(t0=11.5e-3, a=0.335e-3, b=40e-6, c=18e-9),
    max_num_seqs=256, max_num_batched_tokens=16384, kv_tokens=780_000, max_model_len=196_608,
))
_add(EngineConfig(
    name="seed-b-fp4",
    model_name="seed-b-fp4",
    description=(
        "Run B: FP4 MoE, TP=8 on 8x 96 GB PCIe GPUs, SGLang without CUDA graphs, --max-running-requests "
        "1024, prefill-first scheduling with an 8,192-token prefill chunk (SGLang's default for this GPU "
        "size). t0 from 10.22 tok/s at C=1 (~98 ms per step without CUDA graphs); a and b fitted to the "
        "1,024 and 2,048 rows with bench_serving's random lengths (uniform in [1, 128]). KV capacity is "
        "an assumption (it never binds at 128/128)."),
    step=StepModel(t0=97e-3, a=0.10e-3, b=0.26e-3, c=0.0),
    max_num_seqs=1024, max_num_batched_tokens=8192, kv_tokens=2_000_000, max_model_len=131_072,
    policy="prefill_first",
))
_add(EngineConfig(
    name="tiny",
    model_name="tiny",
    description=(
        "A small fast engine for tests and the demo: cap 32, steps of 2-6 ms (t0 2 ms + 0.1 ms per "
        "sequence), so the plateau (~6,000 tok/s from C=32) is reached in a real-time sweep of a few "
        "seconds. Not a model of any hardware."),
    step=StepModel(t0=2e-3, a=0.1e-3, b=2e-6, c=0.0),
    max_num_seqs=32, max_num_batched_tokens=2048, kv_tokens=131_072, max_model_len=8192,
))
_add(EngineConfig(
    name="llama-8b-h100",
    model_name="llama-8b-h100",
    description=(
        "Llama-3.1-8B in BF16 on one H100 SXM 80 GB with vLLM defaults for that GPU (max-num-seqs 1024, "
        "8,192-token budget). Roofline: 16 GB of weights / 3.35 TB/s = 4.8 ms, +1.7 ms per-step overhead "
        "(t0 6.5 ms); 16 GFLOP per token at ~60 % of 989 TFLOP/s (a = b = 0.027 ms); 131 kB of KV per "
        "token / 3.35 TB/s (c = 39 ns). KV: ~52 GB free = ~400k tokens. Shape, not a measurement."),
    step=StepModel(t0=6.5e-3, a=0.027e-3, b=0.027e-3, c=39e-9),
    max_num_seqs=1024, max_num_batched_tokens=8192, kv_tokens=400_000, max_model_len=131_072,
))
_add(EngineConfig(
    name="llama-70b-4xh100",
    model_name="llama-70b-4xh100",
    description=(
        "Llama-3.1-70B in BF16, TP=4 on 4x H100 SXM 80 GB (NVLink), vLLM defaults (max-num-seqs 1024, "
        "8,192-token budget). Roofline per GPU: 35 GB of weights / 3.35 TB/s = 10.5 ms plus all-reduce "
        "and launch overhead (t0 14 ms); 140 GFLOP per token over 4 GPUs at ~60 % of peak plus all-reduce "
        "volume (a 0.07 ms, b 0.06 ms); 327 kB of KV per token read at 4x 3.35 TB/s (c = 24 ns). KV: "
        "~130 GB free = ~400k tokens. Shape, not a measurement."),
    step=StepModel(t0=14e-3, a=0.07e-3, b=0.06e-3, c=24e-9),
    max_num_seqs=1024, max_num_batched_tokens=8192, kv_tokens=400_000, max_model_len=131_072,
))
_add(EngineConfig(
    name="compute-bound",
    model_name="compute-bound",
    description=(
        "A plateau from compute, not from a cap: max-num-seqs 4096 and a KV cache that never fills, but "
        "each sequence adds 0.2 ms to a 5 ms step, so throughput D/(5 ms + 0.2 ms*D) flattens towards "
        "5,000 tok/s while TPOT grows in proportion to the batch (the compute-saturation signature)."),
    step=StepModel(t0=5e-3, a=0.2e-3, b=10e-6, c=0.0),
    max_num_seqs=4096, max_num_batched_tokens=16384, kv_tokens=20_000_000, max_model_len=32768,
))


def list_presets() -> list[EngineConfig]:
    """Every preset, in a stable order."""
    return list(_PRESETS.values())


def get_preset(name: str) -> EngineConfig:
    """The preset called ``name``; ConfigError listing the known names otherwise."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; known presets: {', '.join(_PRESETS)}") from None


def preset_summary(config: EngineConfig) -> EngineSummary:
    """The key parameters, as shown by ``plateau presets`` and stored in results."""
    return EngineSummary(name=config.name, policy=config.policy, max_num_seqs=config.max_num_seqs,
                         max_num_batched_tokens=config.max_num_batched_tokens, kv_tokens=config.kv_tokens,
                         block_size=config.block_size,
                         step=msgspec.convert(msgspec.to_builtins(config.step), StepCoefficients))
