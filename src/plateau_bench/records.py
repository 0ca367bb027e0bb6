"""Plain data that flows between the stages: request records in, level results out.

Every time on a ``RequestRecord`` is an integer count of nanoseconds on the monotonic clock,
relative to the start of its level (``t=0`` is when the level's load loop began). Chunk times
are taken when the chunk's bytes were read, before any parsing.

Records are produced identically by the HTTP driver and by the simulated engine, so every
analysis runs unchanged on both. What the analysis makes of them is in ``plateau_bench.result``.

Beside the requests, a level records samples taken while it ran, on the same clock:
``TelemetrySample`` is what a server (its /metrics), a local GPU (NVML) or a DCGM exporter reported at
one instant, with canonical quantities in ``values`` (the same keys for every engine, see
``telemetry.engines.CANONICAL``) and engine-specific ones in ``raw``; ``HealthSample`` is the load
generator's own health. Both are saved one JSON object per line in ``telemetry.jsonl`` and read back
with ``samples_from_lines`` (a line that does not fit, such as a torn last one, is skipped), so
``diagnose`` and ``report`` work on saved results as they do live.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

TOKEN_SOURCE_USAGE = "usage"          # the server's usage report
TOKEN_SOURCE_TOKENIZER = "tokenizer"  # counted locally with the tokenizer
TOKEN_SOURCE_ESTIMATE = "estimate"    # approximation (no usage, no tokenizer)
TOKEN_SOURCE_SIM = "sim"              # exact, from the simulated engine


class RequestRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One request, as the client (or the twin) saw it.

    ``chunk_ns``/``chunk_tokens`` list the content chunks: arrival time and how many output
    tokens each carried. They may be empty when only first-token and end times are known
    (the twin in fast mode); metrics then spread tokens evenly between first token and end.

    ``output_tokens`` counts tokens actually streamed, also on failed records (a truncated or
    broken stream keeps what arrived). ``usage_tokens`` is set only when the server's usage
    report claimed a count the stream refuted (more than it streamed); ``token_mismatch`` then
    holds. ``connect_ns`` is a duration, not a time: from the start of the send until a connection was
    ready (pooled or new, including any wait for a pool slot); None when none was obtained or
    the producer does not measure it (the twin).
    """

    index: int
    worker: int = -1
    scheduled_ns: int
    sent_ns: int
    end_ns: int
    first_token_ns: int | None = None
    first_reasoning_ns: int | None = None
    chunk_ns: list[int] = msgspec.field(default_factory=list)
    chunk_tokens: list[int] = msgspec.field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    token_source: str = TOKEN_SOURCE_USAGE
    error: str | None = None
    error_detail: str | None = None
    http_status: int | None = None
    warmup: bool = False
    usage_tokens: int | None = None
    connect_ns: int | None = None
    retry_after_s: float | None = None   # the server's Retry-After (seconds) on a refused request
    process: int | None = None           # the load process that sent it (--workers, --ray); None: the only one
    asked_tokens: int | None = None      # the max_tokens it asked for (None: not recorded, as by the twin)
    session: int = -1                    # multi-turn: which conversation (-1: a single-turn request)
    turn: int = -1                       # and which of its turns, from 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def token_mismatch(self) -> bool:
        """The usage report disagreed with the tokens streamed (``output_tokens`` is the latter)."""
        return self.usage_tokens is not None and self.usage_tokens != self.output_tokens


SOURCE_SERVER = "server"   # the server's Prometheus /metrics (and its info endpoints)
SOURCE_GPU = "gpu"         # local NVML readings


class HistogramSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A server histogram as one scrape saw it: cumulative counts at its finite upper bounds (``le``),
    and its observation count and sum since the server started.

    The ``+Inf`` bucket's cumulative count is ``count`` itself, so it is not stored (JSON has no infinity).
    """

    le: list[float]
    cumulative: list[float]
    count: float
    sum: float


class TelemetrySample(msgspec.Struct, frozen=True, kw_only=True):
    """Quantities read at ``t_ns`` (ns since the level start).

    ``histograms``: the few server histograms the time split reads (``telemetry.engines``), by
    canonical key (``queue_s``, ``prefill_s``, ``step_tokens``, ...); empty for every other source.
    """

    t_ns: int
    engine: str | None = None
    source: str = SOURCE_SERVER
    values: dict[str, float] = msgspec.field(default_factory=dict)
    raw: dict[str, float] = msgspec.field(default_factory=dict)
    histograms: dict[str, HistogramSnapshot] = msgspec.field(default_factory=dict)

    def get(self, key: str) -> float | None:
        """A canonical or raw quantity, or None when this sample lacks it."""
        value = self.values.get(key)
        return value if value is not None else self.raw.get(key)

    def to_line(self) -> dict[str, Any]:
        """The flat JSON object stored in telemetry.jsonl (the writer adds the level label).

        Canonical values sit at the top level (``{"t_ns": ..., "running": 4.0, ...}``), which is
        what readers of saved telemetry (the report's time series) look up; raw values are nested.
        """
        line: dict[str, Any] = {"source": self.source, "t_ns": self.t_ns, "engine": self.engine, **self.values,
                                "raw": self.raw}
        if self.histograms:
            line["histograms"] = msgspec.to_builtins(self.histograms)
        return line


_RESERVED = frozenset({"attempt", "level", "source", "t_ns", "engine", "raw", "histograms"})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def samples_from_lines(lines: Iterable[Mapping[str, Any]], source: str = SOURCE_SERVER) -> list[TelemetrySample]:
    """Rebuild samples of one source from saved telemetry lines, skipping lines that do not fit."""
    out: list[TelemetrySample] = []
    for line in lines:
        if line.get("source", SOURCE_SERVER) != source:
            continue
        t_ns, raw = line.get("t_ns"), line.get("raw", {})
        if not isinstance(t_ns, int | float) or not _is_number(t_ns) or not isinstance(raw, Mapping):
            continue
        engine = line.get("engine")
        out.append(TelemetrySample(
            t_ns=int(t_ns), engine=engine if isinstance(engine, str) else None, source=source,
            values={k: float(v) for k, v in line.items() if k not in _RESERVED and _is_number(v)},
            raw={str(k): float(v) for k, v in raw.items() if _is_number(v)},
            histograms=_histograms(line.get("histograms")),
        ))
    out.sort(key=lambda s: s.t_ns)
    return out


def _histograms(saved: object) -> dict[str, HistogramSnapshot]:
    """Saved histograms read back; one that does not fit (bounds and counts of different lengths, a value
    that is not a finite number) is dropped alone, the rest of its line kept."""
    if not isinstance(saved, Mapping):
        return {}
    out: dict[str, HistogramSnapshot] = {}
    for key, value in saved.items():
        try:
            snap = msgspec.convert(value, HistogramSnapshot)
        except msgspec.ValidationError:
            continue
        numbers = [*snap.le, *snap.cumulative, snap.count, snap.sum]
        if len(snap.le) == len(snap.cumulative) and all(math.isfinite(v) for v in numbers):
            out[str(key)] = snap
    return out


class HealthSample(msgspec.Struct, frozen=True, kw_only=True):
    """One reading of the load generator's own health (``source: "client"`` in telemetry.jsonl)."""

    t_ns: int
    cpu_pct: float
    loop_lag_ms: float
    in_flight: int | None = None
    source: str = "client"
    worker: int | None = None   # which load process (``--workers``); None: the one in-process client
