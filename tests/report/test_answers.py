"""The twin's answers in the terminal (``report.answers``, ``report.roofline``), rendered to a fixed-width
console: each view says what its typed result holds, including the cases without an answer."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console, RenderableType

from plateau_bench.answers import (
    CalibratedModel,
    CapacityPlan,
    CrossValidation,
    EngineModel,
    LevelFit,
    Parameter,
    PredictedLevel,
    Prediction,
    ReplicaTrial,
    TuneParam,
    TuneResult,
    TuneTrial,
)
from plateau_bench.report.answers import model_view, plan_view, prediction_view, tune_view
from plateau_bench.report.roofline import roofline_view
from plateau_bench.result import Knee, Plateau
from plateau_bench.roofline import Deployment, build_roofline, find_gpu, find_link, read_model_config, roofline_report
from plateau_bench.spec import WorkloadSpec

ENGINE = EngineModel(t0=2e-3, a=1e-4, b=2e-6, c=0.0, max_num_seqs=32, max_num_batched_tokens=8192, kv_tokens=8186)
WORK = WorkloadSpec(input_len=129, output_len=127)
MODELS = Path(__file__).parents[2] / "examples" / "models"


def text(view: RenderableType) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(view)
    return console.export_text()


def flat(view: RenderableType) -> str:
    """The view's words on one line: a sentence as the console wrapped it, unwrapped."""
    return " ".join(text(view).split())


def rows(view: RenderableType, first: str) -> list[list[str]]:
    """The table rows whose first cell is ``first``, split into cells."""
    out = []
    for line in text(view).splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells and cells[0] == first:
            out.append(cells)
    return out


def test_the_model_shows_each_coefficient_in_its_unit_and_every_fit() -> None:
    model = CalibratedModel(engine=ENGINE, parameters=[
        Parameter(name="t0", value=2e-3, stderr=1.2e-7), Parameter(name="a", value=1e-4),
        Parameter(name="b", value=2e-6, stderr=1e-9), Parameter(name="c", value=0.0, identified=False,
                                                                  note="not identified"),
        Parameter(name="s", value=1.5e-3, stderr=1e-5, term="per allocated slot", unit="s per slot, per step")],
        levels=[LevelFit(run="tiny", label="C=8", batch=7.9, measured_ms=2.79, fitted_ms=2.8, slots=32, weight=0.25),
                LevelFit(run="tiny", label="C=16", batch=15.8, measured_ms=3.5, fitted_ms=3.5, held_out_ms=3.57)],
        sources=["runs/[a]"], cap_source="diagnosis", kv_source="client lower bound", policy_source="engine",
        input_len=129.0, output_len=127.0, notes=["[bold]kept[/bold] as written"])
    out = text(model_view(model))
    assert out.startswith("Calibrated from runs/[a]\n")          # a path is not markup
    # Each term named, in its unit, and how it was obtained (a model saved without the names gets them by name).
    assert rows(model_view(model), "t0")[0][1:6] == ["fixed cost per step", "2", "0.00012", "ms per step", "fitted"]
    assert rows(model_view(model), "a")[0][3] == "-"              # no standard error
    assert rows(model_view(model), "c")[0][5:] == ["fixed", "not identified"]
    assert rows(model_view(model), "s")[0][1:6] == ["per allocated slot", "1.5", "0.01", "ms per slot, per step",
                                                    "fitted"]
    assert "cap 32 running requests (diagnosis); KV cache 8,186 tokens (client lower bound)" in out
    # The held-out column: what the fit without the level predicts it to be ("-": that fit could not be made).
    # The cap column: the slots the level's steps paid for; the weight: the robust fit's.
    assert rows(model_view(model), "tiny") == [
        ["tiny", "C=8", "32", "7.9", "TPOT", "2.79", "2.80", "+0.4%", "0.25", "-"],
        ["tiny", "C=16", "-", "15.8", "TPOT", "3.50", "3.50", "+0.0%", "1.00", "+2.0%"]]
    assert "Cross-validated: no level can be left out" in out   # the model states no cross-validation
    assert "  note: [bold]kept[/bold] as written" in out


def _level(c: int, tok_s: float, meets: bool | None = None) -> PredictedLevel:
    return PredictedLevel(concurrency=c, output_throughput=tok_s, decoding=min(c, 32), ttft_p50_ms=4.0,
                          ttft_p99_ms=12_000.0, tpot_p50_ms=3.0, tpot_p99_ms=None, e2e_p99_ms=354.0, meets_slo=meets)


