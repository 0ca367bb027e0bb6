"""Plateau and knee detection, and the adaptive concurrency search that finds them.

Vocabulary (all pure functions of measured points ``(concurrency, throughput, ci_rel)``):

* **gain** of a level: its throughput over the throughput of the previous (lower) level, minus 1.
* A doubling is **flat** when its gain is below ``plateau_gain`` plus the measurement noise of the
  two levels (the root-sum-square of their relative 95 % confidence half-widths). Noise thus
  widens the threshold: a 4 % gain measured at +-3 % is not growth. A doubling that only **queued**
  is flat whatever its measured gain: the upper level decoded no larger a batch (requests past their
  first token, Little's law) while a third or more of its requests in flight waited for a first
  token. Output tok/s is the decoding batch over the time per token, so with the batch unchanged a
  gain can only be the step time drifting between the two windows (a shared machine), not the
  server scaling with load.
* The **plateau** is confirmed by two consecutive flat doublings (the first one proposes it, the
  next one confirms it; a confirmation that grows again cancels it), or by one flat doubling that
  shows the server refusing the extra load (**capped**), seen from both sides: the upper level's
  decoding concurrency (requests past their first token, Little's law) is no higher than the lower
  level's while a third or more of its requests in flight waited for a first token, and the server's
  own gauges (``/metrics``) show the same running maximum at both levels, requests waiting, and a KV
  cache not full (a full cache can thrash, and then a further doubling may fall). The server then
  runs the same batch at both levels, so a further doubling can only lengthen its queue: it is not
  measured. Without the server's gauges the second flat doubling is measured: from the client alone
  it is the evidence that tells a cap from a cache that fills (``diagnosis_cap``).
  Its throughput is the mean of the levels at or above the first flat level that are within
  ``plateau_gain`` of the best one or ran its decoding batch with only a longer queue (robust to a
  curve that falls after its peak, and to a shared machine's drift between same-batch levels, which
  would otherwise leave the luckiest window alone as the plateau).
* The **knee** is the smallest concurrency whose throughput reaches ``knee_fraction`` (95 %) of
  the plateau, interpolated linearly in log2(concurrency) between the two measured levels that
  bracket it. ``bracket`` names those levels, widened to the next ones where a level's confidence
  interval reaches the 95 % line; refinement (geometric bisection) narrows it.

``next_concurrency`` is the search as a state machine: given the points measured so far it says
what to measure next or why to stop, so the sweep loop holds no logic and the search is tested
on synthetic curves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from plateau_bench.result import Knee, LevelResult, Plateau, SearchSettings


@dataclass(frozen=True)
class Point:
    concurrency: int
    throughput: float
    ci_rel: float | None = None
    failed: bool = False
    decoding: float | None = None   # decoding concurrency (requests past their first token)
    achieved: float | None = None   # achieved concurrency (requests in flight)
    peak: int | None = None         # the most requests decoding at once
    running_max: float | None = None   # the server's gauges (/metrics), when scraped
    waiting_mean: float | None = None
    kv_usage_max: float | None = None


# The search settings are part of the saved result (``SweepSettings.search``).
SearchConfig = SearchSettings


@dataclass(frozen=True)
class Decision:
    concurrency: int | None            # next level to measure; None = stop
    phase: str                         # "grow" | "confirm" | "refine" | "done"
    reason: str = ""


def _sorted_ok(points: Sequence[Point]) -> list[Point]:
    best: dict[int, Point] = {}
    for p in points:
        if not p.failed:
            best[p.concurrency] = p
    return [best[c] for c in sorted(best)]


def noise(a: Point, b: Point) -> float:
    """Combined relative noise of two levels (0 when unknown, e.g. burst levels)."""
    return math.sqrt((a.ci_rel or 0.0) ** 2 + (b.ci_rel or 0.0) ** 2)


def is_flat(lower: Point, upper: Point, plateau_gain: float) -> bool:
    if queued_only(lower, upper):
        return True
    if lower.throughput <= 0:
        return upper.throughput <= 0
    gain = upper.throughput / lower.throughput - 1.0
    return gain < plateau_gain + noise(lower, upper)


# A capped doubling: the decoding batch grew by less than this share (or, for a small batch, by less than
# DECODING_JITTER requests, up to SMALL_BATCH_GROWTH of it), and at least this share of the requests in flight
# at the upper level had not yet got a first token.
CAPPED_DECODING_GROWTH = 0.02
# A time-averaged batch moves by about a tenth of a request from window to window: a cap of 4 read 3.7 in one
# window and 3.8 in the next, 2.7 % apart. A doubling that admits more requests adds at least half a request.
DECODING_JITTER = 0.15
SMALL_BATCH_GROWTH = 0.05
CAPPED_WAITING_SHARE = 1 / 3
KV_FULL = 0.95
SAME_BATCH_SHRINK = 0.05
HELD_FULL = 0.9   # a batch held at a cap: its time-average at least this share of its most-at-once
QUEUED_SHARE = 0.5   # a queue behind a cap: at least this share of the requests in flight beyond the batch


def queued_only(lower: Point, upper: Point) -> bool:
    """Whether, seen from the client, the doubling from ``lower`` to ``upper`` only added waiting requests.

    No more were admitted when the time-average batch grew by no more than its jitter, or when both levels
    held the same most-at-once (a fixed cap), the lower one at least ``HELD_FULL`` of it on average, and the
    upper's average stayed within it: at the cap the batch has short gaps (a slot waits for its worker's next
    request), which a queue fills, so the average rises toward the cap without a request more admitted (a
    cap of 16 read 15.06, then 15.37 with 15 waiting). A batch far below its most-at-once (a front end
    feeding it slower than it decodes) is not held by a cap, and its growth counts."""
    if lower.decoding is None or upper.decoding is None or upper.achieved is None or lower.decoding <= 0:
        return False
    allowance = max(CAPPED_DECODING_GROWTH * lower.decoding, min(DECODING_JITTER, SMALL_BATCH_GROWTH * lower.decoding))
    same_cap = (lower.peak is not None and lower.peak == upper.peak and upper.decoding <= lower.peak
                and lower.decoding >= HELD_FULL * lower.peak)
    no_more_admitted = upper.decoding <= lower.decoding + allowance or same_cap
    waiting = upper.achieved - upper.decoding
    return no_more_admitted and waiting >= CAPPED_WAITING_SHARE * upper.achieved


def same_batch_queued(a: Point, b: Point) -> bool:
    """Whether two levels ran the server in the same state: the higher one only added waiting requests
    (``queued_only``) and decoded no more than ``SAME_BATCH_SHRINK`` less (a time-averaged batch moves by a
    tenth of a request from window to window; fewer decoding is a cache thrashing, which is real). Their
    throughputs then differ only by the step time drifting between windows."""
    lower, upper = sorted((a, b), key=lambda p: p.concurrency)
    if lower is upper or not queued_only(lower, upper) or upper.decoding is None or lower.decoding is None:
        return False
    return upper.decoding >= lower.decoding * (1 - SAME_BATCH_SHRINK)


def capped(lower: Point, upper: Point) -> bool:
    """Whether the doubling from ``lower`` to ``upper`` only added waiting requests, seen from both sides
    (see the docstring)."""
    lo_run, hi_run = lower.running_max, upper.running_max
    if not queued_only(lower, upper) or lo_run is None or hi_run is None or lo_run <= 0:
        return False
    same_batch = abs(hi_run - lo_run) <= max(1.0, CAPPED_DECODING_GROWTH * lo_run)
    kv_room = upper.kv_usage_max is None or upper.kv_usage_max < KV_FULL
    return same_batch and (upper.waiting_mean or 0.0) > 0 and kv_room


def queued_behind(gauges: Mapping[str, float], held_running: float, scrapes: int, concurrency: int) -> bool:
    """Whether a level's gauges since its concurrency was reached (``telemetry.summary`` values, at least
    ``scrapes`` scrapes) show it only queued behind the batch of the level it doubled: no more running at most
    than that level's most (``held_running``, within the same allowance as ``capped``), the engine's queue
    holding at least half the requests in flight beyond it, and the KV cache not full (a full cache holds the
    batch too, and what it does with more is the question). Requests in flight that the engine neither runs
    nor queues (a front end feeding it no faster) are not a cap's queue. The running count may dip between
    scrapes (a prefill-first engine admits in rounds)."""
    high, waiting, kv = gauges.get("running_max"), gauges.get("waiting_mean"), gauges.get("kv_usage_max")
    if high is None or waiting is None or gauges.get("samples", 0.0) < scrapes or held_running <= 0:
        return False
    held = abs(high - held_running) <= max(1.0, CAPPED_DECODING_GROWTH * held_running)
    queue = waiting >= QUEUED_SHARE * max(concurrency - held_running, 1.0)
    return held and queue and (kv is None or kv < KV_FULL)


def _doubling_chain(points: Sequence[Point], start: int) -> list[Point]:
    """The levels of the doubling phase: start, 2*start, 4*start, ... as far as measured."""
    by_c = {p.concurrency: p for p in points}
    chain: list[Point] = []
    c = start
    while c in by_c:
        chain.append(by_c[c])
        c *= 2
    return chain


def _half_level(pts: Sequence[Point], p: Point) -> Point | None:
    """The measured level closest below half of ``p``'s concurrency (the "doubling" partner)."""
    below = [q for q in pts if q.concurrency * 2 <= p.concurrency]
    return below[-1] if below else None


