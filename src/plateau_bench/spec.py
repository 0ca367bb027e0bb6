"""Validated specifications: what to send (workload), how hard (level), where (target).

Specs are plain frozen structs. ``validate()`` raises ``ConfigError`` with one sentence naming
the offending flag, so the CLI can print it as is. Numbers given as text must be finite: ``nan``
and ``inf`` are refused (``float()`` reads both, and ``nan`` slips through every ``<= 0`` test).

Secrets never leave ``TargetSpec``: its ``public()`` form (what result files store) and its
``repr`` show ``***`` for the API key, for the value of every header that is secret, and for
URL userinfo (``http://user:pw@host`` -> ``http://***@host``) and secret-named query parameters.
A header is secret when its name contains ``auth``, ``key``, ``token``, ``secret``, ``cookie``,
``passw`` or ``session`` (case-insensitive: Authorization, Proxy-Authorization, X-Api-Key,
Cookie, Set-Cookie...), or when the user named it in ``secret_headers`` (``--secret-header``).
"""

from __future__ import annotations

import math
import re
from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.redaction import REDACTED, is_secret_header, redact_url

Mode = Literal["burst", "steady", "rate"]
Endpoint = Literal["completions", "chat"]

# More connections than this is a typo, not a benchmark: refused before anything is allocated.
MAX_CONCURRENCY = 1_000_000
# No model serves a request this long (the largest contexts are a few million tokens): beyond it, a typo,
# and the prompts would exhaust this machine's memory before anything was sent.
MAX_REQUEST_TOKENS = 10_000_000
# Shared prefixes, conversations and turns beyond these are typos too (each is built in memory up front).
MAX_PREFIX_GROUPS = 100_000
MAX_SESSIONS = 1_000_000
MAX_TURNS = 10_000
# Every time is kept in integer nanoseconds: a duration beyond a year is a typo, and 1e300 s overflows.
MAX_DURATION_S = 365 * 86400.0


DEFAULT_SESSION_HEADER = "X-Session-ID"
_HEADER_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)

LengthKind = Literal["fixed", "uniform", "normal", "lognormal", "file"]
LengthConvention = Literal["plateau", "sglang", "vllm"]
LENGTH_CONVENTIONS: tuple[str, ...] = ("plateau", "sglang", "vllm")
_LENGTH_PARAMS = {"uniform": ("lo", "hi"), "normal": ("mean", "sd"), "lognormal": ("mean", "sd")}


class LengthSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A distribution of token lengths, as written on the command line (``text``).

    ``N`` (fixed), ``uniform:lo,hi`` (integers, both ends included), ``normal:mean,sd`` and
    ``lognormal:mean,sd`` (the mean and standard deviation of the lengths themselves; draws are
    rounded and kept >= 1), ``file:PATH`` (an empirical distribution: draws with replacement from
    the positive integers in the file).
    """

    text: str
    kind: LengthKind
    a: float = 0.0            # fixed: N; uniform: lo; normal, lognormal: mean
    b: float = 0.0            # uniform: hi; normal, lognormal: sd
    path: str | None = None   # file


def parse_length(text: str, flag: str) -> LengthSpec:
    """``'128'``, ``'uniform:64,256'``, ``'normal:512,128'``, ``'lognormal:512,256'``, ``'file:lens.txt'``.

    Raises ConfigError naming ``flag``.
    """
    t = text.strip()
    kind, sep, rest = t.partition(":")
    if not sep:
        try:
            n = int(t)
        except ValueError:
            raise ConfigError(f"{flag}: cannot read {text!r} (examples: 128, uniform:64,256, normal:512,128, "
                              "lognormal:512,256, file:lengths.txt)") from None
        if n < 1:
            raise ConfigError(f"{flag} must be >= 1 (got {n})")
        return LengthSpec(text=t, kind="fixed", a=float(n))
    kind = kind.strip().lower()
    if kind == "file":
        if not rest.strip():
            raise ConfigError(f"{flag} file: needs a path (file:lengths.txt)")
        return LengthSpec(text=t, kind="file", path=rest.strip())
    names = _LENGTH_PARAMS.get(kind)
    if names is None:
        raise ConfigError(f"{flag}: unknown distribution {kind!r} (use N, uniform:lo,hi, normal:mean,sd, "
                          "lognormal:mean,sd or file:PATH)")
    parts = [p.strip() for p in rest.split(",")]
    if len(parts) != 2:
        raise ConfigError(f"{flag} {kind}: needs two numbers, {kind}:{names[0]},{names[1]} (got {text!r})")
    try:
        a, b = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{flag} {kind}: {names[0]} and {names[1]} must be numbers (got {text!r})") from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ConfigError(f"{flag} {kind}: {names[0]} and {names[1]} must be finite (got {text!r})")
    if kind == "uniform":
        if a != int(a) or b != int(b) or a < 1 or b < a:
            raise ConfigError(f"{flag} uniform: needs integers 1 <= lo <= hi (got {text!r})")
    elif a < 1 or b < 0:
        raise ConfigError(f"{flag} {kind}: needs mean >= 1 and sd >= 0 (got {text!r})")
    return LengthSpec(text=t, kind=kind, a=a, b=b)  # type: ignore[arg-type]


class WorkloadSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What each request carries.

    ``input_len``/``output_len`` are the nominal lengths (a distribution's mean); when
    ``input_dist``/``output_dist`` are given, lengths are drawn from them instead. ``range_ratio``
    spreads fixed lengths the way ``length_convention`` says (see ``workload.lengths``).
    """

    input_len: int = 128
    output_len: int = 128
    range_ratio: float = 0.0      # lengths spread around input_len/output_len (see length_convention)
    dataset: str | None = None    # JSONL of prompts, or ShareGPT JSON
    allow_reuse: bool = False     # a run that needs more requests than the dataset has repeats it (counted)
    seed: int = 0                 # fixes the lengths, the arrival schedule, a dataset's order ...
    prompt_salt: int | None = None   # ... and with it the prompts' text (the CLI draws one per run, recorded)
    tokenizer: str | None = None  # local HF tokenizer dir or tokenizer.json
    input_dist: LengthSpec | None = None
    output_dist: LengthSpec | None = None
    length_convention: LengthConvention = "plateau"
    prefix_groups: int = 0        # shared prefixes: G system prompts (0: none) ...
    prefix_len: int = 0           # ... of P tokens each, before each request's own input_len tokens
    sessions: int = 0             # multi-turn: this many conversations (0: single-turn requests) ...
    turns: LengthSpec | None = None   # ... of this many turns each (None: 1) ...
    think_time_s: float = 0.0     # ... with this pause between an answer and the next turn
    session_header: str = DEFAULT_SESSION_HEADER   # the header carrying each conversation's id
    trace: str | None = None      # replay this trace's requests at their times (workload.trace) ...
    trace_requests: int | None = None   # ... its first this many (None: all)

    def validate(self) -> None:
        if self.input_len < 1:
            raise ConfigError(f"--input-len must be >= 1 (got {self.input_len})")
        if self.output_len < 1:
            raise ConfigError(f"--output-len must be >= 1 (got {self.output_len})")
        for flag, tokens in (("--prefix-len", self.prefix_len),
                             ("--input-len", _upper(self.input_len, self.input_dist)),
                             ("--output-len", self.longest_output())):
            if tokens > MAX_REQUEST_TOKENS:
                raise ConfigError(f"{flag} {tokens:,} is more tokens than any model serves in one request (at most "
                                  f"{MAX_REQUEST_TOKENS:,})")
        if self.length_convention not in LENGTH_CONVENTIONS:
            raise ConfigError(f"--length-convention must be one of {', '.join(LENGTH_CONVENTIONS)} "
                              f"(got {self.length_convention!r})")
        # SGLang's --random-range-ratio 1 means fixed lengths; vLLM's (and ours) must stay below 1.
        sglang = self.length_convention == "sglang"
        if not (0.0 <= self.range_ratio < 1.0 or (sglang and self.range_ratio == 1.0)):
            bound = "[0, 1]" if sglang else "[0, 1)"
            raise ConfigError(f"--range-ratio must be in {bound} (got {self.range_ratio})")
        if self.allow_reuse and not self.dataset:
            raise ConfigError("--allow-reuse repeats a --dataset's prompts once they run out: give it with "
                              "--dataset (synthetic prompts are new for every request)")
        self._validate_prefixes()
        self._validate_sessions()
        self._validate_trace()
        if self.range_ratio and (self.input_dist is not None or self.output_dist is not None):
            raise ConfigError("--range-ratio spreads fixed lengths: give it with plain --input-len/--output-len "
                              "numbers, not with a distribution")


    def _validate_trace(self) -> None:
        if self.trace is None:
            return
        if self.trace_requests is not None and self.trace_requests < 1:
            raise ConfigError(f"--num-requests must be > 0 (got {self.trace_requests})")
        for given, flag in ((self.dataset, "--dataset"), (self.sessions, "--sessions"),
                            (self.prefix_groups, "--prefix-groups")):
            if given:
                raise ConfigError(f"--trace brings its own requests; it cannot be combined with {flag}")

    def _validate_sessions(self) -> None:
        if self.sessions < 0:
            raise ConfigError(f"--sessions must be >= 1 (got {self.sessions})")
        if self.sessions > MAX_SESSIONS:
            raise ConfigError(f"--sessions {self.sessions:,} is more conversations than a benchmark needs (at most "
                              f"{MAX_SESSIONS:,}; each is built in memory)")
        if self.sessions and self.turns is not None and _upper(1, self.turns) > MAX_TURNS:
            raise ConfigError(f"--turns allows {_upper(1, self.turns):,} turns per conversation (at most "
                              f"{MAX_TURNS:,})")
        if not (math.isfinite(self.think_time_s) and self.think_time_s >= 0):
            raise ConfigError(f"--think-time must be >= 0 and finite (got {self.think_time_s})")
        if self.sessions and self.dataset is not None:
            raise ConfigError("--sessions builds synthetic conversations; it cannot be combined with --dataset")
        if not _HEADER_TOKEN.match(self.session_header):
            raise ConfigError(f"--session-header must be an HTTP header name (got {self.session_header!r})")
        if self.turns is not None and self.turns.kind in ("normal", "lognormal") and self.turns.a < 1:
            raise ConfigError("--turns: the mean must be at least 1")

    def longest_input(self) -> int:
        """The longest prompt the lengths allow, the shared prefix included (a distribution's upper end where
        it has one, else its nominal length)."""
        return self.prefix_len + _upper(self.input_len, self.input_dist)

    def longest_output(self) -> int:
        return _upper(self.output_len, self.output_dist)

    def _validate_prefixes(self) -> None:
        if self.prefix_groups < 0:
            raise ConfigError(f"--prefix-groups must be >= 1 (got {self.prefix_groups})")
        if self.prefix_groups > MAX_PREFIX_GROUPS:
            raise ConfigError(f"--prefix-groups {self.prefix_groups:,} is more shared prefixes than a benchmark "
                              f"needs (at most {MAX_PREFIX_GROUPS:,}; each is built in memory)")
        if self.prefix_len < 0:
            raise ConfigError(f"--prefix-len must be >= 1 (got {self.prefix_len})")
        if bool(self.prefix_groups) != bool(self.prefix_len):
            raise ConfigError("--prefix-groups and --prefix-len go together: G shared prefixes of P tokens")
        if self.prefix_groups and self.dataset is not None:
            raise ConfigError("--prefix-groups builds synthetic prompts; it cannot be combined with --dataset")


