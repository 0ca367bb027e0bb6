"""Placing a plateau on the roofline: the batch each level decodes, its share of the ceiling there,
and a what-if never above what the hardware allows."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from plateau_bench.analysis.roofline_place import decode_batch, place_on_roofline
from plateau_bench.result import Latency, LevelResult, Plateau, ServerTelemetry, Verdict
from plateau_bench.roofline import Deployment, build_roofline, ceiling_at_batch, find_gpu, find_link, read_model_config

from support.builders import level_result

DATA = Path(__file__).parents[2] / "examples" / "models"
GPU = find_gpu("rtx-pro-6000")
RF = build_roofline(read_model_config(DATA / "gqa_moe_230b.json"), GPU,
                    Deployment(gpus=8, tp=8, ep=8, dtype="fp8", input_len=128, output_len=512), find_link(None, GPU))


def level(c: int, tok_s: float, *, decoding: float, running: float | None = None, tpot_ms: float = 64.0,
          prompt: int = 128, output: int = 512) -> LevelResult:
    rps = tok_s / output
    return level_result(c, tok_s, num_requests=100, completed=100, total_throughput=tok_s + rps * prompt,
                        request_throughput=rps, decoding_concurrency=decoding, tpot_ms=Latency(mean=tpot_ms),
                        telemetry=ServerTelemetry(running_mean=running))


def test_the_batch_comes_from_the_server_then_the_client_then_littles_law() -> None:
    assert decode_batch(level(256, 4000, decoding=250, running=256)) == (256, "server")
    assert decode_batch(level(256, 4000, decoding=250)) == (250, "client")
    little = msgspec.structs.replace(level(256, 4000, decoding=0), decoding_concurrency=0.0)
    assert decode_batch(little) == pytest.approx((4000 * 0.064, "little"))
    nothing = level_result(1)
    assert decode_batch(nothing) is None


def test_share_is_measured_over_the_ceiling_at_the_measured_batch_and_context() -> None:
    levels = [level(64, 2500, decoding=64), level(256, 3970, decoding=253), level(512, 3968, decoding=254)]
    verdict = Verdict("admission_cap", "admission cap at 256 running requests", "high")
    placed = place_on_roofline(levels, Plateau(3970, 256, True), verdict, RF).roofline
    assert placed is not None
    ceiling = ceiling_at_batch(RF, 253, 128 + 512 / 2).tok_s
    assert placed.batch == 253 and placed.batch_source == "client"
    assert placed.ceiling_tok_s == pytest.approx(ceiling)
    assert placed.share == pytest.approx(3970 / ceiling)
    assert 0.25 < placed.share < 0.32            # reference Run A: 0.28 of the ceiling at batch 256
    assert placed.binding == "weights"
    assert "29% of the roofline for this batch" in placed.text
    assert "well below what the hardware allows" in placed.text
    assert [lv.label for lv in placed.levels] == ["C=64", "C=256", "C=512"]
    assert placed.kv_sequences == RF.kv_capacity_tokens // (128 + 512)
    batches = [b for b, _ in placed.curve]
    assert batches[0] == pytest.approx(1.0) and batches[-1] >= 4 * 254 and batches == sorted(batches)


def test_a_longer_context_lowers_the_ceiling() -> None:
    short = place_on_roofline([level(256, 3970, decoding=253, prompt=128, output=128)], None,
                              Verdict("compute", "x", "medium"), RF).roofline
    long = place_on_roofline([level(256, 3970, decoding=253, prompt=8192, output=512)], None,
                             Verdict("compute", "x", "medium"), RF).roofline
    assert short is not None and long is not None
    assert long.context_tokens == pytest.approx(8192 + 256) and short.context_tokens == pytest.approx(128 + 64)
    assert long.ceiling_tok_s < short.ceiling_tok_s


def test_a_what_if_above_the_ceiling_is_lowered_to_it() -> None:
    ceiling = ceiling_at_batch(RF, 512, 128 + 256).tok_s
    verdict = Verdict("admission_cap", "cap", "high", what_if=["raising the cap to 512 would give ..."],
                      predicted_throughput_doubled_cap=2 * ceiling, what_if_batch=512)
    placed = place_on_roofline([level(256, 3970, decoding=253)], None, verdict, RF)
    assert placed.predicted_throughput_doubled_cap == pytest.approx(ceiling)
    assert placed.roofline is not None and placed.roofline.what_if_capped
    assert placed.roofline.what_if_ceiling_tok_s == pytest.approx(ceiling)
    assert "the roofline caps this" in placed.what_if[-1]


def test_a_what_if_under_the_ceiling_is_kept_and_compared() -> None:
    verdict = Verdict("admission_cap", "cap", "high", predicted_throughput_doubled_cap=4450.0, what_if_batch=512)
    placed = place_on_roofline([level(256, 3970, decoding=253)], None, verdict, RF)
    assert placed.predicted_throughput_doubled_cap == 4450.0
    assert placed.roofline is not None and not placed.roofline.what_if_capped
    assert "the roofline allows up to" in placed.what_if[-1]


def test_not_saturated_reads_as_headroom_and_no_batch_leaves_the_verdict_alone() -> None:
    verdict = Verdict("not_saturated", "still grows", "high")
    placed = place_on_roofline([level(128, 3266, decoding=126)], None, verdict, RF).roofline
    assert placed is not None and "headroom the load has not reached yet" in placed.text
    failed = msgspec.structs.replace(level(128, 3266, decoding=126), level_failed=True)
    assert place_on_roofline([failed], None, verdict, RF) is verdict


def test_a_measurement_above_the_ceiling_says_the_roofline_is_wrong_and_caps_nothing() -> None:
    ceiling = ceiling_at_batch(RF, 253, 128 + 256).tok_s
    verdict = Verdict("admission_cap", "cap", "high", predicted_throughput_doubled_cap=3 * ceiling, what_if_batch=512)
    placed = place_on_roofline([level(256, 2 * ceiling, decoding=253)], None, verdict, RF)
    assert placed.roofline is not None and placed.roofline.share == pytest.approx(2.0)
    assert "ABOVE the roofline" in placed.roofline.text and "does not describe this deployment" in placed.roofline.text
    assert placed.predicted_throughput_doubled_cap == 3 * ceiling and not placed.roofline.what_if_capped
