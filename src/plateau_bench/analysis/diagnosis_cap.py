"""The admission cap: its signature, and what raising it would give when the KV cache allows it.

Signature: the most requests past their first token at one instant (``peak_decoding``) stays at one
value N while concurrency grows past it, on at least two levels; the server's ``running`` max agrees
when /metrics were recorded, and a stated cap (llama.cpp ``total_slots``) makes it exact. The client's
view can overlap a request's last token with the next one's first by network jitter, so it may read
one or two above the cap; a client peak far above the server's means preempted requests (past their
first token, no longer running): not a fixed cap.

The signature alone does not make the cap *the* limit: a KV cache that is full also holds the running
count at a ceiling. ``diagnosis`` weighs it against the KV evidence (``diagnosis_kv``).

What-if: TPOT is fitted against the decoding batch on the levels below the cap (``TPOT = t0 + a *
batch``, least squares), and the throughput at a batch B is the measured plateau scaled by
``(B / TPOT(B)) / (N / TPOT(N))`` (ratios cancel the prefill share the fit does not model). Doubling
the cap gives B = 2N only if the KV cache holds 2N sequences: with its usage u measured at the cap, the
sequences that fit are F = N * 0.97 / u, and B = min(2N, F + 0.25 * (2N - F)). The slack is empirical: a
scheduler that preempts under pressure keeps more, younger (shorter) sequences running than the
average footprint at the cap suggests; on the gauntlet's engines it brings the what-if errors from
-27..+20 % to -18..+22 % (a straight F gives systematically low answers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plateau_bench.analysis.diagnosis_common import Sweep, conc, ms
from plateau_bench.result import LevelResult

KV_USABLE = 0.97      # the share of the KV cache a scheduler fills before it preempts
PREEMPT_SLACK = 0.25  # share of the way from what fits to 2N that preemption still runs (calibrated on the twin)


@dataclass(frozen=True)
class CapSign:
    cap: int
    stated: bool
    top: list[LevelResult]        # levels at C >= cap
    pinned: list[LevelResult]     # levels well above the cap
    fill: float                   # lowest time-average decoding batch over the cap, on the pinned levels
    server_agrees: bool           # /metrics running max == the cap on every level at or above it
    tpot_flat: bool
    client_short: bool = False    # fewer decoded at once than the server ran: told by the server alone

    def evidence(self, s: Sweep) -> list[str]:
        first, last = self.top[0], self.top[-1]
        ev = [self._held_line(),
              f"TTFT p50 grew {ms(first.ttft_ms.p50)} -> {ms(last.ttft_ms.p50)} (queueing) while TPOT stayed "
              f"{ms(first.tpot_ms.mean)} -> {ms(last.tpot_ms.mean)}"]
        running_max = [lv.telemetry.running_max for lv in self.top if lv.telemetry.running_max is not None]
        waiting = [lv.telemetry.waiting_mean for lv in self.pinned if lv.telemetry.waiting_mean is not None]
        if running_max:
            ev.append(f"server: running max {max(running_max):.0f}, waiting {max(waiting or [0.0]):.0f} on average "
                      f"at C={conc(last)} (/metrics)")
        if self.stated:
            ev.append(f"the server states its cap: {self.cap}")
        waves = _waves(s.levels, self.cap)
        if waves:
            ev.append(waves)
        return ev

    def _held_line(self) -> str:
        first, last = self.top[0], self.top[-1]
        average = f"time-average {first.decoding_concurrency:.1f} -> {last.decoding_concurrency:.1f}"
        if not self.client_short:
            return (f"most requests decoding at once: {self.cap} at every level from C={conc(first)} to "
                    f"C={conc(last)} ({average})")
        peaks = [lv.peak_decoding for lv in self.top]
        return (f"the server ran {self.cap} requests at every level from C={conc(first)} to C={conc(last)}, with more "
                f"waiting above C={self.cap} (its running and waiting counts), while at most {min(peaks)}-{max(peaks)} "
                f"decoded at once ({average}): its running requests do not all decode together (a batch that is not "
                "refilled until it ends, or prompts held in the running count)")


def _server_held(top: list[LevelResult], cap: int) -> bool:
    """The server's own counts hold its stated cap: running at it, with requests waiting, on every level
    above it (the client's decoding count may read less: a batch that is not refilled as requests end)."""
    above = [lv for lv in top if conc(lv) > cap * 1.05]
    return bool(above) and all(lv.telemetry.running_max is not None and abs(lv.telemetry.running_max - cap)
                               <= max(1.0, 0.02 * cap) and (lv.telemetry.waiting_mean or 0.0) > 0 for lv in above)


def cap_signature(s: Sweep) -> CapSign | None:
    top = s.top
    if len(top) < 2:
        return None
    stated = next((int(lv.telemetry.cap) for lv in top if lv.telemetry.cap), None)
    client_peak = max(lv.peak_decoding for lv in top)
    server_peak = max((int(lv.telemetry.running_max) for lv in top if lv.telemetry.running_max), default=0)
    if server_peak and server_peak < 0.9 * client_peak:
        return None
    cap = stated or server_peak or client_peak
    if cap <= 0:
        return None
    top = [lv for lv in s.levels if conc(lv) >= cap]
    pinned = [lv for lv in top if conc(lv) > cap * 1.05]
    peaks = [lv.peak_decoding for lv in top]
    short = min(peaks, default=0) < 0.9 * cap
    if len(top) < 2 or not pinned or max(peaks) > cap * 1.05 + 1 or (short and not (stated and _server_held(top, cap))):
        return None
    running_max = [lv.telemetry.running_max for lv in top if lv.telemetry.running_max is not None]
    first, last = top[0], top[-1]
    return CapSign(
        cap, stated is not None, top, pinned, min(lv.decoding_concurrency / cap for lv in pinned),
        bool(running_max) and all(abs(r - cap) <= max(1.0, 0.02 * cap) for r in running_max),
        (first.tpot_ms.mean or 0) > 0 and (last.tpot_ms.mean or 0) / (first.tpot_ms.mean or 1) < 1.25, short)


def _tpot_points(levels: list[LevelResult], below: float) -> list[tuple[float, float]]:
    """(decoding batch, mean TPOT) of the levels decoding clearly below ``below``."""
    return [(lv.decoding_concurrency, lv.tpot_ms.mean) for lv in levels
            if lv.tpot_ms.mean is not None and lv.decoding_concurrency < below * 0.98]


def _line(pts: list[tuple[float, float]]) -> tuple[float, float] | None:
    if len(pts) < 2 or len({round(b, 1) for b, _ in pts}) < 2:
        return None
    slope, intercept = np.polyfit(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]), 1)
    return float(intercept), float(max(slope, 0.0))


