"""One telemetry sample: what a server (or a local GPU) reported at one instant.

A sample carries canonical quantities in ``values`` (the same keys for every engine, see
``engines.CANONICAL``) and engine-specific quantities in ``raw``. Times are integer nanoseconds
on the monotonic clock relative to the start of the level, like every time on a request record,
so samples and requests line up without conversion.

Saved form: one JSON object per line in ``telemetry.jsonl`` (``to_line``), read back with
``samples_from_lines`` so that ``diagnose`` and ``report`` work on saved results as they do live.
Lines that do not fit (a torn last line, another source) are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

SOURCE_SERVER = "server"   # the server's Prometheus /metrics (and its info endpoints)
SOURCE_GPU = "gpu"         # local NVML readings


class TelemetrySample(msgspec.Struct, frozen=True, kw_only=True):
    """Quantities read at ``t_ns`` (ns since the level start)."""

    t_ns: int
    engine: str | None = None
    source: str = SOURCE_SERVER
    values: dict[str, float] = msgspec.field(default_factory=dict)
    raw: dict[str, float] = msgspec.field(default_factory=dict)

    def get(self, key: str) -> float | None:
        """A canonical or raw quantity, or None when this sample lacks it."""
        value = self.values.get(key)
        return value if value is not None else self.raw.get(key)

    def to_line(self) -> dict[str, Any]:
        """The flat JSON object stored in telemetry.jsonl (the writer adds the level label).

        Canonical values sit at the top level (``{"t_ns": ..., "running": 4.0, ...}``), which is
        what readers of saved telemetry (the report's time series) look up; raw values are nested.
        """
        return {"source": self.source, "t_ns": self.t_ns, "engine": self.engine, **self.values,
                "raw": self.raw}


_RESERVED = frozenset({"attempt", "level", "source", "t_ns", "engine", "raw"})


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
        ))
    out.sort(key=lambda s: s.t_ns)
    return out