def _upper(nominal: int, dist: LengthSpec | None) -> int:
    """A length's largest value: a uniform's upper end, a fixed length; otherwise (normal, lognormal, a
    file of lengths) its nominal one."""
    if dist is None:
        return nominal
    if dist.kind == "uniform":
        return int(dist.b)
    if dist.kind == "fixed":
        return int(dist.a)
    return nominal


class LevelSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One load level.

    burst:  ``num_requests`` requests (default = concurrency) over ``concurrency`` closed-loop workers.
    steady: ``concurrency`` closed-loop workers for ``duration_s`` (or ``num_requests``).
    rate:   open loop, Poisson/gamma arrivals at ``rate`` req/s, optional ``max_concurrency``.
    """

    mode: Mode = "burst"
    concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 0
    time_scale: float | None = None   # a trace replayed this many times faster (a rate level)
    max_wall_s: float | None = None   # --max-level-time: the level ends this long after its start, drain included
    warm: bool = False                # steady: keep the server loaded from the level before (``analysis.warm``)

    @property
    def label(self) -> str:
        if self.time_scale is not None:
            return f"trace x{self.time_scale:g}"
        if self.mode == "rate":
            return f"rate={self.rate:g}"
        return f"C={self.concurrency}"

    def validate(self) -> None:
        if self.mode in ("burst", "steady"):
            if self.concurrency is None or self.concurrency <= 0:
                raise ConfigError(f"--concurrency must be a positive integer (got {self.concurrency})")
            check_concurrency(self.concurrency, "--concurrency")
            if self.rate is not None:
                raise ConfigError(f"--rate cannot be combined with --mode {self.mode}")
        else:
            if self.rate is None or not _positive(self.rate):
                raise ConfigError(f"--rate must be > 0 requests/s and finite (got {self.rate})")
            if self.max_concurrency is not None:
                if self.max_concurrency <= 0:
                    raise ConfigError(f"--max-concurrency must be > 0 (got {self.max_concurrency})")
                check_concurrency(self.max_concurrency, "--max-concurrency")
        if self.num_requests is not None and self.num_requests <= 0:
            raise ConfigError(f"--num-requests must be > 0 (got {self.num_requests})")
        if self.duration_s is not None and not _positive(self.duration_s):
            raise ConfigError(f"--duration must be > 0 and finite (got {self.duration_s})")
        if self.max_wall_s is not None and not _positive(self.max_wall_s):
            raise ConfigError(f"--max-level-time must be > 0 and finite (got {self.max_wall_s})")
        if not _positive(self.burstiness):
            raise ConfigError(f"--burstiness must be > 0 and finite (got {self.burstiness})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup})")
        if self.time_scale is not None and (self.mode != "rate" or not _positive(self.time_scale)):
            raise ConfigError(f"--time-scale must be > 0 and finite, on a trace's open loop (got {self.time_scale})")
        if self.mode != "burst" and self.num_requests is None and self.duration_s is None:
            raise ConfigError("a steady or rate level needs --duration or --num-requests")

    def total_requests(self) -> int | None:
        if self.num_requests is not None:
            return self.num_requests
        if self.mode == "burst":
            return self.concurrency
        return None


class TargetSpec(msgspec.Struct, frozen=True, kw_only=True):
    url: str
    model: str | None = None
    endpoint: Endpoint = "completions"
    api_key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout_s: float = 600.0
    secret_headers: tuple[str, ...] = ()  # header names whose values are secret, beyond the usual

    def is_secret(self, header: str) -> bool:
        """Whether the value of header ``header`` must never be shown."""
        return is_secret_header(header, self.secret_headers)

    def public_headers(self) -> dict[str, str]:
        return {k: (REDACTED if self.is_secret(k) else v) for k, v in self.headers.items()}

    def public(self) -> dict[str, object]:
        """The target as it may be written to results and logs: secrets removed."""
        return {
            "url": redact_url(self.url),
            "model": self.model,
            "endpoint": self.endpoint,
            "api_key": REDACTED if self.api_key else None,
            "headers": self.public_headers(),
            "timeout_s": self.timeout_s,
        }

    def __repr__(self) -> str:
        shown = self.public()
        shown["secret_headers"] = self.secret_headers
        fields = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"TargetSpec({fields})"


def check_concurrency(value: int, flag: str = "--concurrency") -> None:
    """Refuse a concurrency no machine can hold, before anything is sized by it."""
    if value > MAX_CONCURRENCY:
        raise ConfigError(
            f"{flag} {value} is more than {MAX_CONCURRENCY:,} simultaneous requests; "
            "each needs its own connection (an open file), so this is refused"
        )


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def parse_duration(text: str, flag: str | None = None) -> float:
    """'90', '90s', '1.5m', '2h', '250ms' -> seconds: finite and > 0. Raises ConfigError.

    ``flag`` (e.g. ``"--timeout"``) names the option in the message when given.
    """
    what = flag or "duration"
    t = text.strip().lower()
    if not t:
        raise ConfigError(f"{what} is empty (examples: 60s, 1.5m, 250ms)")
    number, scale = t, 1.0
    for suffix, unit_scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix) and not (suffix == "s" and t.endswith("ms")):
            number, scale = t[: -len(suffix)], unit_scale
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise ConfigError(f"cannot read {what} {text!r} (examples: 60s, 1.5m, 250ms)") from None
    if not math.isfinite(value):
        raise ConfigError(f"{what} must be a finite number of seconds (got {text!r})")
    if value <= 0:
        raise ConfigError(f"{what} must be positive (got {text!r})")
    if value > MAX_DURATION_S:
        raise ConfigError(f"{what} {text!r} is more than a year: give at most {MAX_DURATION_S / 86400:.0f} days "
                          "(e.g. 8760h)")
    return value


def parse_int_list(text: str, flag: str) -> list[int]:
    """'1,16,64' -> [1, 16, 64]; each must be a positive integer."""
    return [int(v) for v in _parse_positive_list(text, flag, int, "an integer")]


def parse_float_list(text: str, flag: str) -> list[float]:
    """'0.5,2,10' -> [0.5, 2.0, 10.0]; each must be a positive number."""
    return _parse_positive_list(text, flag, float, "a number")


def _parse_positive_list(text: str, flag: str, kind: type[float] | type[int], what: str) -> list[float]:
    out: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = kind(part)
        except ValueError:
            raise ConfigError(f"{flag}: {part!r} is not {what}") from None
        if not math.isfinite(value):
            raise ConfigError(f"{flag}: {part!r} is not a finite number")
        if value <= 0:
            raise ConfigError(f"{flag} must be positive (got {value:g})")
        out.append(value)
    if not out:
        raise ConfigError(f"{flag} needs at least one value")
    return out