def find_plateau(points: Sequence[Point], plateau_gain: float = 0.05) -> Plateau | None:
    """The plateau of a curve, or None while throughput is still growing.

    Works on any set of levels (a fixed grid, or a doubling chain with refinement points in
    between): each level is compared with its doubling partner (the measured level nearest
    below half its concurrency), so closely spaced refinement levels never look flat. The
    plateau starts at the partner of the earliest flat pair after which every pair is flat;
    ``reached`` needs two such flat pairs.
    """
    pts = _sorted_ok(points)
    pairs: list[tuple[Point, Point, bool]] = []
    for p in pts:
        q = _half_level(pts, p)
        if q is not None:
            pairs.append((q, p, is_flat(q, p, plateau_gain)))
    if not pairs or not pairs[-1][2]:
        return None
    first = len(pairs) - 1
    while first > 0 and pairs[first - 1][2]:
        first -= 1
    start = pairs[first][0]
    top = [p for p in pts if p.concurrency >= start.concurrency]
    peak = max(top, key=lambda p: p.throughput)
    flat_top = [p for p in top if p.throughput >= peak.throughput * (1 - plateau_gain) or same_batch_queued(p, peak)]
    last_lower, last_upper, _ = pairs[-1]
    return Plateau(
        throughput=sum(p.throughput for p in flat_top) / len(flat_top),
        concurrency=start.concurrency,
        reached=len(pairs) - first >= 2 or capped(last_lower, last_upper),
        levels=tuple(p.concurrency for p in flat_top),
    )


