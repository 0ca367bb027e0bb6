"""Plateau and knee detection on synthetic curves, and the adaptive search driven by them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.analysis.plateau import (
    Point,
    SearchConfig,
    find_knee,
    find_plateau,
    next_concurrency,
    queued_behind,
    queued_only,
)


def capped(cap: int, t0: float = 14.0, a: float = 0.195):
    def f(c: int) -> float:
        b = min(c, cap)
        return b * 1000 / (t0 + a * b)
    return f


def drive(curve, cfg: SearchConfig = SearchConfig(), noise=lambda c: 0.0) -> list[Point]:
    pts: list[Point] = []
    for _ in range(60):
        d = next_concurrency(pts, cfg)
        if d.concurrency is None:
            return pts
        pts.append(Point(d.concurrency, curve(d.concurrency) * (1 + noise(d.concurrency)), 0.01))
    raise AssertionError("search did not stop")


def test_capped_curve_plateau_at_cap_and_knee_below() -> None:
    pts = drive(capped(256))
    pl = find_plateau(pts)
    assert pl is not None and pl.reached
    assert pl.concurrency == 256
    assert pl.throughput == pytest.approx(capped(256)(256), rel=0.01)
    knee = find_knee(pts, pl)
    # 95 % of 4,000 tok/s on this curve is reached at C ~ 205 (solved by hand: 1000C/(14+0.195C) = 3800).
    assert 195 <= knee.concurrency <= 215
    assert knee.bracket[0] <= knee.concurrency <= knee.bracket[1]
    assert len(pts) <= 15


def test_the_knee_bracket_takes_in_a_level_whose_interval_reaches_the_95_percent_line() -> None:
    # C=256 reads 0.1 % over the line (95 % of the 4,672 plateau = 4,438) within a 1.9 % interval.
    pts = [Point(128, 4_088.0, 0.026), Point(256, 4_443.0, 0.019), Point(512, 4_623.0, 0.02),
           Point(1024, 4_720.0, 0.017)]
    pl = find_plateau(pts)
    assert pl is not None and pl.throughput * 0.95 < 4_443.0 < pl.throughput * 0.95 * 1.019
    assert find_knee(pts, pl).bracket == (128, 512)
    assert find_knee(pts, pl, by_interval=False).bracket == (128, 256)
    exact = [Point(p.concurrency, p.throughput, 0.0) for p in pts]   # no interval: the readings alone
    assert find_knee(exact, pl).bracket == (128, 256)


def test_seed_a_fixed_grid() -> None:
    seed = [Point(1, 71), Point(256, 3962.8), Point(512, 3988.1), Point(768, 3991.2), Point(1024, 3997.0)]
    pl = find_plateau(seed)
    assert pl is not None and pl.reached and pl.concurrency == 256
    assert pl.throughput == pytest.approx(3984.8, rel=1e-3)


def test_no_plateau_while_growing() -> None:
    pts = [Point(c, 10.0 * c) for c in (1, 2, 4, 8, 16)]
    assert find_plateau(pts) is None
    d = next_concurrency(pts, SearchConfig())
    assert d.concurrency == 32 and d.phase == "grow"


def test_max_concurrency_stops_before_plateau() -> None:
    pts = drive(lambda c: 10.0 * c, SearchConfig(max_concurrency=64))
    assert max(p.concurrency for p in pts) == 64
    assert find_plateau(pts) is None


def test_single_level() -> None:
    assert find_plateau([Point(8, 100.0)]) is None
    d = next_concurrency([Point(1, 100.0)], SearchConfig())
    assert d.concurrency == 2


def test_falling_after_peak_is_a_plateau_at_the_peak() -> None:
    curve = {1: 100.0, 2: 190.0, 4: 360.0, 8: 600.0, 16: 610.0, 32: 450.0, 64: 300.0}
    pts = [Point(c, t) for c, t in curve.items()]
    pl = find_plateau(pts)
    assert pl is not None and pl.reached
    assert pl.concurrency == 8
    assert pl.throughput == pytest.approx(605.0)


def test_proposed_plateau_that_grows_again_is_cancelled() -> None:
    curve = {1: 100.0, 2: 200.0, 4: 202.0, 8: 400.0, 16: 800.0}
    pl = find_plateau([Point(c, t) for c, t in curve.items()])
    assert pl is None
    d = next_concurrency([Point(c, t) for c, t in curve.items()], SearchConfig())
    assert d.concurrency == 32 and d.phase == "grow"


def test_noise_widens_the_flat_threshold() -> None:
    # +6 % looks like growth when exact, but not when each level is +-5 %.
    exact = [Point(1, 100.0), Point(2, 106.0)]
    noisy = [Point(1, 100.0, 0.05), Point(2, 106.0, 0.05)]
    assert next_concurrency(exact, SearchConfig()).phase == "grow"
    assert next_concurrency(noisy, SearchConfig()).phase == "confirm"


def test_failed_last_level_stops_the_search() -> None:
    d = next_concurrency([Point(1, 100.0), Point(2, 0.0, failed=True)], SearchConfig())
    assert d.concurrency is None and "failed" in d.reason


@given(cap=st.integers(min_value=2, max_value=2048), jitter=st.floats(min_value=0.0, max_value=0.015))
def test_search_finds_any_cap(cap: int, jitter: float) -> None:
    curve = capped(cap, t0=10.0, a=0.01)
    pts = drive(curve, noise=lambda c: jitter * math.sin(c))
    pl = find_plateau(pts)
    assert pl is not None
    # The plateau starts within one doubling of the cap, and the knee's bracket starts at or below it.
    assert cap / 2 <= pl.concurrency <= 2 * cap
    knee = find_knee(pts, pl)
    assert knee.bracket[0] <= cap


def _level_point(c: int, tok_s: float, decoding: float, achieved: float, running: float | None,
                 waiting: float | None = None, kv: float | None = None) -> Point:
    return Point(c, tok_s, 0.01, decoding=decoding, achieved=achieved, running_max=running, waiting_mean=waiting,
                 kv_usage_max=kv)


def test_a_capped_doubling_confirms_the_plateau_without_a_second_one() -> None:
    from plateau_bench.analysis.plateau import capped as is_capped

    below = [Point(c, 15.0 * c, 0.01, decoding=c, achieved=c, running_max=c, waiting_mean=0.0)
             for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    at_cap = _level_point(256, 3980.0, 250.0, 256.0, 256.0, 0.0, 0.2)
    past = _level_point(512, 3985.0, 251.0, 510.0, 256.0, 250.0, 0.2)
    pts = [*below, at_cap, past]
    assert is_capped(at_cap, past)
    d = next_concurrency(pts, SearchConfig(goal="knee"))
    assert d.phase == "refine"        # no C=1024: the server showed it admits no more
    # --goal verdict (the default): the confirmed plateau ends the search, the knee bracketed by the doublings
    d = next_concurrency(pts, SearchConfig())
    assert d.concurrency is None and "plateau confirmed" in d.reason
    plateau = find_plateau(pts)
    assert plateau is not None and plateau.reached and plateau.concurrency == 256
    # Without the server's gauges, or with a full KV cache, or with the batch still growing, it measures
    # the second doubling as before.
    for other in (_level_point(512, 3985.0, 251.0, 510.0, None),
                  _level_point(512, 3985.0, 251.0, 510.0, 256.0, 250.0, 0.99),
                  _level_point(512, 3985.0, 300.0, 510.0, 300.0, 200.0, 0.2),
                  _level_point(512, 3985.0, 251.0, 300.0, 256.0, 40.0, 0.2)):
        assert not is_capped(at_cap, other)
        d = next_concurrency([*below, at_cap, other], SearchConfig())
        assert (d.concurrency, d.phase) == (1024, "confirm")


def test_a_doubling_that_only_queued_is_flat_whatever_its_measured_gain() -> None:
    # llama.cpp --parallel 4 on a shared CPU: C=16 measured 11 % above C=8 with the same 3.9 requests
    # decoding and three quarters of the requests waiting. The batch did not grow, so neither did the
    # server: the plateau starts at the cap (C=4 to C=8 gained 3 %), not at C=16.
    lows = [_level_point(1, 138.0, 0.9, 0.9, 1.0), _level_point(2, 158.0, 1.9, 1.9, 2.0),
            _level_point(4, 232.0, 3.7, 3.9, 4.0, 0.1)]
    at_8, at_16 = _level_point(8, 240.0, 3.9, 7.9, 4.0, 4.0), _level_point(16, 266.0, 3.9, 15.8, 4.0, 12.0)
    at_32 = _level_point(32, 242.0, 3.8, 31.5, 4.0, 28.0)
    plateau = find_plateau([*lows, at_8, at_16, at_32])
    assert plateau is not None and plateau.reached and plateau.concurrency == 4
    # Its throughput is every level that ran the cap's batch with a longer queue, not the luckiest window
    # (C=16 alone is within 5 % of itself); C=4, still filling its batch (3.7), is not among them.
    assert plateau.levels == (8, 16, 32)
    assert plateau.throughput == pytest.approx((240.0 + 266.0 + 242.0) / 3)
    # The same gain with the batch growing (no cap: more requests decode at once) is growth.
    grown = _level_point(16, 266.0, 7.5, 15.8, 8.0, 0.5)
    assert find_plateau([*lows, at_8, grown]) is None
    # And growth without the client's decoding figures (a fixed grid read back) is judged on tok/s alone.
    assert find_plateau([Point(8, 240.0, 0.01), Point(16, 266.0, 0.01)]) is None


def test_the_gauges_say_a_level_only_queued_when_no_more_ran_than_below_and_the_engine_queued_the_rest() -> None:
    def at_512(gauges: dict[str, float]) -> bool:   # a level of 512 doubling one that ran 256
        return queued_behind(gauges, 256.0, scrapes=5, concurrency=512)

    held = {"running_min": 256.0, "running_max": 256.0, "waiting_mean": 200.0, "kv_usage_max": 0.4, "samples": 5.0}
    assert at_512(held)
    assert not at_512({**held, "samples": 4.0})   # too few scrapes yet
    assert not at_512({**held, "running_max": 300.0})   # more were admitted
    assert not at_512({**held, "waiting_mean": 0.0})   # nothing waits
    assert not at_512({**held, "waiting_mean": 100.0})   # nor most
    assert at_512({**held, "running_min": 200.0})   # a batch admitted in rounds dips between them
    assert not at_512({**held, "kv_usage_max": 0.97})   # the cache holds it
    assert at_512({k: v for k, v in held.items() if k != "kv_usage_max"})
    assert not at_512({"samples": 9.0})   # no gauges at all


def test_a_small_capped_batch_moving_by_a_tenth_of_a_request_is_still_capped() -> None:
    from plateau_bench.analysis.plateau import capped as is_capped

    # llama.cpp --parallel 4 with /metrics, warm levels: C=4 decoded 3.7 on average, C=8 3.8 (2.7 % more,
    # the window's jitter), running pinned at 4 with requests waiting. The search and the saved levels must
    # both read that as the cap.
    at_cap = _level_point(4, 232.0, 3.7, 3.9, 4.0, 0.1)
    past = _level_point(8, 236.0, 3.8, 7.9, 4.0, 4.0)
    assert queued_only(at_cap, past) and is_capped(at_cap, past)
    plateau = find_plateau([_level_point(1, 70.0, 0.9, 0.9, 1.0), _level_point(2, 130.0, 1.9, 1.9, 2.0), at_cap, past])
    assert plateau is not None and plateau.reached and plateau.concurrency == 4
    # A third of a request more is admission, not jitter; and a large batch keeps the 2 % allowance.
    assert not queued_only(at_cap, _level_point(8, 236.0, 4.0, 7.9, 4.0, 4.0))
    big = _level_point(64, 900.0, 60.0, 63.0, 64.0, 1.0)
    assert not queued_only(big, _level_point(128, 950.0, 61.5, 127.0, 64.0, 60.0))
    # A batch of a fraction of a request (long prompts, few tokens out) keeps a relative allowance too.
    assert not queued_only(_level_point(4, 50.0, 0.1, 3.9, 4.0, 0.0), _level_point(8, 95.0, 0.2, 7.9, 8.0, 0.0))


def test_a_queue_filling_a_caps_gaps_is_not_admission() -> None:
    """vLLM-CPU with --max-num-seqs 16: C=16 decoded 15.06 on average (a slot waits for its worker's next
    request), C=32 15.37 with 15 waiting, at most 16 at once at both. The rise is 0.01 request past the
    jitter allowance; the same most-at-once, held at 94 % by the lower level, says no request more was
    admitted, and the 25 % more tok/s of that window is not growth."""
    at_cap = Point(16, 4071.0, 0.12, decoding=15.06, achieved=15.95, peak=16, running_max=16.0, waiting_mean=0.0)
    past = Point(32, 5086.0, 0.04, decoding=15.37, achieved=31.95, peak=16, running_max=16.0, waiting_mean=14.9)
    assert queued_only(at_cap, past)
    # Without the most-at-once (a file that lacks it), the jitter allowance alone decides, as before.
    assert not queued_only(Point(16, 4071.0, 0.12, decoding=15.06, achieved=15.95),
                           Point(32, 5086.0, 0.04, decoding=15.37, achieved=31.95))
    # A batch far below its most-at-once (a front end feeding it slower than it decodes) grows for real.
    fed = Point(64, 3000.0, 0.02, decoding=40.0, achieved=63.0, peak=64)
    assert not queued_only(fed, Point(128, 3700.0, 0.02, decoding=55.0, achieved=120.0, peak=64))
