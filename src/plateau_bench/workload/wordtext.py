"""Prompts built from common words, for when there is no local tokenizer.

Texts are random sequences of ``WORDS`` (one token each, with the leading space, in the
vocabularies of current models), so a prompt's length is controlled by its number of words and
every request starts differently.

With the server's ``/tokenize`` (``RemoteCounter``) the number of round trips is bounded and does
not grow with the number of prompts beyond ``verify_budget``:

1. **Calibrate** (``2 * CALIBRATION_SAMPLES`` calls): count random texts of two sizes and fit
   ``count = intercept + per_word * words`` by least squares. The intercept is the special tokens
   the endpoint adds (BOS); it is subtracted from every count, so counts mean the prompt's own
   tokens as with a local tokenizer.
2. **Generate**: ``round(target / per_word)`` words per prompt.
3. **Verify**: up to ``verify_budget`` prompts (all of them when there are no more than that,
   else a seeded random sample) are counted once; a miss is corrected by adding or removing words
   and counted again, at most ``MAX_FIXES`` times. Verified prompts are exact. The errors seen at
   the first count of the sample are the expected error of the unverified prompts, and are
   reported (``mean_abs_error_tokens``, ``max_abs_error_tokens``).

Without any tokenizer (``EstimateCounter``), a prompt of ``target`` words is expected to be
``target`` tokens; the analysis compares that expectation with the server's usage report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from plateau_bench.workload.tokens import RemoteCounter
from plateau_bench.workload.words import WORDS

CALIBRATION_SAMPLES = 3
VERIFY_BUDGET = 256
MAX_FIXES = 4

_WORDS = np.asarray(WORDS, dtype=object)


def word_ids(rng: np.random.Generator, n_words: int) -> np.ndarray:
    return rng.integers(0, len(WORDS), max(n_words, 0))


def join_words(ids: np.ndarray) -> str:
    return " ".join(_WORDS[ids].tolist())


def estimate_texts(targets: Sequence[int], rng: np.random.Generator) -> list[str]:
    """One word per expected token."""
    return [join_words(word_ids(rng, t)) for t in targets]


async def _calibrate(counter: RemoteCounter, rng: np.random.Generator, mean_target: int) -> tuple[float, float]:
    sizes = [max(4, mean_target // 2)] * CALIBRATION_SAMPLES + [max(8, mean_target)] * CALIBRATION_SAMPLES
    texts = [join_words(word_ids(rng, s)) for s in sizes]
    counts = await counter.count_many(texts)
    w = np.asarray(sizes, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    var = float(np.var(w))
    per_word = float(np.cov(w, c, bias=True)[0, 1] / var) if var > 0 else float(c.mean() / w.mean())
    if not per_word > 0:
        per_word = 1.0
    intercept = float(c.mean() - per_word * w.mean())
    return max(intercept, 0.0), per_word


async def remote_texts(
    counter: RemoteCounter,
    targets: Sequence[int],
    rng: np.random.Generator,
    *,
    verify_budget: int = VERIFY_BUDGET,
) -> tuple[list[str], list[int], dict[str, Any]]:
    """Texts near each target, exact where verified. Returns (texts, counts, accuracy report)."""
    calls_before = counter.calls
    if not targets:
        return [], [], {"method": "words+server_tokenize", "verified": 0}
    intercept, per_word = await _calibrate(counter, rng, int(np.mean(targets)))
    special = round(intercept)
    plans = [word_ids(rng, round(t / per_word * 1.25) + 16) for t in targets]
    n_words = [max(1, round(t / per_word)) for t in targets]
    n_verify = min(len(targets), verify_budget)
    if n_verify == len(targets):
        verify = list(range(len(targets)))
    else:
        verify = sorted(rng.choice(len(targets), n_verify, replace=False).tolist())

    counts = list(targets)
    first_errors: list[int] = []

    async def verify_one(i: int) -> None:
        words, target = n_words[i], targets[i]
        for attempt in range(MAX_FIXES + 1):
            if words > len(plans[i]):
                # repeat the plan rather than draw again: draws here would depend on reply order
                plans[i] = np.resize(plans[i], words)
            got = await counter.count(join_words(plans[i][:words])) - special
            if attempt == 0:
                first_errors.append(got - target)
            counts[i] = got
            n_words[i] = words
            if got == target:
                return
            step = round((target - got) / per_word) or (1 if target > got else -1)
            words = max(1, words + step)

    await asyncio.gather(*(verify_one(i) for i in verify))
    texts = [join_words(plan[:w]) for plan, w in zip(plans, n_words, strict=True)]
    errors = np.abs(np.asarray(first_errors, dtype=np.float64))
    report: dict[str, Any] = {
        "method": "words+server_tokenize",
        "special_tokens": special,
        "tokens_per_word": round(per_word, 4),
        "verified": n_verify,
        "verified_exact": sum(1 for i in verify if counts[i] == targets[i]),
        "mean_abs_error_tokens": float(errors.mean()) if len(errors) else 0.0,
        "max_abs_error_tokens": float(errors.max()) if len(errors) else 0.0,
        "remote_calls": counter.calls - calls_before,
    }
    return texts, counts, report
