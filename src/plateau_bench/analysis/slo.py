"""Service-level objectives: parsing ``ttft_p99=2s,tpot_p99=100ms`` and checking levels against them.

An SLO is a bound on one latency statistic of a level (``LevelResult.<metric>_ms.<stat>``).
Goodput follows DistServe's definition: requests per second that meet *every* per-request SLO
(per-request checks use the request's own TTFT/TPOT/E2E; percentile SLOs are level-wide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plateau_bench.errors import ConfigError
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99", "max")
_UNITS = (("ms", 1.0), ("us", 0.001), ("s", 1000.0), ("m", 60_000.0))


@dataclass(frozen=True)
class Slo:
    metric: str      # ttft | tpot | itl | e2e
    stat: str        # mean | p50 | p90 | p99 | max
    limit_ms: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"

    def describe(self) -> str:
        limit = f"{self.limit_ms / 1000:g}s" if self.limit_ms >= 1000 else f"{self.limit_ms:g}ms"
        return f"{self.key}<={limit}"

    def value(self, level: LevelResult) -> float | None:
        summary = getattr(level, f"{self.metric}_ms")
        v = getattr(summary, self.stat)
        return float(v) if v is not None else None

    def met(self, level: LevelResult) -> bool:
        v = self.value(level)
        return v is not None and v <= self.limit_ms


def _parse_limit(text: str, item: str) -> float:
    t = text.strip().lower()
    for suffix, scale in _UNITS:
        if t.endswith(suffix) and not (suffix == "s" and (t.endswith("ms") or t.endswith("us"))):
            try:
                value = float(t[: -len(suffix)]) * scale
            except ValueError:
                break
            if value <= 0:
                raise ConfigError(f"SLO {item!r}: the limit must be positive")
            return value
    raise ConfigError(f"SLO {item!r}: cannot read the limit {text!r} (use a unit: 2s, 100ms)")


def parse_slo(text: str) -> list[Slo]:
    """``ttft_p99=2s,tpot_p99=100ms`` -> [Slo, Slo]. Raises ConfigError naming the bad part."""
    out: list[Slo] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        key, sep, limit = item.partition("=")
        if not sep:
            raise ConfigError(f"SLO {item!r}: expected METRIC_STAT=LIMIT, e.g. ttft_p99=2s")
        metric, _, stat = key.strip().lower().partition("_")
        if metric not in METRICS:
            raise ConfigError(f"SLO {item!r}: unknown metric {metric!r} (known: {', '.join(METRICS)})")
        if stat not in STATS:
            raise ConfigError(f"SLO {item!r}: unknown statistic {stat!r} (known: {', '.join(STATS)})")
        out.append(Slo(metric, stat, _parse_limit(limit, item)))
    if not out:
        raise ConfigError("--slo needs at least one bound, e.g. ttft_p99=2s")
    return out


def level_meets(level: LevelResult, slos: Sequence[Slo]) -> bool:
    return all(s.met(level) for s in slos)


def violations(level: LevelResult, slos: Sequence[Slo]) -> list[str]:
    out = []
    for s in slos:
        v = s.value(level)
        if v is None or v > s.limit_ms:
            shown = "n/a" if v is None else f"{v:.0f}ms"
            out.append(f"{s.key}={shown} > {s.limit_ms:g}ms")
    return out


def request_meets(record: RequestRecord, slos: Sequence[Slo]) -> bool:
    """Per-request check for goodput: percentile SLOs apply to the request's own value."""
    if record.error is not None or record.first_token_ns is None:
        return False
    for s in slos:
        if s.metric == "ttft":
            v = (record.first_token_ns - record.sent_ns) / 1e6
        elif s.metric == "e2e":
            v = (record.end_ns - record.sent_ns) / 1e6
        elif record.output_tokens > 1:  # tpot and itl (mean ITL of the request equals its TPOT)
            v = (record.end_ns - record.first_token_ns) / 1e6 / (record.output_tokens - 1)
        else:
            continue
        if v > s.limit_ms:
            return False
    return True


def goodput(records: Sequence[RequestRecord], window_s: float, slos: Sequence[Slo]) -> float:
    """Requests per second meeting every SLO (DistServe's goodput)."""
    if window_s <= 0:
        return 0.0
    return sum(1 for r in records if not r.warmup and request_meets(r, slos)) / window_s
