"""Per-level time series from request records and telemetry samples (pure, no I/O).

What a level looked like while it ran, as the report draws it:

* **In flight**: requests sent and not yet ended, sampled on a regular grid of instants
  (``count(sent <= t) - count(end <= t)``, two binary searches per instant). Sampling the step
  function at instants, instead of drawing every send and end, keeps the series small for levels
  with many thousands of requests; the grid is fine enough (``max_points`` instants over the
  level) that waves of a burst stay visible.
* **Output tok/s**: output tokens arriving in consecutive 1 s buckets, counted by the metric
  module's ``bucket_output_tokens`` (so chunkless records are spread exactly as the metrics do).
  The last bucket is cut short by the end of the level: its rate uses its real width, and a
  sliver under half a bucket is merged into the bucket before it.
* **Server series**: whichever of the canonical telemetry values ``running``, ``waiting`` and
  ``kv_usage`` the samples carry, against the sample time. KV usage is a fraction (0..1) in the
  canonical form; it is reported in percent.

Every series is downsampled to at most ``max_points`` points by averaging consecutive groups of
points, which keeps the area under a rate curve (the tokens it stands for) and the shape of a
plateau, and bounds the size of the report whatever the length of the level.

Times are seconds since the level start, the clock of the request records. Telemetry samples
carry ``t_ns`` on that clock; a sample set that starts after the level's last request ended is
taken to be on another clock and is rebased to its first sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plateau_bench.analysis.metrics import Window, bucket_output_tokens
from plateau_bench.analysis.stats import FloatArray
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

DEFAULT_MAX_POINTS = 400
SERVER_KEYS = ("running", "waiting", "kv_usage")


@dataclass(frozen=True)
class Series:
    """One curve: times in seconds since the level start, and the values at those times."""

    t_s: FloatArray
    values: FloatArray

    def __len__(self) -> int:
        return int(self.t_s.size)


@dataclass(frozen=True)
class LevelSeries:
    """Everything the report draws for one level over time."""

    in_flight: Series
    output_tps: Series
    server: dict[str, Series] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return len(self.in_flight) == 0 and len(self.output_tps) == 0 and not self.server


def _empty() -> Series:
    return Series(np.zeros(0), np.zeros(0))


def downsample(t: FloatArray, y: FloatArray, max_points: int = DEFAULT_MAX_POINTS) -> Series:
    """Average consecutive groups of points so that at most ``max_points`` remain."""
    n = int(t.size)
    if n <= max_points or max_points <= 0:
        return Series(np.asarray(t, dtype=np.float64), np.asarray(y, dtype=np.float64))
    group = math.ceil(n / max_points)
    groups = math.ceil(n / group)
    pad = groups * group - n
    # Pad the last group with its own last value so that its mean is not dragged to zero.
    t_p = np.concatenate([t, np.full(pad, t[-1])]).reshape(groups, group)
    y_p = np.concatenate([y, np.full(pad, y[-1])]).reshape(groups, group)
    return Series(t_p.mean(axis=1), y_p.mean(axis=1))


def in_flight(records: Sequence[RequestRecord], max_points: int = DEFAULT_MAX_POINTS) -> Series:
    """Requests in flight at ``max_points`` evenly spaced instants from 0 to the last end."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return _empty()
    sent = np.sort(np.array([r.sent_ns for r in measured], dtype=np.float64))
    ended = np.sort(np.array([r.end_ns for r in measured], dtype=np.float64))
    last = float(ended[-1])
    grid = np.linspace(0.0, last, max(2, max_points))
    count = np.searchsorted(sent, grid, side="right") - np.searchsorted(ended, grid, side="right")
    return Series(grid / NS, count.astype(np.float64))


def output_tps(records: Sequence[RequestRecord], bucket_s: float = 1.0,
               max_points: int = DEFAULT_MAX_POINTS) -> Series:
    """Output tokens per second in ``bucket_s`` buckets from the level start to its last end."""
    measured = [r for r in records if not r.warmup]
    if not measured:
        return _empty()
    last = max(r.end_ns for r in measured)
    tokens = bucket_output_tokens(measured, Window(0, last), bucket_s)
    if tokens.size == 0:
        return _empty()
    # The last bucket ends with the level: divide by its real width, or the rate seems to collapse
    # at the end; a sliver shorter than half a bucket joins the previous one rather than spike.
    starts = np.arange(tokens.size) * bucket_s
    widths = np.clip(last / NS - starts, 1e-9, bucket_s)
    if tokens.size > 1 and widths[-1] < bucket_s / 2:
        tokens = np.concatenate([tokens[:-2], [tokens[-2] + tokens[-1]]])
        widths = np.concatenate([widths[:-2], [widths[-2] + widths[-1]]])
        starts = starts[:-1]
    return downsample(starts + widths / 2, tokens / widths, max_points)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _sample_time_ns(sample: Mapping[str, Any]) -> float | None:
    t = _number(sample.get("t_ns"))
    if t is not None:
        return t
    t_s = _number(sample.get("t_s"))
    return t_s * NS if t_s is not None else None


def server_series(samples: Sequence[Mapping[str, Any]], level_end_ns: float | None = None,
                  max_points: int = DEFAULT_MAX_POINTS) -> dict[str, Series]:
    """The canonical server values present in ``samples`` (missing keys and bad values skipped)."""
    timed = [(t, s) for s in samples if (t := _sample_time_ns(s)) is not None]
    if not timed:
        return {}
    timed.sort(key=lambda item: item[0])
    origin = 0.0
    if level_end_ns is not None and timed[0][0] > level_end_ns:
        origin = timed[0][0]
    out: dict[str, Series] = {}
    for key in SERVER_KEYS:
        points = [((t - origin) / NS, v) for t, s in timed if (v := _number(s.get(key))) is not None]
        if not points:
            continue
        t_arr = np.array([p[0] for p in points], dtype=np.float64)
        v_arr = np.array([p[1] for p in points], dtype=np.float64)
        if key == "kv_usage":
            v_arr = v_arr * 100.0
        out[key] = downsample(t_arr, v_arr, max_points)
    return out


def level_series(records: Sequence[RequestRecord], samples: Sequence[Mapping[str, Any]] = (),
                 *, bucket_s: float = 1.0, max_points: int = DEFAULT_MAX_POINTS) -> LevelSeries:
    """In-flight requests, output tok/s and server values for one level."""
    ends = [r.end_ns for r in records if not r.warmup]
    return LevelSeries(
        in_flight=in_flight(records, max_points),
        output_tps=output_tps(records, bucket_s, max_points),
        server=server_series(samples, float(max(ends)) if ends else None, max_points),
    )
