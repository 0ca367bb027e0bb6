"""A prediction says how far it reaches beyond what was calibrated, and carries the held-out band."""

from __future__ import annotations

import msgspec
import pytest

from plateau_bench.answers import CalibratedModel, CrossValidation, EngineModel, LevelFit, Parameter, Prediction
from plateau_bench.result import LevelResult, Plateau
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.predict import (
    _cap_reach,
    _extrapolation,
    _held_out_band,
    _wider_band,
    held_out_basis,
    model_line,
)

from support.builders import level_result


def model(*, c_identified: bool = True, worst: float | None = -0.08, sweep_worst: float | None = None,
          fold: tuple[float, float, float] | None = None) -> CalibratedModel:
    """``fold``: the extrapolation fold's widest fitted batch, ratio and error."""
    fits = [LevelFit(run="r", label=f"C={b}", batch=float(b), measured_ms=10.0, fitted_ms=10.0, context=300.0,
                     held_out_ms=10.0) for b in (1, 8, 32)]
    params = [Parameter(name=n, value=1e-3, identified=n != "c" or c_identified) for n in ("t0", "a", "b", "c")]
    return CalibratedModel(
        engine=EngineModel(t0=1e-3, a=1e-4, b=1e-6, c=0.0, max_num_seqs=32, max_num_batched_tokens=8192,
                           kv_tokens=100_000),
        parameters=params, levels=fits, sources=["r"], cap_source="diagnosis", kv_source="server",
        policy_source="", input_len=200.0, output_len=200.0,
        cross_validation=CrossValidation(folds=3, median_abs_error=0.03, worst_error=worst,
                                         sweep_worst_error=sweep_worst, extrapolation_folds=1 if fold else 0,
                                         extrapolation_from_batch=fold[0] if fold else None,
                                         extrapolation_ratio=fold[1] if fold else None,
                                         extrapolation_error=fold[2] if fold else None))


def test_a_larger_batch_and_a_longer_context_are_named_with_how_far() -> None:
    levels = [level_at(c, decoding) for c, decoding in ((32, 31.0), (128, 120.0))]
    notes = _extrapolation(model(c_identified=False), levels, WorkloadSpec(input_len=4000, output_len=200))
    assert notes[0].startswith("extrapolates: decoding batches up to ~120, 3.8x the largest calibrated (32)")
    assert notes[1].startswith("extrapolates: a context of ~4,100 tokens against 300-300 calibrated")
    assert notes[1].endswith("and c was not identified (folded into a)")


def test_within_the_measured_range_nothing_is_said() -> None:
    levels = [level_at(16, 16.0), level_at(32, 32.0)]
    assert _extrapolation(model(), levels, WorkloadSpec(input_len=200, output_len=200)) == []


def test_the_held_out_band_moves_the_plateau_as_the_worst_held_out_step() -> None:
    plateau = Plateau(throughput=1000.0, concurrency=64, reached=True)
    within = [level_at(64, 30.0)]
    low, high, beyond = _held_out_band(model(worst=-0.08), plateau, within)
    assert low == 1000.0 / 1.08 and high == 1000.0 / 0.92 and beyond == 0.0
    assert _held_out_band(model(worst=None), plateau, within) == (None, None, 0.0)


def test_a_whole_sweep_held_out_widens_the_band_where_it_erred_more_than_any_level() -> None:
    plateau = Plateau(throughput=1000.0, concurrency=64, reached=True)
    within = [level_at(64, 30.0)]
    drifted = model(worst=-0.02, sweep_worst=0.09)   # two sweeps of one setting, the second 9 % slower
    assert _held_out_band(drifted, plateau, within) == (1000.0 / 1.09, 1000.0 / 0.91, 0.0)
    assert held_out_basis(drifted) == "sweep"
    steady = model(worst=-0.08, sweep_worst=0.03)
    assert _held_out_band(steady, plateau, within) == (1000.0 / 1.08, 1000.0 / 0.92, 0.0)
    assert held_out_basis(steady) == "level"