def find_knee(points: Sequence[Point], plateau: Plateau, fraction: float = 0.95, *,
              by_interval: bool = True) -> Knee:
    """Smallest concurrency reaching ``fraction`` of the plateau, log2-interpolated.

    ``by_interval``: the bracket also takes in the neighbouring levels whose confidence interval reaches
    the target (a level reading 0.1 % over it, within a 2 % interval, does not place the knee below
    it); the search's bisection (``next_concurrency``) uses the levels' own readings."""
    pts = _sorted_ok(points)
    target = fraction * plateau.throughput
    for i, p in enumerate(pts):
        if p.throughput >= target:
            if i == 0:
                return Knee(float(p.concurrency), target, (p.concurrency, p.concurrency), plateau.reached)
            lo = pts[i - 1]
            x0, x1 = math.log2(lo.concurrency), math.log2(p.concurrency)
            frac = (target - lo.throughput) / (p.throughput - lo.throughput)
            c = 2 ** (x0 + frac * (x1 - x0))
            bracket = _interval_bracket(pts, i, target) if by_interval else (lo.concurrency, p.concurrency)
            return Knee(c, target, bracket, plateau.reached)
    last = pts[-1]
    return Knee(float(last.concurrency), target, (last.concurrency, last.concurrency), False)


def _interval_bracket(pts: list[Point], first_above: int, target: float) -> tuple[int, int]:
    """The levels around the knee whose intervals lie wholly below and wholly above ``target``."""
    lo, hi = first_above - 1, first_above
    while lo > 0 and pts[lo].throughput * (1 + (pts[lo].ci_rel or 0.0)) >= target:
        lo -= 1
    while hi < len(pts) - 1 and pts[hi].throughput * (1 - (pts[hi].ci_rel or 0.0)) < target:
        hi += 1
    return pts[lo].concurrency, pts[hi].concurrency


