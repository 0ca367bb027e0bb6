"""The extrapolation fold: fitted to the narrower half of the decoding batches, the calibration predicts the
wider levels, and how far off it went per doubling of the batch is what a prediction reaching further adds."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.calibration import _extrapolation_fold
from plateau_bench.analysis.calibration_fit import Row

T0, A, CONTEXT = 5e-3, 1e-3, 300.0


def rows(batches: tuple[float, ...], slower_at: dict[float, float] | None = None) -> list[Row]:
    """One TPOT row per batch of a linear step (one context: the KV cost folds into the per-sequence one); a
    batch in ``slower_at`` measured that factor slower than the line."""
    slower_at = slower_at or {}
    return [Row("r", f"C={b:g}", b, (1.0, b, 0.0, b * CONTEXT, 0.0), (T0 + A * b) * slower_at.get(b, 1.0), "tpot",
                CONTEXT) for b in batches]


def test_a_step_that_stays_linear_extrapolates_without_error() -> None:
    fold = _extrapolation_fold(rows((1, 2, 4, 8, 16, 32)))
    assert fold is not None
    folds, reach, ratio, error = fold
    assert (folds, reach, ratio) == (1, 16.0, 2.0)     # fitted to 1-16, the 32 predicted
    assert error == pytest.approx(0.0, abs=1e-9)


def test_the_level_erring_most_per_doubling_is_the_folds() -> None:
    # fitted to 1-4: 6 is 1.5x that and measured 10 % slower than the line (-9.1 %, 15.5 % per doubling); 8 is
    # 2x and 20 % slower (-16.7 %, one doubling: 16.7 % per doubling), the one kept
    fold = _extrapolation_fold(rows((1, 2, 3, 4, 6, 8), slower_at={6: 1.1, 8: 1.2}))
    assert fold is not None
    folds, reach, ratio, error = fold
    assert (folds, reach, ratio) == (2, 4.0, 2.0)
    assert error == pytest.approx(1 / 1.2 - 1)


def test_no_fold_when_the_narrower_half_holds_one_decoding_batch() -> None:
    assert _extrapolation_fold(rows((1, 4, 4, 4))) is None
