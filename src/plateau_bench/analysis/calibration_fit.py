"""The calibration's regression: the step's coefficients from one row per measured level.

A row says ``y = t0*1 + a*x1 + b*x2 + c*x3 + s*x4`` (``analysis.calibration`` builds them: the decoding
batch, the prompt tokens a step carries, the KV tokens it reads and the slots the server allocates).
Every row is fitted on its relative error, so a level of 5 ms counts as much as one of 50 ms.

The fit is robust: iteratively reweighted least squares with Huber weights on the relative residuals.
Each pass scales the residuals by their median absolute deviation (1.4826 times it: the standard
deviation, for normal errors; never below ``SCALE_FLOOR``, so a near-perfect fit down-weights nothing),
keeps full weight for rows within ``HUBER_K`` scales and gives the rest ``HUBER_K * scale / |residual|``,
then refits; a few passes settle it. One noisy level (a window that caught a hiccup, a client that
lagged) then pulls the fit by a fraction of what plain least squares would let it, and the levels whose
weight ended below ``DOWN_WEIGHTED`` are named in the calibration's notes.

What the rows cannot identify is fixed, with the reason: ``c`` with one context length (the KV read
moves with the batch), ``b`` with no prompt tokens seen, ``s`` with one admission cap (every row has
the same slots, a constant the fixed cost absorbs) or a sweep whose cap is unknown. A coefficient the
fit makes negative is fixed at 0 (``t0`` at ``T0_FLOOR_S``) and the rest refitted.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np

from plateau_bench.errors import ResultsError

NAMES = ("t0", "a", "b", "c", "s")
MIN_BATCH_SPREAD = 1.5     # largest over smallest decoding batch needed to tell t0 from a
MIN_CONTEXT_SPREAD = 1.2   # largest over smallest context needed to tell c from a
T0_FLOOR_S = 1e-6          # the twin needs a fixed cost > 0; a fit at or below 0 is taken as this
HUBER_K = 1.345            # Huber's constant: 95 % efficiency when the errors are normal
SCALE_FLOOR = 0.01         # the residuals' scale is never taken below 1 %: a twin fitting itself is not noisy
IRLS_PASSES = 8            # reweighting passes at most (they settle in two or three)
DOWN_WEIGHTED = 0.5        # a level whose robust weight ends below this is named in the notes


class Row(msgspec.Struct, frozen=True):
    run: str
    label: str
    batch: float
    x: tuple[float, float, float, float, float]   # 1, batch, prefill tokens, KV tokens read, slots
    y: float
    metric: str
    context: float


class StepFit(NamedTuple):
    coef: np.ndarray                # t0, a, b, c, s in seconds (the fixed ones 0, or t0's floor)
    errors: np.ndarray | None       # their standard errors (None: no residual degrees of freedom)
    fixed: dict[str, str]           # name -> why it is fixed
    weights: np.ndarray             # every row's robust weight, 0..1


def relative_residuals(rows: list[Row], coef: np.ndarray) -> np.ndarray:
    return np.array([float(np.dot(coef, r.x)) / r.y - 1.0 for r in rows])


def huber_weights(residuals: np.ndarray) -> np.ndarray:
    """Huber's weights for relative residuals, scaled by their median absolute deviation."""
    if len(residuals) == 0:
        return np.ones(0)
    mad = float(np.median(np.abs(residuals - np.median(residuals))))
    bound = HUBER_K * max(1.4826 * mad, SCALE_FLOOR)
    size = np.abs(residuals)
    return np.where(size <= bound, 1.0, bound / np.maximum(size, 1e-300))


def _weighted(rows: list[Row], free: list[int], weight: np.ndarray, t0: float | None) -> tuple[
        np.ndarray, np.ndarray | None]:
    """Weighted least squares on relative errors: every coefficient (the fixed ones 0, or ``t0`` when
    given) and the free ones' standard errors."""
    x = np.array([[r.x[j] / r.y * w for j in free] for r, w in zip(rows, weight, strict=True)])
    fixed_t0 = t0 or 0.0
    y = np.array([w * (1.0 - fixed_t0 / r.y) for r, w in zip(rows, weight, strict=True)])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    full = np.zeros(len(NAMES))
    full[0] = fixed_t0
    full[free] = coef
    dof = len(rows) - len(free)
    if dof <= 0:
        return full, None
    sigma2 = float(np.sum((x @ coef - y) ** 2)) / dof
    cov = sigma2 * np.linalg.pinv(x.T @ x)
    errors = np.full(len(NAMES), np.nan)
    errors[free] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return full, errors


