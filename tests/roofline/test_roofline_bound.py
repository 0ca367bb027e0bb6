"""The bound, term by term, against figures worked out by hand (datasheet numbers written out)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.roofline import (
    DEFAULT_BATCHES,
    Deployment,
    ModelShape,
    Roofline,
    build_roofline,
    decode_terms,
    expected_active_experts,
    find_gpu,
    find_link,
    prefill_terms,
    read_model_config,
    roofline_report,
)
from plateau_bench.roofline.model import Dtype

DATA = Path(__file__).parents[2] / "examples" / "models"   # model configs shipped as examples
LLAMA = read_model_config(DATA / "dense_gqa_llama.json")
QWEN_MOE = read_model_config(DATA / "moe_shared_qwen2moe.json")
DEEPSEEK = read_model_config(DATA / "mla_deepseek_v3.json")
MOE_230B = read_model_config(DATA / "gqa_moe_230b.json")

H100_BW, H100_BF16 = 3.35e12, 989.5e12
H200_BW, H200_FP8 = 4.8e12, 1979e12
NVLINK4 = 450e9


def roofline(model: ModelShape, gpu: str, *, gpus: int = 1, tp: int = 1, ep: int = 1, dtype: Dtype = "bf16",
             input_len: int = 768, output_len: int = 512, overhead_ms: float = 0.5,
             link: str | None = None) -> Roofline:
    spec = find_gpu(gpu)
    layout = Deployment(gpus=gpus, tp=tp, ep=ep, dtype=dtype, input_len=input_len, output_len=output_len,
                        step_overhead_s=overhead_ms / 1e3)
    return build_roofline(model, spec, layout, find_link(link, spec))


def test_dense_one_gpu_by_hand() -> None:
    rf = roofline(LLAMA, "h100")                      # context 768 + 512 / 2 = 1,024 tokens
    t = decode_terms(rf, 1)
    weights = 32 * 218_103_808 * 2 + 525_336_576 * 2  # blocks in BF16, head in 16 bits (embeddings not read)
    assert t.weight_bytes == weights == 15_009_316_864
    assert t.kv_bytes == 1024 * 32 * (2 * 8 * 128) * 2 == 134_217_728
    linear = 2 * (32 * 218_103_808 + 525_336_576)
    attention = 1024 * 32 * (4 * 32 * 128)
    assert t.flops == linear + attention
    assert t.weights_s == pytest.approx(weights / H100_BW)
    assert t.kv_s == pytest.approx(134_217_728 / H100_BW)
    assert t.compute_s == pytest.approx((linear + attention) / H100_BF16)
    assert t.network_s == t.network_bytes == 0
    assert t.step_s == pytest.approx(0.5e-3 + (weights + 134_217_728) / H100_BW)   # 5.02 ms
    assert t.binding == "weights"
    # KV capacity: 90 % of 80 GiB less the weights (embeddings too), over 32 x 2,048 x 2 bytes per token
    assert rf.kv_capacity_tokens == (80 * 2**30 * 9 // 10 - (weights + 525_336_576 * 2)) // 131_072 == 467_296


def test_dense_tensor_parallel_by_hand() -> None:
    rf = roofline(LLAMA, "h100", gpus=2, tp=2)
    t = decode_terms(rf, 64)
    assert t.weight_bytes == 15_009_316_864 / 2
    assert t.kv_bytes == 64 * 1024 * 32 * (2 * 4 * 128) * 2     # 4 of the 8 KV heads on each GPU
    assert t.flops == 64 * (2 * (32 * 218_103_808 + 525_336_576) + 1024 * 32 * 4 * 32 * 128) / 2
    # two ring all-reduces per layer, each sending 2 (2-1)/2 of 64 tokens x 4,096 x 2 bytes
    assert t.network_bytes == 64 * 1 * 64 * 4096 * 2 == 33_554_432
    assert t.network_s == pytest.approx(33_554_432 / NVLINK4)


def test_moe_with_shared_experts_by_hand() -> None:
    rf = roofline(QWEN_MOE, "a100", input_len=100, output_len=200)   # context 200
    t = decode_terms(rf, 4)
    active = 60 * (1 - (56 / 60) ** 4)                                  # 14.47 experts per layer
    assert t.active_experts == pytest.approx(active)
    assert t.tokens_per_expert == pytest.approx(4 * 4 / active)
    fixed = (24 * (16_777_216 + 34_603_008) + 151_936 * 2048) * 2       # attention, shared expert, head
    assert t.weight_bytes == pytest.approx(fixed + 24 * active * 8_650_752 * 2)
    assert t.kv_bytes == 4 * 200 * 24 * (2 * 16 * 128) * 2
    linear = 4 * 2 * (24 * (16_777_216 + 34_603_008 + 4 * 8_650_752) + 151_936 * 2048)
    assert t.flops == pytest.approx(linear + 4 * 200 * 24 * 4 * 16 * 128)
    assert t.weights_s == pytest.approx(t.weight_bytes / 2039e9)
    assert t.compute_s == pytest.approx(t.flops / 312e12)


def test_all_experts_are_read_at_large_batches() -> None:
    t = decode_terms(roofline(QWEN_MOE, "a100"), 4096)
    assert t.active_experts == pytest.approx(60)
    assert t.tokens_per_expert == pytest.approx(4096 * 4 / 60)


def test_mla_tensor_parallel_by_hand() -> None:
    rf = roofline(DEEPSEEK, "h200", gpus=8, tp=8, dtype="fp8", input_len=800, output_len=400)   # context 1,000
    t = decode_terms(rf, 32)
    assert t.kv_bytes == 32 * 1000 * 61 * 576 * 2       # the latent, whole on every GPU
    active = 256 * (1 - (248 / 256) ** 32)
    dense = (61 * 187_105_280 + 3 * 3 * 7168 * 18432 + 58 * 3 * 7168 * 2048) / 8 + 129_280 * 7168 * 2 / 8
    assert t.weight_bytes == pytest.approx(dense + 58 * active * 3 * 7168 * 2048 / 8)
    attention = 32 * 1000 * 61 * (2 * 128 * (2 * 512 + 64)) / 8
    linear = 32 * 2 * (61 * 187_105_280 + 3 * 3 * 7168 * 18432 + 58 * (27 * 7168 * 2048) + 129_280 * 7168) / 8
    assert t.flops == pytest.approx(linear + attention)
    assert t.compute_s == pytest.approx(linear / H200_FP8 + attention / 989.5e12)   # attention at the BF16 peak
    assert t.network_bytes == 2 * 61 * (2 * 7 / 8) * 32 * 7168 * 2
    assert t.weights_s + t.kv_s == pytest.approx((t.weight_bytes + t.kv_bytes) / H200_BW)


def test_expert_parallel_over_attention_replicas_uses_all_to_all() -> None:
    rf = roofline(DEEPSEEK, "h200", gpus=8, tp=1, ep=8, dtype="fp8", input_len=800, output_len=400)
    t = decode_terms(rf, 64)
    # no all-reduce (TP=1); 8 tokens per GPU each sent to 8 experts and back, 7/8 of them elsewhere
    assert t.network_bytes == 58 * 2 * 8 * 8 * 7168 * 2 * 7 / 8
    assert t.active_experts == pytest.approx(256 * (1 - (248 / 256) ** 64))   # all 64 tokens meet in one copy
    assert t.kv_bytes == 8 * 1000 * 61 * 576 * 2                               # 8 sequences per replica


def test_prefill_is_compute_bound_on_nvlink() -> None:
    rf = roofline(LLAMA, "h100", gpus=2, tp=2, input_len=2048, output_len=1)
    t = prefill_terms(rf, 16384)
    assert t.binding == "compute"
    ctx = (2048 + 1) / 2                                                              # causal: half the prompt
    linear = 16384 * 2 * 32 * 218_103_808 / 2 + 16384 / 2048 * 2 * 525_336_576 / 2   # logits for 8 prompts only
    assert t.flops == pytest.approx(linear + 16384 * ctx * 32 * 4 * 32 * 128 / 2)
    assert t.kv_bytes == 16384 * 32 * (2 * 4 * 128) * 2                               # written once


def test_overhead_and_interconnect_can_bind() -> None:
    assert decode_terms(roofline(LLAMA, "b200", overhead_ms=10.0), 1).binding == "overhead"
    assert decode_terms(roofline(LLAMA, "l40s", gpus=8, tp=8, link="pcie4"), 4096).binding == "interconnect"


def test_fp8_on_a100_runs_at_the_bf16_peak() -> None:
    rf = roofline(LLAMA, "a100", dtype="fp8")
    assert (rf.linear_dtype, rf.peak_linear) == ("bf16", 312e12)
    assert decode_terms(rf, 1).weight_bytes == 32 * 218_103_808 * 1 + 525_336_576 * 2
    assert any("no FP8 tensor cores" in line for line in roofline_report(rf, find_gpu("a100")).assumptions)


@pytest.mark.parametrize("model", [LLAMA, QWEN_MOE, MOE_230B], ids=lambda m: m.name)
def test_the_ceiling_never_falls_as_the_batch_grows(model: ModelShape) -> None:
    report = roofline_report(roofline(model, "h200", gpus=8, tp=8, dtype="fp8"), find_gpu("h200"))
    tok_s = [p.tok_s for p in report.decode]
    assert [p.batch for p in report.decode] == list(DEFAULT_BATCHES)
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(tok_s))


@pytest.mark.parametrize(("experts", "top_k", "tokens"), [(256, 8, 1), (256, 8, 4), (256, 8, 32), (256, 8, 100),
                                                          (60, 4, 16), (8, 2, 3)])
def test_expected_experts_against_monte_carlo(experts: int, top_k: int, tokens: int) -> None:
    rng = np.random.default_rng(1234)
    trials = 400
    # each token picks top_k distinct experts uniformly: the first top_k of a random permutation
    picks = rng.random((trials, tokens, experts), dtype=np.float32).argsort(axis=2)[:, :, :top_k]
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    distinct = hit.sum(axis=1)
    expected = expected_active_experts(experts, top_k, tokens)
    stderr = max(distinct.std(ddof=1) / np.sqrt(trials), 1e-9)
    assert abs(distinct.mean() - expected) < 4 * stderr + 1e-9, (distinct.mean(), expected)
    if tokens == 1:
        assert expected == pytest.approx(top_k)


def test_layouts_that_cannot_run() -> None:
    with pytest.raises(ConfigError, match="multiple of --tp"):
        roofline(LLAMA, "h100", gpus=3, tp=2)
    with pytest.raises(ConfigError, match="has no experts"):
        roofline(LLAMA, "h100", gpus=2, tp=2, ep=2)
    with pytest.raises(ConfigError, match="one must divide the other"):
        roofline(DEEPSEEK, "h200", gpus=12, tp=4, ep=6, dtype="fp8")
    with pytest.raises(ConfigError, match="GiB per GPU"):
        roofline(DEEPSEEK, "h100", dtype="fp8")
