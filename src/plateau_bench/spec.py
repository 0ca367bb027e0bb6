"""Validated specifications: what to send (workload), how hard (level), where (target).

Specs are plain frozen structs. ``validate()`` raises ``ConfigError`` with one sentence naming
the offending flag, so the CLI can print it as is. Secrets never leave ``TargetSpec``: its
``public()`` form is what result files store.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from plateau_bench.errors import ConfigError

Mode = Literal["burst", "steady", "rate"]
Endpoint = Literal["completions", "chat"]


class WorkloadSpec(msgspec.Struct, frozen=True, kw_only=True):
    input_len: int = 128
    output_len: int = 128
    range_ratio: float = 0.0      # lengths drawn uniformly in [len*(1-r), len*(1+r)]
    dataset: str | None = None    # JSONL of prompts, or ShareGPT JSON
    seed: int = 0
    tokenizer: str | None = None  # local HF tokenizer dir or tokenizer.json

    def validate(self) -> None:
        if self.input_len < 1:
            raise ConfigError(f"--input-len must be >= 1 (got {self.input_len})")
        if self.output_len < 1:
            raise ConfigError(f"--output-len must be >= 1 (got {self.output_len})")
        if not 0.0 <= self.range_ratio < 1.0:
            raise ConfigError(f"--range-ratio must be in [0, 1) (got {self.range_ratio})")


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

    @property
    def label(self) -> str:
        if self.mode == "rate":
            return f"rate={self.rate:g}"
        return f"C={self.concurrency}"

    def validate(self) -> None:
        if self.mode in ("burst", "steady"):
            if self.concurrency is None or self.concurrency <= 0:
                raise ConfigError(f"--concurrency must be a positive integer (got {self.concurrency})")
            if self.rate is not None:
                raise ConfigError(f"--rate cannot be combined with --mode {self.mode}")
        else:
            if self.rate is None or self.rate <= 0:
                raise ConfigError(f"--rate must be > 0 requests/s (got {self.rate})")
            if self.max_concurrency is not None and self.max_concurrency <= 0:
                raise ConfigError(f"--max-concurrency must be > 0 (got {self.max_concurrency})")
        if self.num_requests is not None and self.num_requests <= 0:
            raise ConfigError(f"--num-requests must be > 0 (got {self.num_requests})")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ConfigError(f"--duration must be > 0 (got {self.duration_s})")
        if self.burstiness <= 0:
            raise ConfigError(f"--burstiness must be > 0 (got {self.burstiness})")
        if self.warmup < 0:
            raise ConfigError(f"--warmup must be >= 0 (got {self.warmup})")
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

    def public(self) -> dict[str, object]:
        """The target as it may be written to results and logs: secrets removed."""
        safe_headers = {
            k: ("<redacted>" if _is_secret_header(k) else v) for k, v in self.headers.items()
        }
        return {
            "url": self.url,
            "model": self.model,
            "endpoint": self.endpoint,
            "api_key": "<redacted>" if self.api_key else None,
            "headers": safe_headers,
            "timeout_s": self.timeout_s,
        }


def _is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return any(s in lowered for s in ("authorization", "key", "token", "secret", "cookie"))


def parse_duration(text: str) -> float:
    """'90', '90s', '1.5m', '2h', '250ms' -> seconds. Raises ConfigError."""
    t = text.strip().lower()
    number, scale = t, 1.0
    for suffix, unit_scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix) and not (suffix == "s" and t.endswith("ms")):
            number, scale = t[: -len(suffix)], unit_scale
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise ConfigError(f"cannot read duration {text!r} (examples: 60s, 1.5m, 250ms)") from None
    if value <= 0:
        raise ConfigError(f"duration must be positive (got {text!r})")
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
        if value <= 0:
            raise ConfigError(f"{flag} must be positive (got {value:g})")
        out.append(value)
    if not out:
        raise ConfigError(f"{flag} needs at least one value")
    return out
