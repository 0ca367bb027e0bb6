"""A verdict from level summaries alone: what a table of results (or an imported summary) can show.

A summary has no per-request times, so the most requests decoding at once and the recompute stalls the
other checks read are unknown (zero). Three signatures survive, all about queueing:

* **waves** (burst mode): from the plateau's first level N upwards, the wall times are whole multiples
  of the first one, ``wall(C) / wall(N) ~ C / N``: the server admitted N at a time.
* **Little's law**: the concurrency a level achieved (time in flight over the window, which a summary
  states or implies as completed x mean latency / duration) stays well below the C that was sent: the
  rest waited, and a server that admitted everything sent would be in flight with all of it.
* **Little's law on tokens**: a table of tok/s and mean TPOT (or ITL) holds the decoding batch, output
  tok/s x the time per output token (sequences decoding at once). When it stops growing with C (within
  15 % over the plateau's levels, below 80 % of C) while TTFT grows and TPOT stays flat (within 20 %),
  the extra requests wait before they decode, and the batch is where they are admitted up to.

Any points to an admission cap at about the plateau's first level; a table cannot tell a cap from a
KV cache that holds a fixed number of sequences, so the confidence is at most medium (waves on three or
more levels), else low, and the verdict says what would settle it. With neither, the verdict says the
summaries cannot tell, rather than guess.
"""

from __future__ import annotations

from plateau_bench.analysis.diagnosis_common import GENERIC_CAP, Sweep, conc, flag
from plateau_bench.result import Confidence, LevelResult, Verdict

WAVE_TOLERANCE = 0.15    # a wall time within 15 % of a whole number of waves
QUEUED_SHARE = 0.8       # achieved concurrency below 80 % of C: requests waited
BATCH_FLAT = 0.15        # the decoding batch held within 15 % over the plateau's levels
TPOT_FLAT = 0.20         # ... while the time per token moved less than this: the extra requests queued


def token_batch(level: LevelResult) -> float | None:
    """Sequences decoding at once by Little's law on tokens: output tok/s x the mean time per output token
    (TPOT, else ITL; the median where a summary states no mean). None when the summary has neither."""
    step_ms = _step_ms(level)
    if not step_ms or level.output_throughput <= 0:
        return None
    return level.output_throughput * step_ms / 1000.0


def _step_ms(level: LevelResult) -> float | None:
    return level.tpot_ms.mean or level.itl_ms.mean or level.tpot_ms.p50 or level.itl_ms.p50


def _first_token_ms(level: LevelResult) -> float | None:
    return level.ttft_ms.mean or level.ttft_ms.p50


def _held_batch(top: list[LevelResult]) -> tuple[float, list[str]] | None:
    """The decoding batch the plateau's levels hold, and the evidence, when it stopped growing while the
    first token waited longer and the time per token did not move."""
    rows = [(lv, token_batch(lv), _step_ms(lv), _first_token_ms(lv)) for lv in top]
    known = [(lv, b, s, f) for lv, b, s, f in rows if b is not None and s is not None and f is not None]
    if len(known) < 2:
        return None
    (first, _, s0, f0), (last, b1, s1, f1) = known[0], known[-1]
    batches = [b for _, b, _, _ in known]
    if max(batches) > (1 + BATCH_FLAT) * min(batches) or b1 >= QUEUED_SHARE * conc(last):
        return None
    if abs(s1 / s0 - 1) > TPOT_FLAT or f1 <= f0 * (1 + TPOT_FLAT):
        return None
    ev = ["decoding batch by Little's law on tokens (output tok/s x TPOT): "
          + ", ".join(f"{b:,.0f} at C={conc(lv)}" for lv, b, _, _ in known) + ": it stopped growing below C",
          f"TTFT {f0:,.0f} -> {f1:,.0f} ms while TPOT stayed at {s0:,.1f} -> {s1:,.1f} ms from C={conc(first)} to "
          f"C={conc(last)}: the extra requests waited before decoding, they did not slow the batch"]
    return sum(batches) / len(batches), ev


def summaries_only(sweep: Sweep) -> bool:
    """The plateau's levels carry no per-request decoding figures (a table or an imported summary)."""
    return all(lv.peak_decoding == 0 and lv.decoding_concurrency == 0 for lv in sweep.top)


def _waves(top: list[LevelResult], n: int) -> list[float] | None:
    burst = [lv for lv in top if lv.mode == "burst" and lv.wall_s > 0]
    if len(burst) < 2 or conc(burst[0]) != n:
        return None
    ratios = [lv.wall_s / burst[0].wall_s for lv in burst]
    expected = [conc(lv) / n for lv in burst]
    if all(abs(r - e) <= WAVE_TOLERANCE * e for r, e in zip(ratios, expected, strict=True)):
        return ratios
    return None


def _queued(top: list[LevelResult]) -> list[LevelResult]:
    return [lv for lv in top if 0 < lv.achieved_concurrency < QUEUED_SHARE * conc(lv)]


def summary_verdict(sweep: Sweep) -> Verdict:
    n = sweep.plateau.concurrency
    top = sweep.top
    held = _held_batch(top)
    ev = [f"plateau ~{sweep.plateau.throughput:,.0f} tok/s from C={n} (from level summaries: no per-request "
          + ("times; the decoding batch from tok/s and TPOT)" if held else "times, so the decoding batch is unknown)")]
    if held is not None:
        ev += held[1]
    waves = _waves(top, n)
    if waves:
        ev.append(f"burst mode: wall times are {', '.join(f'{r:.2f}' for r in waves)} x the first "
                  f"({top[0].wall_s:.1f} s) for {', '.join(f'{conc(lv) / n:g}' for lv in top if lv.mode == 'burst')} "
                  f"x its {n} requests: waves of {n}")
    queued = _queued(top)
    for lv in queued:
        ev.append(f"at C={conc(lv)} only {lv.achieved_concurrency:,.0f} requests were in flight on average "
                  f"(Little's law): the other {conc(lv) - lv.achieved_concurrency:,.0f} waited")
    if not waves and not queued and held is None:
        return Verdict("insufficient_data", "the summaries cannot say why throughput stopped growing", "low", ev,
                       to_separate=["import per-request results (e.g. vLLM's detailed results) or measure with "
                                    "plateau sweep: the decoding batch tells a cap from compute"])
    signs = sum(bool(s) for s in (waves and len(waves) >= 3, queued, held))
    confidence: Confidence = "medium" if signs >= 2 or (waves and len(waves) >= 3) else "low"
    cap = round(held[0]) if held is not None and not waves else n
    try_cap = (flag(sweep.engine, "cap") or GENERIC_CAP).format(n=2 * cap)
    return Verdict(
        "admission_cap", f"admission cap at about {cap} running requests (from level summaries)", confidence, ev,
        estimated_cap=cap, suggestions=[f"try {try_cap} (check the KV cache has room for twice the sequences)"],
        to_separate=["per-request results or /metrics: a KV cache holding a fixed number of sequences queues "
                     "requests the same way; the running count or the decoding batch tells them apart"])