def test_a_prediction_with_an_slo_has_its_column_band_and_capacity() -> None:
    done = Prediction(engine=ENGINE, levels=[_level(8, 2872.0, True), _level(64, 6155.0, False)],
                      plateau=Plateau(concurrency=32, throughput=6158.0, reached=True),
                      knee=Knee(concurrency=28.4, throughput=5542.0, bracket=(16, 32), reached=True),
                      plateau_low=6100.0, plateau_high=6200.0, slo_max_concurrency=8, slo_throughput=2872.0,
                      notes=["the KV cache is a lower bound"], model="the twin calibrated on runs/a: t = 2 ms")
    out = text(prediction_view(done, WORK))
    assert "Predicted (cap 32, KV 8,186 tokens, budget 8,192; 129 in / 127 out)" in out
    assert rows(prediction_view(done, WORK), "8")[0] == ["8", "2,872", "8", "4 ms", "12.00 s", "3 ms", "-", "354 ms",
                                                         "meets"]
    assert rows(prediction_view(done, WORK), "64")[0][-1] == "violates"
    assert "Predicted plateau ~6,158 tok/s from C=32 (band 6,100 to 6,200 tok/s" in out
    assert "Predicted knee C~28" in out and "  note: the KV cache is a lower bound" in out
    assert "Within the SLO: C=8 (2,872 tok/s)" in out and "Model: the twin calibrated on runs/a: t = 2 ms" in out


def test_a_prediction_without_an_slo_or_band_says_why() -> None:
    done = Prediction(engine=ENGINE, levels=[_level(8, 2872.0)],
                      plateau=Plateau(concurrency=8, throughput=2872.0, reached=False), knee=None,
                      plateau_low=None, plateau_high=None, band_note="no band: no residual freedom")
    out = text(prediction_view(done, WORK))
    assert "SLO" not in out and "knee" not in out
    assert len(rows(prediction_view(done, WORK), "8")[0]) == 8
    assert "Predicted plateau ~2,872 tok/s from C=8 (no band: no residual freedom)" in out


def test_a_band_widened_for_a_batch_past_the_calibrated_ones_says_by_how_much_and_may_have_no_top() -> None:
    base = dict(engine=ENGINE, levels=[_level(64, 6155.0)], plateau=Plateau(concurrency=64, throughput=6000.0,
                                                                           reached=True), knee=None,
                plateau_low=None, plateau_high=None)
    widened = Prediction(**base, held_out_low=4800.0, held_out_high=8000.0, held_out_beyond=0.18)
    assert ("with every step as far off as the worst level held out of the calibration, plus 18.0% for a decoding "
            "batch past the calibrated ones (the extrapolation fold's error per doubling, times the doublings): "
            "4,800 to 8,000 tok/s") in flat(prediction_view(widened, WORK))
    topless = Prediction(**base, held_out_low=2900.0, held_out_high=None, held_out_beyond=0.95)
    assert "2,900 to no upper bound" in text(prediction_view(topless, WORK))
    within = Prediction(**base, held_out_low=5500.0, held_out_high=6600.0, held_out_beyond=0.0001)
    assert "calibration: 5,500 to 6,600 tok/s" in text(prediction_view(within, WORK))   # 0.0 %: not said


def test_a_model_with_an_extrapolation_fold_prints_it() -> None:
    model = CalibratedModel(engine=ENGINE, parameters=[Parameter(name="t0", value=2e-3)],
                            levels=[], sources=["runs/a"], cap_source="diagnosis", kv_source="server",
                            policy_source="engine", input_len=129.0, output_len=127.0,
                            cross_validation=CrossValidation(folds=4, median_abs_error=0.02, worst_error=-0.04,
                                                             extrapolation_folds=3, extrapolation_from_batch=2.0,
                                                             extrapolation_ratio=2.0, extrapolation_error=0.12))
    assert ("Extrapolated: fitted to decoding batches up to 2.0, the 3 wider level(s) predicted, worst +12.0% at 2.0x "
            "that batch (12.0% per doubling") in flat(model_view(model))


def _trial(n: int, meets: bool, keeps_up: bool = True) -> ReplicaTrial:
    return ReplicaTrial(replicas=n, balancer="round_robin", meets=meets, keeps_up=keeps_up, request_rate=47.97,
                        output_throughput=6092.0, ttft_p99_ms=6023.0, tpot_p99_ms=5.0, e2e_p99_ms=None,
                        goodput_rps=None)


