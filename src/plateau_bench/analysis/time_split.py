"""A level's time split by the server's own histograms: the single place it becomes ``ServerTimeSplit``.

The window maths (Δ of cumulative histograms, mean, p99, "unknown" below a handful of observations)
is ``telemetry.histograms``'; here the seconds become milliseconds, a histogram the engine does not
publish becomes a phase of None, and the client's TTFT is set beside the server's account of it:

    outside the engine = client TTFT mean - (server queue mean + server prefill mean)

vLLM stamps queue and prefill in its engine core, so what is left is the network, HTTP, the API
server's tokenisation and the hop into the engine. It is a difference of means over slightly different
request sets (the client's window holds requests by when they were sent, the histograms those that
finished in it), so it may read a few milliseconds below zero on a fast local server.
"""

from __future__ import annotations

from collections.abc import Sequence

from plateau_bench.records import TelemetrySample
from plateau_bench.result import ServerPhase, ServerTimeSplit
from plateau_bench.telemetry.histograms import WindowHistogram, window_histograms

_MS = 1000.0


def _phase(windowed: dict[str, WindowHistogram | None], key: str, scale: float) -> ServerPhase | None:
    if key not in windowed:
        return None   # the engine does not publish it
    h = windowed[key]
    if h is None:
        return ServerPhase()
    return ServerPhase(observations=h.count, mean=None if h.mean is None else h.mean * scale,
                       p99=None if h.p99 is None else h.p99 * scale, p99_above=h.p99_above)


def server_time_split(samples: Sequence[TelemetrySample], start_ns: int, end_ns: int, *,
                      client_ttft_mean_ms: float | None, engine: str | None) -> ServerTimeSplit | None:
    """The split over ``[start_ns, end_ns]``; None when no sample carries any of its histograms."""
    windowed = window_histograms(samples, start_ns, end_ns)
    if not windowed:
        return None
    engine = next((s.engine for s in samples if s.histograms and s.engine), engine)
    queue, prefill = _phase(windowed, "queue_s", _MS), _phase(windowed, "prefill_s", _MS)
    outside = None
    if (client_ttft_mean_ms is not None and queue is not None and queue.mean is not None
            and prefill is not None and prefill.mean is not None):
        outside = client_ttft_mean_ms - queue.mean - prefill.mean
    return ServerTimeSplit(
        engine=engine, queue_ms=queue, prefill_ms=prefill, decode_ms=_phase(windowed, "decode_s", _MS),
        inference_ms=_phase(windowed, "inference_s", _MS), server_ttft_ms=_phase(windowed, "ttft_s", _MS),
        server_e2e_ms=_phase(windowed, "e2e_s", _MS), step_tokens=_phase(windowed, "step_tokens", 1.0),
        client_ttft_mean_ms=client_ttft_mean_ms, outside_engine_ms=outside)
