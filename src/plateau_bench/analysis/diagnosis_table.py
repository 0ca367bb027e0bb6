"""A verdict from level summaries alone: what a table of results (or an imported summary) can show.

A summary has no per-request times, so the most requests decoding at once, the decoding batch and the
recompute stalls the other checks read are unknown (zero). Two signatures survive, both about queueing:

* **waves** (burst mode): from the plateau's first level N upwards, the wall times are whole multiples
  of the first one, ``wall(C) / wall(N) ~ C / N``: the server admitted N at a time.
* **Little's law**: the concurrency a level achieved (time in flight over the window, which a summary
  states or implies as completed x mean latency / duration) stays well below the C that was sent: the
  rest waited, and a server that admitted everything sent would be in flight with all of it.

Either points to an admission cap at about the plateau's first level; a table cannot tell a cap from a
KV cache that holds a fixed number of sequences, so the confidence is at most medium (waves on three or
more levels), else low, and the verdict says what would settle it. With neither, the verdict says the
summaries cannot tell, rather than guess.
"""

from __future__ import annotations

from plateau_bench.analysis.diagnosis_common import GENERIC_CAP, Sweep, conc, flag
from plateau_bench.result import Confidence, LevelResult, Verdict

WAVE_TOLERANCE = 0.15    # a wall time within 15 % of a whole number of waves
QUEUED_SHARE = 0.8       # achieved concurrency below 80 % of C: requests waited


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
    ev = [f"plateau ~{sweep.plateau.throughput:,.0f} tok/s from C={n} (from level summaries: no per-request "
          "times, so the decoding batch is unknown)"]
    waves = _waves(top, n)
    if waves:
        ev.append(f"burst mode: wall times are {', '.join(f'{r:.2f}' for r in waves)} x the first "
                  f"({top[0].wall_s:.1f} s) for {', '.join(f'{conc(lv) / n:g}' for lv in top if lv.mode == 'burst')} "
                  f"x its {n} requests: waves of {n}")
    queued = _queued(top)
    for lv in queued:
        ev.append(f"at C={conc(lv)} only {lv.achieved_concurrency:,.0f} requests were in flight on average "
                  f"(Little's law): the other {conc(lv) - lv.achieved_concurrency:,.0f} waited")
    if not waves and not queued:
        return Verdict("insufficient_data", "the summaries cannot say why throughput stopped growing", "low", ev,
                       to_separate=["import per-request results (e.g. vLLM's detailed results) or measure with "
                                    "plateau sweep: the decoding batch tells a cap from compute"])
    confidence: Confidence = "medium" if waves and len(waves) >= 3 else "low"
    try_cap = (flag(sweep.engine, "cap") or GENERIC_CAP).format(n=2 * n)
    return Verdict(
        "admission_cap", f"admission cap at about {n} running requests (from level summaries)", confidence, ev,
        estimated_cap=n, suggestions=[f"try {try_cap} (check the KV cache has room for twice the sequences)"],
        to_separate=["per-request results or /metrics: a KV cache holding a fixed number of sequences queues "
                     "requests the same way; the running count or the decoding batch tells them apart"])
