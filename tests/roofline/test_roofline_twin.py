"""What the verdict and the twin use: the ceiling at a batch, first-principles step coefficients."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_bench.errors import ConfigError
from plateau_bench.roofline import (
    Ceiling,
    Deployment,
    Efficiency,
    Roofline,
    build_roofline,
    calibrate_efficiency,
    capped,
    ceiling_at_batch,
    decode_point,
    efficiency_sources,
    find_gpu,
    find_link,
    measured_efficiency,
    read_model_config,
    read_roofline,
    roofline_report,
    share_of_ceiling,
    step_coefficients,
    step_time_bound,
)
from plateau_bench.roofline.twin import ExpertTerm, expert_weights_s

DATA = Path(__file__).parents[2] / "examples" / "models"   # model configs shipped as examples


def make(model: str, gpu: str, gpus: int, tp: int, ep: int = 1) -> Roofline:
    spec = find_gpu(gpu)
    layout = Deployment(gpus=gpus, tp=tp, ep=ep, dtype="fp8", input_len=512, output_len=256)
    return build_roofline(read_model_config(DATA / model), spec, layout, find_link(None, spec))


DENSE = make("dense_gqa_llama.json", "h100", 2, 2)
MOE = make("gqa_moe_230b.json", "rtx-pro-6000", 8, 8, 8)
MLA_DP = make("mla_deepseek_v3.json", "h200", 8, 1, 8)


def twin_time(rf: Roofline, efficiency: float, d: float, p: float, k: float, *, separate: bool = False) -> float:
    co = step_coefficients(rf, efficiency, experts="separate" if separate else "tangent")
    extra = expert_weights_s(rf, d + p, efficiency) if separate else 0.0
    return co.t0 + co.a * d + co.b * p + co.c * k + extra


def test_ceiling_at_batch_is_the_decode_point() -> None:
    tok_s, binding = ceiling_at_batch(MOE, 256)
    point = decode_point(MOE, 256)
    assert (tok_s, binding) == (point.tok_s, point.binding)
    assert isinstance(ceiling_at_batch(MOE, 256), Ceiling)
    assert share_of_ceiling(MOE, 256, tok_s / 4) == pytest.approx(0.25)
    assert capped(MOE, 256, 10 * tok_s) == tok_s and capped(MOE, 256, 1.0) == 1.0
    with pytest.raises(ConfigError):
        ceiling_at_batch(MOE, 0)


def test_coefficients_scale_with_the_efficiency() -> None:
    full, half = step_coefficients(DENSE, 1.0), step_coefficients(DENSE, 0.5)
    overhead = DENSE.deployment.step_overhead_s
    assert half.t0 - overhead == pytest.approx(2 * (full.t0 - overhead))
    assert (half.a, half.b, half.c) == pytest.approx((2 * full.a, 2 * full.b, 2 * full.c))
    t0, a, b, c = full
    assert t0 > overhead and a > 0 and b > 0 and c > 0
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="efficiency"):
            step_coefficients(DENSE, bad)


def test_each_resource_has_its_own_efficiency() -> None:
    """Bytes over the memory factor, FLOPs over the compute factor, collectives over the link's."""
    full = step_coefficients(DENSE, 1.0)
    assert step_coefficients(DENSE, Efficiency.uniform(0.5)) == step_coefficients(DENSE, 0.5)
    memory = step_coefficients(DENSE, Efficiency(memory=0.5, compute=1.0, interconnect=1.0))
    compute = step_coefficients(DENSE, Efficiency(memory=1.0, compute=0.5, interconnect=1.0))
    link = step_coefficients(DENSE, Efficiency(memory=1.0, compute=1.0, interconnect=0.5))
    overhead = DENSE.deployment.step_overhead_s
    assert memory.t0 - overhead == pytest.approx(2 * (full.t0 - overhead))   # the weights are bytes
    assert (memory.a, memory.b) == (full.a, full.b) and full.c < memory.c < 2 * full.c   # KV: bytes and FLOPs
    assert compute.t0 == full.t0 and full.a < compute.a < 2 * full.a and full.c < compute.c < memory.c
    assert link.t0 == full.t0 and link.c == full.c and full.a < link.a < compute.a   # TP=2: an all-reduce per layer
    with pytest.raises(ConfigError, match="compute efficiency"):
        step_coefficients(DENSE, Efficiency(memory=1.0, compute=0.0, interconnect=1.0))