def solve(rows: list[Row], free: list[int], t0: float | None = None) -> tuple[
        np.ndarray, np.ndarray | None, np.ndarray]:
    """Coefficients, standard errors and robust weights, by iteratively reweighted least squares."""
    # The prompt's own step (TTFT at the lightest level) is the one clean look at b: as much weight as
    # all the TPOT rows together, which see prefill only mixed into decode steps.
    n_tpot = sum(r.metric == "tpot" for r in rows)
    base = np.array([float(np.sqrt(max(n_tpot, 1))) if r.metric == "ttft" else 1.0 for r in rows])
    robust = np.ones(len(rows))
    coef, errors = _weighted(rows, free, base, t0)
    for _ in range(IRLS_PASSES):
        again = huber_weights(relative_residuals(rows, coef))
        if np.allclose(again, robust, atol=1e-3):
            break
        robust = again
        coef, errors = _weighted(rows, free, base * robust, t0)
    return coef, errors, robust


def _unidentified(rows: list[Row]) -> dict[str, str]:
    """The coefficients these rows cannot tell from the others, and why."""
    tpot = [r for r in rows if r.metric == "tpot"]
    fixed: dict[str, str] = {}
    contexts = [r.context for r in tpot]
    if max(contexts) < MIN_CONTEXT_SPREAD * min(contexts):
        fixed["c"] = ("not identified: every level had the same context length, so the KV read moves with the "
                      "batch; folded into a (calibrate two sweeps with different --input-len to separate them)")
    if not any(r.metric == "ttft" for r in rows) and max(r.x[2] for r in rows) <= 0:
        fixed["b"] = "not identified: no prompt tokens seen in any step (no light level's TTFT either)"
    slots = {r.x[4] for r in rows}
    if 0.0 in slots:
        unknown = sorted({r.run for r in rows if r.x[4] == 0.0})
        fixed["s"] = (f"not identified: no admission cap showed in {', '.join(unknown)}, so the slots a step "
                      "pays for are unknown; fixed at 0")
    elif len(slots) < 2:
        fixed["s"] = ("one admission cap in the sweeps given: a per-slot cost cannot be told from the fixed cost; "
                      "calibrate sweeps at two --parallel values to identify it")
    return fixed


def fit_step(rows: list[Row]) -> StepFit:
    """The step coefficients, their errors, why a coefficient is fixed, and every row's robust weight."""
    tpot = [r for r in rows if r.metric == "tpot"]
    batches = [r.batch for r in tpot]
    if len(tpot) < 2 or max(batches) < MIN_BATCH_SPREAD * max(min(batches), 1e-9):
        raise ResultsError("calibration needs levels at two or more decoding batches (the largest at least "
                           f"{MIN_BATCH_SPREAD:g}x the smallest) to tell the fixed step cost from the cost per "
                           f"sequence; these levels decoded {', '.join(f'{b:,.0f}' for b in batches) or 'none'}")
    fixed = _unidentified(rows)
    floor = T0_FLOOR_S
    while True:
        free = [j for j, name in enumerate(NAMES) if name not in fixed]
        coef, errors, weights = solve(rows, free, t0=floor if "t0" in fixed else None)
        negative = [j for j in free if coef[j] < (0 if NAMES[j] != "t0" else floor)]
        if not negative:
            break
        worst = min(negative, key=lambda j: coef[j])
        fixed[NAMES[worst]] = ("fitted at or below 0: fixed at ~0 (the step's cost is all per sequence and token, as "
                               "on a compute-bound server)" if NAMES[worst] == "t0"
                               else "fitted below 0: fixed at 0 (the levels do not show this cost)")
        if not [j for j, name in enumerate(NAMES) if name not in fixed]:
            raise ResultsError("calibration found no step cost these levels show: they do not follow the twin's "
                               "step model (check that the sweep reached steady levels)")
    return StepFit(coef, errors, fixed, weights)
