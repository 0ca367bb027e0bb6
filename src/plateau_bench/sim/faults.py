"""Fault injection for the twin's HTTP server: ``--faults hang=0.1,truncate=0.05,...``.

Each generation request (``/v1/completions``, ``/v1/chat/completions``) gets at most one fault.
The probabilities are per request and the faults exclude each other (so they may sum to at most
1): one uniform draw per request picks the fault, a second one where the fault happens in the
stream. Request ``n`` (in the order the server received them, from 0) draws from its own RNG seeded
with ``(seed, n)``, so the n-th request gets the same fault in every run with the same seed,
whatever the interleaving of the others.

Faults and what the client sees (``at`` is a token count drawn uniformly in ``[0, max_tokens)``):

* ``hang``: headers and ``at`` tokens, then nothing until the client disconnects (or the server
  stops); the engine drops the request at that point.
* ``truncate``: ``at`` tokens, then a clean end of the body: no ``finish_reason``, no usage, no
  ``[DONE]`` (non-streamed: a body with ``finish_reason: null`` and ``at`` tokens).
* ``reset``: ``at`` tokens, then the connection is reset (TCP RST).
* ``malformed``: after ``at`` tokens one SSE event whose data is not valid JSON; the stream then
  goes on normally (non-streamed: the body is not valid JSON).
* ``http_500``: a 500 with an OpenAI error body; ``http_429``: a 429 with ``Retry-After``.
  Neither reaches the engine.
* ``slow_headers``: the server waits ``slow_headers_s`` (wall seconds) before it starts on the
  request, so the response headers come that much later; the rest is normal.

Two parameters may follow the probabilities: ``slow_headers_s=SECONDS`` (default 5) and
``retry_after_s=SECONDS`` (the ``Retry-After`` value, default 1).
"""

from __future__ import annotations

import math
import random
from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError

FaultName = Literal["hang", "truncate", "reset", "malformed", "http_500", "http_429", "slow_headers"]
FAULT_NAMES: tuple[FaultName, ...] = ("hang", "truncate", "reset", "malformed", "http_500", "http_429",
                                      "slow_headers")
STREAM_FAULTS = frozenset({"hang", "truncate", "reset", "malformed"})
_PARAMS = ("slow_headers_s", "retry_after_s")


class FaultSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request fault probabilities and the two fault parameters; see the module docstring."""

    hang: float = 0.0
    truncate: float = 0.0
    reset: float = 0.0
    malformed: float = 0.0
    http_500: float = 0.0
    http_429: float = 0.0
    slow_headers: float = 0.0
    slow_headers_s: float = 5.0
    retry_after_s: int = 1

    def probabilities(self) -> list[tuple[FaultName, float]]:
        return [(name, getattr(self, name)) for name in FAULT_NAMES]

    @property
    def any(self) -> bool:
        return any(p > 0 for _, p in self.probabilities())

    def validate(self) -> None:
        for name, p in self.probabilities():
            if not 0.0 <= p <= 1.0:   # also refuses NaN
                raise ConfigError(f"--faults: {name}={p:g} is not a probability in [0, 1]")
        total = math.fsum(p for _, p in self.probabilities())
        if total > 1.0 + 1e-9:
            raise ConfigError(f"--faults: the probabilities sum to {total:.12g}, more than 1 "
                              "(a request gets at most one fault)")
        if not 0.0 <= self.slow_headers_s <= 3600:
            raise ConfigError(f"--faults: slow_headers_s={self.slow_headers_s:g} must be in [0, 3600] seconds")
        if not 0 <= self.retry_after_s <= 86400:
            raise ConfigError(f"--faults: retry_after_s={self.retry_after_s} must be in [0, 86400] seconds")

    def spec(self) -> str:
        """The ``--faults`` text for this spec (probabilities that are not 0, then changed parameters)."""
        # repr: the shortest text that reads back as the same float (``:g`` could round a sum above 1).
        parts = [f"{name}={p!r}" for name, p in self.probabilities() if p > 0]
        default = FaultSpec()
        parts += [f"{k}={getattr(self, k)!r}" for k in _PARAMS if getattr(self, k) != getattr(default, k)]
        return ",".join(parts)


def parse_faults(text: str) -> FaultSpec:
    """``"hang=0.1,http_429=0.05,slow_headers_s=3"`` -> FaultSpec; ConfigError (one line) if invalid."""
    values: dict[str, float | int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, raw = (s.strip() for s in part.partition("="))
        if not eq or not raw:
            raise ConfigError(f"--faults: {part!r} is not NAME=VALUE (e.g. hang=0.1)")
        if name not in FAULT_NAMES and name not in _PARAMS:
            raise ConfigError(f"--faults: unknown fault {name!r} (known: {', '.join(FAULT_NAMES + _PARAMS)})")
        if name in values:
            raise ConfigError(f"--faults: {name} is given twice")
        try:
            value: float | int = int(raw) if name == "retry_after_s" else float(raw)
        except ValueError:
            what = "a whole number of seconds" if name == "retry_after_s" else "a number"
            raise ConfigError(f"--faults: {name}={raw!r} is not {what}") from None
        values[name] = value
    spec = FaultSpec(**values)  # type: ignore[arg-type]
    spec.validate()
    return spec


class Fault(msgspec.Struct, frozen=True):
    """The fault one request gets: its name and, for stream faults, the token count it strikes at."""

    name: FaultName
    at: int = 0


class FaultPicker:
    """Draws each request's fault from ``spec``; request ``n`` always gets the same one per seed."""

    def __init__(self, spec: FaultSpec, seed: int = 0) -> None:
        spec.validate()
        self.spec = spec
        self.seed = seed
        self._cumulative: list[tuple[float, FaultName]] = []
        acc = 0.0
        for name, p in spec.probabilities():
            if p > 0:
                acc += p
                self._cumulative.append((acc, name))
        self._n = 0

    def draw(self, max_tokens: int) -> Fault | None:
        """The next request's fault (None: served normally)."""
        rng = random.Random(f"{self.seed}:{self._n}")   # str seeds hash the same in every process
        self._n += 1
        u = rng.random()
        at = int(rng.random() * max(max_tokens, 1))
        for bound, name in self._cumulative:
            if u < bound:
                return Fault(name, at)
        return None