def test_a_plateau_batch_past_the_calibrated_ones_widens_the_band_by_the_folds_rate_per_doubling() -> None:
    # fitted to batches up to 16, the calibration erred +10 % at 32 (one doubling); a plateau decoding 128
    # (4x the widest calibrated, 32) reaches two doublings past it: 20 % more on the 8 % held out
    folded = model(worst=-0.08, fold=(16.0, 2.0, 0.10))
    plateau = Plateau(throughput=1000.0, concurrency=128, reached=True, levels=(128, 256))
    levels = [level_at(64, 30.0), level_at(128, 128.0), level_at(256, 120.0)]
    low, high, beyond = _held_out_band(folded, plateau, levels)
    assert beyond == pytest.approx(0.20)
    assert (low, high) == (pytest.approx(1000.0 / 1.28), pytest.approx(1000.0 / 0.72))
    # the fold widens nothing where the plateau stays within the calibrated batches
    assert _held_out_band(folded, Plateau(throughput=1000.0, concurrency=64, reached=True), levels)[2] == 0.0


def test_a_band_widened_past_the_whole_step_has_no_upper_edge() -> None:
    folded = model(worst=-0.3, fold=(4.0, 2.0, 0.40))       # 40 % per doubling, and 8x past the calibration
    plateau = Plateau(throughput=1000.0, concurrency=256, reached=True)
    low, high, beyond = _held_out_band(folded, plateau, [level_at(256, 256.0)])
    assert beyond == pytest.approx(1.2) and high is None and low == pytest.approx(1000.0 / 2.5)


def test_the_fold_rate_is_the_error_over_its_doublings() -> None:
    cv = CrossValidation(extrapolation_folds=2, extrapolation_from_batch=4.0, extrapolation_ratio=4.0,
                         extrapolation_error=-0.12)
    assert cv.per_doubling() == pytest.approx(0.06)
    assert cv.beyond(8.0) == pytest.approx(0.18) and cv.beyond(1.0) == 0.0 and cv.beyond(0.5) == 0.0
    assert CrossValidation().per_doubling() is None and CrossValidation().beyond(8.0) == 0.0


def test_the_model_line_gives_the_folds_rate_where_there_is_one() -> None:
    assert model_line(model(fold=(16.0, 2.0, -0.1))).endswith("; past the calibrated batches, 10.0% more per doubling")
    assert "per doubling" not in model_line(model())


def test_the_what_if_takes_the_wider_of_the_two_bands_edge_by_edge() -> None:
    def done(low: float | None, high: float | None, held_low: float | None, held_high: float | None) -> Prediction:
        return Prediction(engine=model().engine, levels=[], plateau=None, knee=None, plateau_low=low,
                          plateau_high=high, held_out_low=held_low, held_out_high=held_high)

    assert _wider_band(done(950.0, 1050.0, 900.0, 1100.0)) == (900.0, 1100.0)
    assert _wider_band(done(850.0, 1050.0, 900.0, 1020.0)) == (850.0, 1050.0)
    assert _wider_band(done(950.0, 1050.0, None, None)) == (950.0, 1050.0)
    assert _wider_band(done(None, None, 900.0, 1100.0)) == (900.0, 1100.0)
    assert _wider_band(done(950.0, 1050.0, 400.0, None)) == (400.0, None)   # the held-out error passed 100 %
    assert _wider_band(done(None, None, None, None)) == (None, None)


def level_at(concurrency: int, decoding: float) -> LevelResult:
    return level_result(concurrency, 100.0, decoding_concurrency=decoding)


def test_a_llamacpp_cap_beyond_the_calibrated_ones_says_its_band_does_not_cover_the_slot_streams() -> None:
    # Calibrated on llama.cpp at --parallel 2 and 4, asked about 8: the per-slot cost is linear in the twin,
    # and llama.cpp's per-slot KV streams are not; vLLM's prediction carries no such warning.
    fits = [LevelFit(run="r", label=f"C={c}", batch=float(c), measured_ms=10.0, fitted_ms=10.0, slots=c)
            for c in (2, 4)]
    llamacpp = msgspec.structs.replace(model(), levels=fits, engines=["llamacpp"])
    [note] = _cap_reach(llamacpp, 8)
    assert note.startswith("extrapolates: a cap of 8 against 2-4 calibrated")
    assert "llama.cpp keeps a KV stream per slot" in note and "more than the band allows" in note
    [plain] = _cap_reach(msgspec.structs.replace(llamacpp, engines=["vllm"]), 8)
    assert "KV stream" not in plain
    assert _cap_reach(llamacpp, 4) == []
