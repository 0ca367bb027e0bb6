"""Token lengths per request: fixed, spread by ``--range-ratio``, or drawn from a distribution.

Plain lengths ``L`` spread by ``--range-ratio r`` follow ``--length-convention``:

* ``plateau`` (the default): integers uniform in ``[int(L*(1-r)), int(L*(1+r))]`` (at least 1),
  as vLLM's random dataset drew them before it moved to floor/ceil bounds.
* ``vllm``: vLLM's ``--dataset-name random`` today: ``[floor(L*(1-r)), ceil(L*(1+r))]``, outputs at
  least 1, ``r < 1``. Drawn from ``numpy.random.default_rng(seed)``, all inputs then all outputs,
  which are the first two draws of vLLM's ``RandomDataset``: the same seed and number of prompts
  give the same lengths. (vLLM subtracts the tokenizer's special tokens from ``--random-input-len``
  first; ``--input-len`` here counts the prompt's own tokens, so give vLLM's length minus those.)
* ``sglang``: SGLang's ``bench_serving --dataset-name random``: inputs uniform in
  ``[max(1, int(L*r)), L]``, outputs in ``[int(L*r), L]``, ``0 <= r <= 1`` (``r = 1``: fixed lengths;
  SGLang's default ``r = 0`` spreads over ``[1, L]``). Drawn from numpy's legacy
  ``RandomState(seed)`` (``bench_serving`` seeds ``np.random``), all inputs then all outputs, so the
  same seed and number of prompts give SGLang's lengths; an output of 0 becomes 1 here, since every
  request must generate a token.

Distributions (``spec.LengthSpec``) ignore the convention: ``uniform:lo,hi`` (integers, both ends
included), ``normal:mean,sd``, ``lognormal:mean,sd`` (the mean and standard deviation of the
lengths; the underlying normal has ``sigma^2 = ln(1 + sd^2/mean^2)``, ``mu = ln(mean) - sigma^2/2``),
``file:PATH`` (draws with replacement from the file's lengths). Continuous draws are rounded to the
nearest integer and raised to 1 when below.

Determinism: the inputs are drawn before the outputs from the same generator, and nothing else is
drawn in between, so a seed fixes every length.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from plateau_bench.errors import ConfigError
from plateau_bench.spec import LengthSpec, WorkloadSpec

_SEPARATORS = re.compile(r"[\s,]+")


def sample_lengths(rng: np.random.Generator, mean: int, ratio: float, n: int) -> list[int]:
    """``n`` integers uniform in ``[int(mean*(1-ratio)), int(mean*(1+ratio))]``, each >= 1."""
    lo = max(1, int(mean * (1.0 - ratio)))
    hi = max(lo, int(mean * (1.0 + ratio)))
    return [int(x) for x in rng.integers(lo, hi + 1, n)]


def load_length_file(path: str, flag: str) -> list[int]:
    """The positive integers of a lengths file: separated by newlines, commas or spaces; ``#`` comments."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{flag} file:{p}: cannot read the file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{flag} file:{p}: not UTF-8 text") from None
    values: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for token in _SEPARATORS.split(line.split("#", 1)[0].strip()):
            if not token:
                continue
            try:
                value = int(token)
            except ValueError:
                raise ConfigError(f"{flag} file:{p}:{lineno}: {token!r} is not an integer") from None
            if value < 1:
                raise ConfigError(f"{flag} file:{p}:{lineno}: lengths must be >= 1 (got {value})")
            values.append(value)
    if not values:
        raise ConfigError(f"{flag} file:{p}: no lengths in the file")
    return values


def nominal_length(spec: LengthSpec, flag: str) -> int:
    """The length a distribution stands for in tables and estimates: its mean, rounded, at least 1."""
    if spec.kind == "file":
        assert spec.path is not None
        values = load_length_file(spec.path, flag)
        return max(1, round(sum(values) / len(values)))
    if spec.kind == "uniform":
        return max(1, round((spec.a + spec.b) / 2))
    return max(1, round(spec.a))


def draw(rng: np.random.Generator, spec: LengthSpec, n: int, flag: str,
         values: np.ndarray | None = None) -> list[int]:
    """``n`` lengths from a distribution (see the module docstring); ``values``: a file's, already read."""
    if spec.kind == "fixed":
        return [int(spec.a)] * n
    if spec.kind == "uniform":
        return [int(x) for x in rng.integers(int(spec.a), int(spec.b) + 1, n)]
    if spec.kind == "file":
        if values is None:
            assert spec.path is not None
            values = np.asarray(load_length_file(spec.path, flag), dtype=np.int64)
        return [int(x) for x in values[rng.integers(0, len(values), n)]]
    if spec.kind == "normal":
        raw = rng.normal(spec.a, spec.b, n)
    else:
        sigma2 = math.log1p((spec.b / spec.a) ** 2)
        raw = rng.lognormal(math.log(spec.a) - sigma2 / 2, math.sqrt(sigma2), n)
    return [max(1, int(x)) for x in np.rint(raw)]


class LengthSampler:
    """Draws (input, output) lengths for a workload, batch after batch, from one stream per seed."""

    def __init__(self, workload: WorkloadSpec, rng: np.random.Generator) -> None:
        self.workload = workload
        self.rng = rng
        self._legacy = np.random.RandomState(workload.seed) if workload.length_convention == "sglang" else None
        self._files: dict[str, np.ndarray] = {}

    def reseed(self, rng: np.random.Generator) -> None:
        """Draw the next batches from ``rng`` (a chunk of prompts built later, ``workload.feed``); SGLang's
        legacy stream is seeded from it too, so no two chunks repeat each other's lengths."""
        self.rng = rng
        if self._legacy is not None:
            self._legacy = np.random.RandomState(int(rng.integers(0, 2**32)))

    def draw(self, n: int) -> tuple[list[int], list[int]]:
        """``n`` input lengths and ``n`` output lengths (inputs drawn first)."""
        w = self.workload
        inputs = self._side(w.input_dist, w.input_len, n, "--input-len", output=False)
        outputs = self._side(w.output_dist, w.output_len, n, "--output-len", output=True)
        return inputs, outputs

    def _side(self, spec: LengthSpec | None, length: int, n: int, flag: str, *, output: bool) -> list[int]:
        if spec is not None:
            values = None
            if spec.path is not None:
                if spec.path not in self._files:
                    self._files[spec.path] = np.asarray(load_length_file(spec.path, flag), dtype=np.int64)
                values = self._files[spec.path]
            return draw(self.rng, spec, n, flag, values)
        w = self.workload
        r = w.range_ratio
        if w.length_convention == "plateau":
            return sample_lengths(self.rng, length, r, n)
        if w.length_convention == "vllm":
            lo = max(1, math.floor(length * (1 - r)))
            hi = max(lo, math.ceil(length * (1 + r)))
            return [int(x) for x in self.rng.integers(lo, hi + 1, n)]
        assert self._legacy is not None
        lo = int(length * r) if output else max(int(length * r), 1)
        return [max(1, int(x)) for x in self._legacy.randint(lo, length + 1, size=n)]
