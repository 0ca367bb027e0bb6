"""A prediction says how far it reaches beyond what was calibrated, and carries the held-out band."""

from __future__ import annotations

from plateau_bench.answers import CalibratedModel, CrossValidation, EngineModel, LevelFit, Parameter
from plateau_bench.result import LevelResult, Plateau
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.predict import _extrapolation, _held_out_band, held_out_basis

from support.builders import level_result


def model(*, c_identified: bool = True, worst: float | None = -0.08,
          sweep_worst: float | None = None) -> CalibratedModel:
    fits = [LevelFit(run="r", label=f"C={b}", batch=float(b), measured_ms=10.0, fitted_ms=10.0, context=300.0,
                     held_out_ms=10.0) for b in (1, 8, 32)]
    params = [Parameter(name=n, value=1e-3, identified=n != "c" or c_identified) for n in ("t0", "a", "b", "c")]
    return CalibratedModel(
        engine=EngineModel(t0=1e-3, a=1e-4, b=1e-6, c=0.0, max_num_seqs=32, max_num_batched_tokens=8192,
                           kv_tokens=100_000),
        parameters=params, levels=fits, sources=["r"], cap_source="diagnosis", kv_source="server",
        policy_source="", input_len=200.0, output_len=200.0,
        cross_validation=CrossValidation(folds=3, median_abs_error=0.03, worst_error=worst,
                                         sweep_worst_error=sweep_worst))


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
    low, high = _held_out_band(model(worst=-0.08), plateau)
    assert low == 1000.0 / 1.08 and high == 1000.0 / 0.92
    assert _held_out_band(model(worst=None), plateau) == (None, None)


def test_a_whole_sweep_held_out_widens_the_band_where_it_erred_more_than_any_level() -> None:
    plateau = Plateau(throughput=1000.0, concurrency=64, reached=True)
    drifted = model(worst=-0.02, sweep_worst=0.09)   # two sweeps of one setting, the second 9 % slower
    assert _held_out_band(drifted, plateau) == (1000.0 / 1.09, 1000.0 / 0.91)
    assert held_out_basis(drifted) == "sweep"
    steady = model(worst=-0.08, sweep_worst=0.03)
    assert _held_out_band(steady, plateau) == (1000.0 / 1.08, 1000.0 / 0.92)
    assert held_out_basis(steady) == "level"


def level_at(concurrency: int, decoding: float) -> LevelResult:
    return level_result(concurrency, 100.0, decoding_concurrency=decoding)
