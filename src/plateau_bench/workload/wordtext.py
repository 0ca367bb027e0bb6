"""Prompts built from common words, for when there is no local tokenizer.

Texts are random sequences of ``WORDS`` (one token each, with the leading space, in the
vocabularies of current models), so a prompt's length is controlled by its number of words and
every request starts differently.

With the server's ``/tokenize`` (``RemoteCounter``) the number of round trips is bounded and does
not grow with the number of prompts beyond ``verify_budget``:

1. **Calibrate** (``2 * CALIBRATION_SAMPLES + 5`` calls): the special tokens the endpoint adds
   (BOS) are measured (``_special_tokens``) and subtracted from every count, so counts mean the prompt's
   own tokens as with a local tokenizer; counts of random texts of two sizes give ``per_word`` by
   least squares.
2. **Generate**: ``round(target / per_word)`` words per prompt.
3. **Verify**: up to ``verify_budget`` prompts (all of them when there are no more than that,
   else a seeded random sample) are counted once; a miss is corrected by adding or removing words
   and counted again, at most ``MAX_FIXES`` times. Where a word is several tokens (a character-level
   or small vocabulary: whole words step over the target), the text is then cut inside its last
   word, by bisection on its length in characters between a text below the target and one above it.
   Verified prompts are exact. The errors seen at the first count of the sample are the expected
   error of the unverified prompts, and are reported (``mean_abs_error_tokens``,
   ``max_abs_error_tokens``).

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


def calibrated_texts(targets: Sequence[int], per_word: float, rng: np.random.Generator) -> list[str]:
    """Texts of ``round(target / per_word)`` words: prompts built after the verified sample, with its
    calibration and without more ``/tokenize`` calls (their error is the sample's first-count error)."""
    return [join_words(word_ids(rng, max(1, round(t / per_word)))) for t in targets]


async def _calibrate(counter: RemoteCounter, rng: np.random.Generator, mean_target: int) -> tuple[int, float]:
    sizes = [max(4, mean_target // 2)] * CALIBRATION_SAMPLES + [max(8, mean_target)] * CALIBRATION_SAMPLES
    texts = [join_words(word_ids(rng, s)) for s in sizes]
    counts = await counter.count_many(texts)
    w = np.asarray(sizes, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    var = float(np.var(w))
    per_word = float(np.cov(w, c, bias=True)[0, 1] / var) if var > 0 else float(c.mean() / w.mean())
    if not per_word > 0:
        per_word = 1.0
    return await _special_tokens(counter), per_word


async def _special_tokens(counter: RemoteCounter) -> int:
    """The tokens the endpoint adds to every text (BOS), exactly: the fit's intercept carries the words'
    spread in length. An empty text's count says it where the server adds them to any text; llama.cpp
    adds none to an empty one, so then a word counted alone and twice says it: ``2 * c(w) - c(w w)`` is
    the special tokens plus what the word costs more without a leading space than with one (nothing for
    a SentencePiece vocabulary; with a byte-level one, a one-letter word costs the same both ways)."""
    words = ["a", WORDS[0]]
    counts = await counter.count_many(["", *words, *(f"{w} {w}" for w in words)])
    empty, alone, twice = counts[0], counts[1:3], counts[3:]
    if empty > 0:
        return empty
    return max(0, min(2 * one - two for one, two in zip(alone, twice, strict=True)))


class _Bounds:
    """The nearest texts seen below and above a prompt's target, by their number of words."""

    def __init__(self) -> None:
        self.under: tuple[int, int] | None = None   # (words, count) with count < target, the largest
        self.over: tuple[int, int] | None = None    # (words, count) with count > target, the smallest

    def see(self, words: int, got: int, target: int) -> None:
        if got < target and (self.under is None or got > self.under[1]):
            self.under = (words, got)
        if got > target and (self.over is None or got < self.over[1]):
            self.over = (words, got)


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
    special, per_word = await _calibrate(counter, rng, int(np.mean(targets)))
    plans = [word_ids(rng, round(t / per_word * 1.25) + 16) for t in targets]
    n_words = [max(1, round(t / per_word)) for t in targets]
    n_verify = min(len(targets), verify_budget)
    if n_verify == len(targets):
        verify = list(range(len(targets)))
    else:
        verify = sorted(rng.choice(len(targets), n_verify, replace=False).tolist())

    counts = list(targets)
    first_errors: list[int] = []
    cut: dict[int, str] = {}

    async def count_words(i: int, words: int) -> int:
        if words > len(plans[i]):
            # repeat the plan rather than draw again: draws here would depend on reply order
            plans[i] = np.resize(plans[i], words)
        return await counter.count(join_words(plans[i][:words])) - special

    async def verify_one(i: int) -> None:
        words, target, bounds = n_words[i], targets[i], _Bounds()
        for attempt in range(MAX_FIXES + 1):
            got = await count_words(i, words)
            if attempt == 0:
                first_errors.append(got - target)
            counts[i], n_words[i] = got, words
            if got == target:
                return
            bounds.see(words, got, target)
            if bounds.under and bounds.over and bounds.over[0] - bounds.under[0] <= 1:
                break   # whole words step over the target
            step = round((target - got) / per_word) or (1 if target > got else -1)
            words = max(1, words + step)
        if bounds.over is None:   # one word more must overshoot before a cut can land on the target
            bounds.see(words + 1, await count_words(i, words + 1), target)
        if bounds.over is not None:
            lo = 0 if bounds.under is None else len(join_words(plans[i][:bounds.under[0]]))
            found = await _cut_to(counter, join_words(plans[i][:bounds.over[0]]), lo, target, special)
            if found is not None:
                cut[i], counts[i] = found, target

    await asyncio.gather(*(verify_one(i) for i in verify))
    texts = [cut.get(i) or join_words(plan[:w]) for i, (plan, w) in enumerate(zip(plans, n_words, strict=True))]
    errors = np.abs(np.asarray(first_errors, dtype=np.float64))
    report: dict[str, Any] = {
        "method": "words+server_tokenize",
        "special_tokens": special,
        "tokens_per_word": round(per_word, 4),
        "verified": n_verify,
        "verified_exact": sum(1 for i in verify if counts[i] == targets[i]),
        "cut_inside_a_word": len(cut),
        "mean_abs_error_tokens": float(errors.mean()) if len(errors) else 0.0,
        "max_abs_error_tokens": float(errors.max()) if len(errors) else 0.0,
        "remote_calls": counter.calls - calls_before,
    }
    return texts, counts, report


MAX_CUTS = 12   # bisection steps on a text's length in characters: 4,096 characters


async def _cut_to(counter: RemoteCounter, text: str, lo: int, target: int, special: int) -> str | None:
    """The prefix of ``text`` (longer than ``lo`` characters, which count below ``target``) that counts
    exactly ``target`` tokens, or None when the bisection finds none (a count that is not monotone)."""
    hi = len(text)
    for _ in range(MAX_CUTS):
        if hi - lo <= 1:
            return None
        mid = (lo + hi) // 2
        piece = text[:mid]
        if piece.endswith(" "):   # a trailing space is a token of its own: glue the next letter instead
            piece = piece[:-1] + text[mid]
        got = await counter.count(piece) - special
        if got == target:
            return piece
        lo, hi = (mid, hi) if got < target else (lo, mid)
    return None
