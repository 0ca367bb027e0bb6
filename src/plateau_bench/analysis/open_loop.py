"""Open-loop (rate) sweeps: where latency departs from its low-load value, and what that says.

An open-loop client offers requests at a rate whatever the server does, so throughput follows the
offered rate until the server saturates; what moves first is latency. The **departure rate** is the
lowest offered rate whose E2E p50 exceeds the synchronous (C=1) level's E2E p50 by
``LATENCY_DEPARTURE``. End-to-end latency, not TTFT: at low load TTFT is a few steps and doubles on
noise, while E2E carries the decode time every user waits for.
"""

from __future__ import annotations

from collections.abc import Sequence

from plateau_bench.result import LevelResult, RateSummary, Verdict

LATENCY_DEPARTURE = 1.5


def departure_rate(levels: Sequence[LevelResult], baseline: LevelResult | None) -> float | None:
    if baseline is None or not baseline.e2e_ms.p50:
        return None
    for lv in sorted((lv for lv in levels if lv.rate is not None), key=lambda lv: lv.rate or 0.0):
        if lv.e2e_ms.p50 is not None and lv.e2e_ms.p50 > LATENCY_DEPARTURE * baseline.e2e_ms.p50:
            return lv.rate
    return None


def rate_summary(levels: Sequence[LevelResult]) -> RateSummary:
    sync = next((lv for lv in levels if lv.phase == "synchronous"), None)
    peak = next((lv for lv in levels if lv.phase == "throughput"), None)
    rated = [lv for lv in levels if lv.rate is not None]
    return RateSummary(
        synchronous_rate=sync.request_throughput if sync else None,
        max_rate=peak.request_throughput if peak else None,
        rates=[lv.rate for lv in rated if lv.rate is not None],
        departure_rate=departure_rate(rated, sync),
        low_load_e2e_p50_ms=sync.e2e_ms.p50 if sync else None,
    )


def _r(v: float | None) -> str:
    return f"{v:.2f} req/s" if v is not None else "n/a"


def open_loop_verdict(levels: Sequence[LevelResult], summary: RateSummary) -> Verdict:
    """What an open-loop sweep shows: the rate range, the latency departure, and how to learn why."""
    rated = sorted((lv for lv in levels if lv.rate is not None), key=lambda lv: lv.rate or 0.0)
    ev = [f"{lv.rate:g} req/s offered: {lv.request_throughput:.2f} req/s served, {lv.output_throughput:,.0f} tok/s, "
          f"E2E p50 {(lv.e2e_ms.p50 or 0.0) / 1000:.2f} s, {lv.achieved_concurrency:.1f} in flight"
          for lv in rated]
    if summary.max_rate is not None:
        ev.insert(0, f"synchronous rate {_r(summary.synchronous_rate)}, maximum throughput {_r(summary.max_rate)}")
    if summary.departure_rate is not None:
        headline = (f"open loop: latency departs from its low-load value (E2E p50 x{LATENCY_DEPARTURE:g}) at "
                    f"{_r(summary.departure_rate)}")
    else:
        headline = "open loop: latency stayed near its low-load value at every rate measured"
    return Verdict("open_loop", headline, "medium" if rated else "low", ev,
                   suggestions=["an open loop shows where latency gives way, not what binds: run the closed-loop "
                                "sweep (plateau sweep without --rate) for the constraint"])
