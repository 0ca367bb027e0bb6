"""A running count held by a full step token budget, told from a cap by the server's own prefill time.

A step's token budget (vLLM ``--max-num-batched-tokens``) counts decode and prompt tokens alike, and the
scheduler serves the running requests' decodes first: with N running, a step has ``budget - N`` tokens left
for prompts, so a new request's prompt is split over ``P / (budget - N)`` steps, and the running count
settles where the prompts arriving fill what is left, ``N ~ budget / (1 + P / O)``, pinned as exactly as a
cap pins it (its gauges cannot tell them apart, and neither can the mean tokens per step). What tells them
apart is where a prompt's time goes: under a cap an admitted request is prefilled in the step that takes it,
as at light load; under a full budget its prompt is split over more and more steps as N grows. The server's
prefill histogram (first scheduled to first token) over its TPOT (one step) counts those steps
(``budget_sign``): a prompt spanning ``SPLIT_STEPS`` steps or more on the plateau, ``SPLIT_GREW`` times what
it spanned at the lightest level, is split to fit the steps. The budget is then about the running count plus
the prompt tokens one step takes (``N + P / steps``): a lower estimate, since steps also carry the odd whole
prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from plateau_bench.analysis.diagnosis_common import Sweep, conc, mean_lengths
from plateau_bench.result import LevelResult

SPLIT_STEPS = 1.5    # a prompt spanning this many steps or more on the plateau ...
SPLIT_GREW = 1.8     # ... and this many times what it spanned at the lightest level: split to fit the steps


@dataclass(frozen=True)
class BudgetSign:
    low: LevelResult          # the lightest level with a server time split
    top: LevelResult          # the widest, past the count held
    steps_low: float          # steps a prompt took there (prefill time over TPOT)
    steps_top: float
    budget: float             # about the tokens a step holds: running + the prompt tokens one step takes

    def evidence(self, held: int) -> str:
        return (f"the server's prefill took ~{self.steps_top:.1f} steps per request at C={conc(self.top)} against "
                f"{self.steps_low:.1f} at C={conc(self.low)} (its prefill time over TPOT): prompts are split across "
                f"steps, so each step's token budget is full: ~{self.budget:,.0f} tokens, which holds the running "
                f"count at {held} just as a cap would")


def _steps(level: LevelResult) -> float | None:
    split = level.time_split
    prefill = split.prefill_ms.mean if split is not None and split.prefill_ms is not None else None
    tpot = level.tpot_ms.mean
    return prefill / tpot if prefill and tpot else None


def budget_sign(s: Sweep, pinned: list[LevelResult]) -> BudgetSign | None:
    """The full budget behind a held running count (module docstring); ``pinned``: the levels above it."""
    timed = [(lv, steps) for lv in s.levels if (steps := _steps(lv)) is not None]
    if len(timed) < 2 or timed[-1][0] not in pinned:
        return None
    (low, steps_low), (top, steps_top) = timed[0], timed[-1]
    if steps_top < SPLIT_STEPS or steps_top < SPLIT_GREW * steps_low:
        return None
    prompt, _ = mean_lengths(top)
    running = top.telemetry.running_mean or top.decoding_concurrency
    return BudgetSign(low, top, steps_low, steps_top, running + prompt / steps_top)