def test_a_plan_shows_each_trial_and_the_replicas_with_their_cost() -> None:
    plan = CapacityPlan(rate=60.0, slos=["ttft_p99<=1s"], balancer="least_outstanding", replicas=2, gpus=4,
                        cost_per_hour=8.0, cost_per_million_tokens=0.146,
                        trials=[_trial(1, False, keeps_up=False), _trial(2, True)])
    out = text(plan_view(plan, WORK))
    assert "60 req/s of 129 in / 127 out, least outstanding: ttft_p99<=1s" in out
    assert rows(plan_view(plan, WORK), "1")[0] == ["1", "47.97", "6,092", "6,023 ms", "5 ms", "-", "-",
                                                   "falls behind"]
    assert rows(plan_view(plan, WORK), "2")[0][-1] == "meets"
    assert "Needs 2 replica(s) = 4 GPU(s); 8.00 per hour, 0.146 per million output tokens" in out
    banded = CapacityPlan(**{**{f: getattr(plan, f) for f in plan.__struct_fields__}, "replicas_low": 2,
                             "replicas_high": 3, "model": "the twin calibrated on runs/a"})
    out = text(plan_view(banded, WORK))
    assert ("0.146 per million output tokens; 2 to 3 with every step as far off as the worst level held out of "
            "the calibration") in out and "Model: the twin calibrated on runs/a" in out
    wide = CapacityPlan(**{**{f: getattr(banded, f) for f in banded.__struct_fields__}, "held_out_beyond": 0.25})
    assert ("2 to 3 with every step as far off as the worst level held out of the calibration, plus 25.0% for a batch "
            "past the calibrated ones") in flat(plan_view(wide, WORK))


def test_a_plan_no_replica_count_meets() -> None:
    plan = CapacityPlan(rate=60.0, slos=["ttft_p99<=1s"], balancer="round_robin", replicas=None, gpus=None,
                        cost_per_hour=None, cost_per_million_tokens=None, trials=[_trial(1, False), _trial(4, False)])
    out = text(plan_view(plan, WORK))
    assert rows(plan_view(plan, WORK), "4")[0][-1] == "violates"
    assert "No replica count up to 4 meets the SLO at this rate." in out and "Needs" not in out


def test_a_tune_puts_predicted_against_measured_and_recommends() -> None:
    done = TuneResult(serve="x", params=[TuneParam("max_num_seqs", [8, 32])], objective="throughput",
                      slos=["ttft_p99<=2s"], trials=[
                          TuneTrial(setting={"max_num_seqs": 8}, why="start", predicted_tok_s=1000.0,
                                    measured_tok_s=1100.0, predicted_from=[{"max_num_seqs": 8}]),
                          TuneTrial(setting={"max_num_seqs": 32}, why="candidate", predicted_tok_s=3000.0,
                                    predicted_high=3750.0)],
                      recommendation={"max_num_seqs": 8}, recommended_tok_s=1100.0, restarts=2,
                      brute_force_restarts=2, predicted=True, calibration_notes=["fitted on 1 sweep"])
    out = text(tune_view(done, 2))
    assert "plateau tune: throughput (ttft_p99<=2s)" in out
    assert rows(tune_view(done, 2), "max_num_seqs=8")[0] == ["max_num_seqs=8", "start", "8", "1,000", "1,100", "-9.1%"]
    assert rows(tune_view(done, 2), "max_num_seqs=32")[0][-3:] == ["3,000 (up to 3,750)", "-", "-"]
    assert "  note: fitted on 1 sweep" in out
    assert "Recommended: max_num_seqs=8 (1,100 tok/s measured); 2 server start(s) against 2 for the grid" in out


def test_a_tune_with_nothing_measured_says_so() -> None:
    done = TuneResult(serve="x", params=[], objective="throughput", slos=[], trials=[], recommendation=None,
                      recommended_tok_s=None, restarts=1, brute_force_restarts=3, predicted=False)
    out = text(tune_view(done, 3))
    assert "No setting was measured successfully." in out and "Recommended" not in out


def test_the_roofline_names_the_model_the_binding_resource_and_the_sources() -> None:
    shape = read_model_config(MODELS / "gqa_moe_230b.json")
    gpu = find_gpu("rtx-pro-6000")
    rf = build_roofline(shape, gpu, Deployment(gpus=8, tp=8, ep=8, dtype="fp8", output_len=512),
                        find_link(None, gpu))
    view = roofline_view(roofline_report(rf, gpu, [1, 256], [512]))
    out = text(view)
    assert out.splitlines()[0].startswith(f"{shape.name} on 8x ")
    assert "Decode: ceiling per step" in out and "Prefill: ceiling per step of prompt tokens" in out
    assert rows(view, "256")[0][8] == "memory: weights"
    assert "Sources:" in out
