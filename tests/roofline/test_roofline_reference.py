"""The reference runs (reference/seed-runs.md) never beat the roofline of the hardware they name.

Both ran on 8x 96 GB PCIe GPUs with a 600 W limit and FP4 support: the RTX PRO 6000 Blackwell
(catalogue ``rtx-pro-6000``, PCIe 5.0 between GPUs). Run A's model, a 230B FP8 MoE with GQA and
256 experts, has MiniMax-M2's published shape (``examples/models/gqa_moe_230b.json``: 62 layers, 8 KV heads of
128, 8 of 256 experts per token); Run B's FP4 MoE with 256 experts and 8 per token is not named, so
both candidate shapes are checked: DeepSeek-V3's (MLA, one shared expert) and the 230B one.

Measured / ceiling at the decoding batch each row ran (the admission cap above it), 128 input tokens:

    Run A, TP=8+EP, FP8, 512 out:  C=1 71 tok/s: 0.090;  C=256..1,024 (batch 256) 3,963-3,997: 0.28
    Run A, TP=4, FP8, 512 out:     C=1 84 tok/s: 0.17;   C=256 2,586: 0.36
    Run B, TP=8, FP4, 128 out, DeepSeek-V3 shape: C=1 10.22: 0.021; 256: 0.079; 512: 0.066;
                                   1,024: 0.077; 2,048 (batch 1,024) 1,640: 0.079; tuned 2,095: 0.10
    Run B, the 230B shape:         C=1: 0.010; 1,024: 0.034; tuned 2,095: 0.045

``test_ratios_as_stated`` holds these figures (to the precision shown) so the table stays true.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.roofline import (
    Deployment,
    ModelShape,
    Roofline,
    build_roofline,
    find_gpu,
    find_link,
    read_model_config,
    share_of_ceiling,
)
from plateau_bench.roofline.model import Dtype

from support.seed_runs import RUN_A, RUN_A_C1, RUN_A_C256, RUN_B, RUN_B_C1

DATA = Path(__file__).parents[2] / "examples" / "models"   # model configs shipped as examples
MOE_230B = read_model_config(DATA / "gqa_moe_230b.json")
DEEPSEEK = read_model_config(DATA / "mla_deepseek_v3.json")
GPU = find_gpu("rtx-pro-6000")
RUN_A_CAP, RUN_B_CAP = 256, 1024
RUN_B_TUNED = 2095.0      # output tok/s after raising --max-running-requests (batch >= 1,024)


def deployment(model: ModelShape, *, gpus: int, tp: int, ep: int, dtype: Dtype, output_len: int) -> Roofline:
    layout = Deployment(gpus=gpus, tp=tp, ep=ep, dtype=dtype, input_len=128, output_len=output_len)
    return build_roofline(model, GPU, layout, find_link(None, GPU))


RUN_A_TP8EP = deployment(MOE_230B, gpus=8, tp=8, ep=8, dtype="fp8", output_len=512)
RUN_A_TP4 = deployment(MOE_230B, gpus=4, tp=4, ep=1, dtype="fp8", output_len=512)
RUN_B_SHAPES = {"deepseek-v3": deployment(DEEPSEEK, gpus=8, tp=8, ep=1, dtype="fp4", output_len=128),
                "230b": deployment(MOE_230B, gpus=8, tp=8, ep=1, dtype="fp4", output_len=128)}


def measured() -> list[tuple[str, Roofline, int, float]]:
    rows = [("A tp8ep C=1", RUN_A_TP8EP, 1, RUN_A_C1["seed-a-tp8ep"]),
            ("A tp8ep C=256 earlier", RUN_A_TP8EP, 256, RUN_A_C256["seed-a-tp8ep"]),
            ("A tp4 C=1", RUN_A_TP4, 1, RUN_A_C1["seed-a-tp4"]),
            ("A tp4 C=256", RUN_A_TP4, 256, RUN_A_C256["seed-a-tp4"])]
    rows += [(f"A tp8ep C={c}", RUN_A_TP8EP, min(c, RUN_A_CAP), row.tok_s) for c, row in RUN_A.items()]
    for shape, rf in RUN_B_SHAPES.items():
        rows.append((f"B {shape} C=1", rf, 1, RUN_B_C1))
        rows += [(f"B {shape} C={c}", rf, min(c, RUN_B_CAP), tok_s) for c, tok_s in RUN_B.items()]
        rows.append((f"B {shape} tuned", rf, RUN_B_CAP, RUN_B_TUNED))
    return rows


@pytest.mark.parametrize(("name", "rf", "batch", "tok_s"), measured(), ids=[r[0] for r in measured()])
def test_no_measured_figure_beats_the_roofline(name: str, rf: Roofline, batch: int, tok_s: float) -> None:
    ratio = share_of_ceiling(rf, batch, tok_s)
    assert 0 < ratio < 1, f"{name}: {tok_s:,.1f} tok/s is {ratio:.1%} of the ceiling at batch {batch}"


@pytest.mark.parametrize(("rf", "batch", "tok_s", "stated"), [
    (RUN_A_TP8EP, 1, 71.0, 0.090), (RUN_A_TP8EP, 256, 3962.8, 0.28), (RUN_A_TP8EP, 256, 3997.0, 0.28),
    (RUN_A_TP4, 1, 84.0, 0.17), (RUN_A_TP4, 256, 2586.0, 0.36),
    (RUN_B_SHAPES["deepseek-v3"], 1, 10.22, 0.021), (RUN_B_SHAPES["deepseek-v3"], 256, 704.64, 0.079),
    (RUN_B_SHAPES["deepseek-v3"], 512, 1105.82, 0.066), (RUN_B_SHAPES["deepseek-v3"], 1024, 1601.28, 0.077),
    (RUN_B_SHAPES["deepseek-v3"], 1024, 1639.69, 0.079), (RUN_B_SHAPES["deepseek-v3"], 1024, 2095.0, 0.10),
    (RUN_B_SHAPES["230b"], 1, 10.22, 0.01), (RUN_B_SHAPES["230b"], 1024, 1601.28, 0.034),
    (RUN_B_SHAPES["230b"], 1024, 2095.0, 0.045),
])
def test_ratios_as_stated(rf: Roofline, batch: int, tok_s: float, stated: float) -> None:
    digits = len(f"{stated:g}".split(".")[1])
    assert round(share_of_ceiling(rf, batch, tok_s), digits) == stated


def test_what_binds_at_the_reference_plateaus() -> None:
    from plateau_bench.roofline import ceiling_at_batch

    assert ceiling_at_batch(RUN_A_TP8EP, 256).binding == "weights"          # every expert read each step
    assert ceiling_at_batch(RUN_B_SHAPES["deepseek-v3"], 1024).binding == "interconnect"   # PCIe all-reduce