def fit_tpot(levels: list[LevelResult], below: float) -> tuple[float, float] | None:
    """TPOT = intercept + slope x batch (ms), least squares over the levels below ``below``."""
    return _line(_tpot_points(levels, below))


def _waves(levels: list[LevelResult], cap: int) -> str | None:
    burst = [lv for lv in levels if lv.mode == "burst" and conc(lv) >= cap]
    if len(burst) < 2:
        return None
    base = burst[0].wall_s / max(1, round(conc(burst[0]) / cap))
    ratios = [lv.wall_s / base for lv in burst]
    if all(abs(r - round(r)) < 0.15 for r in ratios):
        waves = ", ".join(str(round(r)) for r in ratios)
        return f"burst mode: wall times are {waves} waves of {base:.1f} s"
    return None


def kv_at_cap(sign: CapSign) -> float | None:
    """Time-average KV usage on the levels held at the cap (/metrics), when recorded."""
    kv = [lv.telemetry.kv_usage_mean if lv.telemetry.kv_usage_mean is not None else lv.telemetry.kv_usage_max
          for lv in sign.pinned]
    known = [u for u in kv if u is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class CapWhatIf:
    batch: float          # the running batch the doubled cap would reach
    predicted: float      # output tok/s
    text: str
    levels: int = 0                  # levels the TPOT slope was fitted on
    low: float | None = None         # the band: each of those levels left out of the slope in turn
    high: float | None = None


def _gain(fit: tuple[float, float], cap: int, batch: float) -> float | None:
    """Throughput at ``batch`` over throughput at ``cap``, by the fitted TPOT line (None: a TPOT <= 0)."""
    intercept, slope = fit
    tpot_n, tpot_b = intercept + slope * cap, intercept + slope * batch
    return (batch / tpot_b) / (cap / tpot_n) if tpot_n > 0 and tpot_b > 0 else None


def _left_out_band(pts: list[tuple[float, float]], cap: int, batch: float, plateau: float,
                   predicted: float) -> tuple[float | None, float | None]:
    """The prediction with each level left out of the slope in turn (three levels at least): its spread."""
    if len(pts) < 3:
        return None, None
    values = [predicted]
    for i in range(len(pts)):
        fit = _line(pts[:i] + pts[i + 1:])
        gain = _gain(fit, cap, batch) if fit else None
        if gain is not None:
            values.append(plateau * gain)
    return min(values), max(values)


def cap_what_if(s: Sweep, sign: CapSign) -> CapWhatIf | None:
    """Doubling the cap (see the module docstring): the batch the KV cache allows, and its throughput."""
    cap = sign.cap
    pts = _tpot_points(s.levels, cap)
    fit = _line(pts)
    if not fit:
        return None
    intercept, slope = fit
    tpot_n = intercept + slope * cap
    if tpot_n <= 0:
        return None
    kv = kv_at_cap(sign)
    batch = fits = float(2 * cap)
    if kv:
        fits = cap * KV_USABLE / kv
        batch = min(batch, fits + PREEMPT_SLACK * max(0.0, batch - fits))
    tpot_b = intercept + slope * batch
    gain = (batch / tpot_b) / (cap / tpot_n)
    predicted = s.plateau.throughput * gain
    low, high = _left_out_band(pts, cap, batch, s.plateau.throughput, predicted)
    room = ""
    if kv and batch < 2 * cap:
        room = (f"; the KV cache, {kv:.0%} full at the cap, holds ~{fits:.0f} such sequences (preempting, the "
                f"scheduler keeps ~{batch:.0f} running): {2 * cap} need ~{2 * kv / KV_USABLE:.1f}x the cache")
    elif kv:
        room = f"; the KV cache ({kv:.0%} full at the cap) has room for {2 * cap}"
    return CapWhatIf(batch, predicted, (
        f"raising the cap to {2 * cap} would give ~{predicted:,.0f} tok/s ({gain - 1:+.0%}) at ~{tpot_b / tpot_n:.1f}x "
        f"the per-token latency (from the TPOT-vs-batch slope measured below the cap: {intercept:.1f} ms + "
        f"{slope:.3f} ms per sequence){room}"), len(pts), low, high)