GOALS = ("verdict", "knee", "curve")
CURVE_BRACKET = 1.1   # --goal curve: the knee bracketed to within 10 %


def next_concurrency(points: Sequence[Point], cfg: SearchConfig) -> Decision:
    """The adaptive search: double until flat twice, then (``--goal knee``) bisect the knee's bracket
    ``refine_steps`` times, or (``--goal curve``) until it is within 10 %; ``--goal verdict`` stops at the
    confirmed plateau, the knee bracketed by the last two doublings."""
    pts = _sorted_ok(points)
    if any(p.failed for p in points) and points and points[-1].failed:
        return Decision(None, "done", f"level C={points[-1].concurrency} failed")
    chain = _doubling_chain(pts, cfg.start)
    if not chain:
        return Decision(cfg.start, "grow", "first level")
    flat_steps = [is_flat(chain[i - 1], chain[i], cfg.plateau_gain) for i in range(1, len(chain))]
    confirmed = any(flat_steps[i] and flat_steps[i + 1] for i in range(len(flat_steps) - 1)) or (
        bool(flat_steps) and flat_steps[-1] and capped(chain[-2], chain[-1]))
    if not confirmed:
        nxt = chain[-1].concurrency * 2
        proposed = bool(flat_steps) and flat_steps[-1]
        if nxt > cfg.max_concurrency and not proposed:
            return Decision(None, "done", f"max concurrency {cfg.max_concurrency} reached before a plateau")
        if nxt <= cfg.max_concurrency:
            phase = "confirm" if proposed else "grow"
            return Decision(nxt, phase, "proposed plateau, confirming" if proposed else "still growing")
        # A plateau proposed at the concurrency limit cannot be confirmed; still refine its knee.
    plateau = find_plateau(pts, cfg.plateau_gain)
    if plateau is None:  # refinement levels never break a confirmed doubling plateau; be safe
        return Decision(None, "done", "plateau lost after refinement")
    if cfg.goal == "verdict":
        return Decision(None, "done", "plateau confirmed: the verdict and the plateau stand (--goal knee refines the "
                                      "knee between the last two doublings)")
    refined = [p for p in pts if p.concurrency not in {q.concurrency for q in chain}]
    knee = find_knee(pts, plateau, cfg.knee_fraction, by_interval=False)
    lo, hi = knee.bracket
    if cfg.goal == "curve":
        if len(refined) >= 2 * cfg.refine_steps or hi <= lo * CURVE_BRACKET:
            return Decision(None, "done", "plateau found and the knee bracketed within 10 %")
    elif len(refined) >= cfg.refine_steps:
        return Decision(None, "done", "plateau found and knee refined")
    if hi - lo <= 1 or hi <= lo:
        if lo == hi and lo > 1 and lo == pts[0].concurrency:
            return Decision(None, "done", "knee at the lowest measured level")
        return Decision(None, "done", "plateau confirmed and knee located to one level")
    mid = round(math.sqrt(lo * hi))
    mid = min(max(mid, lo + 1), hi - 1)
    if any(p.concurrency == mid for p in pts):
        return Decision(None, "done", "plateau confirmed and knee refined")
    return Decision(mid, "refine", f"refining the knee between C={lo} and C={hi}")


def point_of(level: LevelResult) -> Point:
    """A level as a point of the throughput curve."""
    return Point(concurrency=level.concurrency or 0, throughput=level.output_throughput,
                 ci_rel=level.throughput_ci_rel, failed=level.level_failed,
                 decoding=level.decoding_concurrency if level.completed else None,
                 achieved=level.achieved_concurrency if level.completed else None,
                 peak=level.peak_decoding if level.completed and level.peak_decoding else None,
                 running_max=level.telemetry.running_max, waiting_mean=level.telemetry.waiting_mean,
                 kv_usage_max=level.telemetry.kv_usage_max)


def plateau_and_knee(levels: Sequence[LevelResult], search: SearchSettings) -> tuple[Plateau | None, Knee | None]:
    """The plateau and knee of a run's closed-loop levels under its own search settings."""
    points = [point_of(lv) for lv in levels if lv.concurrency and lv.mode != "rate"]
    plateau = find_plateau(points, search.plateau_gain)
    knee = find_knee(points, plateau, search.knee_fraction) if plateau else None
    return plateau, knee