def test_the_default_efficiencies_are_measured_and_say_where() -> None:
    e = measured_efficiency()
    assert 0 < e.compute < e.memory <= 1 and e.interconnect == 0.5
    sources = efficiency_sources()
    assert "gpu_truth" in sources["memory"] and "gpu_truth" in sources["compute"]
    assert "not measured" in sources["interconnect"]


def test_dense_coefficients_by_hand() -> None:
    t0, a, _, c = step_coefficients(DENSE, 1.0)
    # per GPU: 32 blocks in FP8 and the BF16 head, halved by TP=2, over 3.35 TB/s
    assert t0 == pytest.approx(0.5e-3 + (32 * 218_103_808 * 1 + 525_336_576 * 2) / 2 / 3.35e12)
    # per KV token: 32 layers x 4 KV heads x 128 x K,V x 2 bytes, plus q.k and p.v over 16 of 32 heads
    assert c == pytest.approx(32 * 4 * 128 * 2 * 2 / 3.35e12 + 32 * 4 * 32 * 128 / 2 / 989.5e12)
    per_token = 2 * (32 * 218_103_808 + 525_336_576) / 2 / 1979e12 + 64 * 4096 * 2 / 450e9
    assert a == pytest.approx(per_token)


@settings(max_examples=60, deadline=None)
@given(rf=st.sampled_from([DENSE, MOE, MLA_DP]), efficiency=st.floats(0.05, 1.0),
       d=st.integers(0, 4096), p=st.integers(0, 16384), ctx=st.integers(1, 32768), separate=st.booleans())
def test_the_twin_is_never_faster_than_the_roofline(rf: Roofline, efficiency: float, d: int, p: int, ctx: int,
                                                    separate: bool) -> None:
    if d + p == 0:
        return
    bound = step_time_bound(rf, d, p, d * ctx)
    assert twin_time(rf, efficiency, d, p, d * ctx, separate=separate) >= bound * (1 - 1e-9)


def test_the_expert_tangent_touches_the_curve_at_the_reference_batch() -> None:
    tangent, separate = step_coefficients(MOE, 1.0), step_coefficients(MOE, 1.0, experts="separate")

    def folded(tokens: int) -> float:     # what the tangent adds for the routed experts
        return tangent.t0 - separate.t0 + (tangent.a - separate.a) * tokens

    assert folded(256) == pytest.approx(expert_weights_s(MOE, 256))
    for tokens in (1, 16, 64, 1024, 4096):
        assert folded(tokens) >= expert_weights_s(MOE, tokens)
    assert step_coefficients(DENSE, 1.0) == step_coefficients(DENSE, 1.0, experts="separate")


def test_calibrated_efficiency_reproduces_the_measured_level() -> None:
    kinds: tuple[tuple[bool, ExpertTerm], ...] = ((False, "tangent"), (True, "separate"))
    for separate, kind in kinds:
        e = calibrate_efficiency(MOE, 256, 3962.8, experts=kind)
        ctx = MOE.deployment.decode_context
        assert 256 / twin_time(MOE, e, 256, 0, 256 * ctx, separate=separate) == pytest.approx(3962.8)
    assert calibrate_efficiency(MOE, 256, 1e9) == 1.0     # faster than the twin allows: no speed-up


def test_a_saved_report_gives_the_roofline_back(tmp_path: Path) -> None:
    report = roofline_report(MOE, find_gpu("rtx-pro-6000"))
    (tmp_path / "r.json").write_bytes(msgspec.json.encode(report))
    (tmp_path / "bare.json").write_bytes(msgspec.json.encode(MOE))
    assert read_roofline(tmp_path / "r.json") == MOE == read_roofline(tmp_path / "bare.json")
    (tmp_path / "other.json").write_text('{"levels": []}')
    with pytest.raises(ConfigError, match="not a roofline"):
        read_roofline(tmp_path / "other.json")
