"""The steady-level stop rule: precision after two turnovers, or one when growth is unambiguous."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.convergence import PrecisionRule, Progress
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

from support.builders import lockstep_records

WORKERS = 4


def lockstep(cycles: int, *, prefill_s: float, decode_s: float, tokens: int = 100) -> list[RequestRecord]:
    """Four workers in lock step: each cycle a prefill phase (no tokens), then ``tokens`` over ``decode_s``."""
    return lockstep_records([tokens] * cycles, workers=WORKERS, prefill_s=prefill_s, decode_s=decode_s)


def _done(rule: PrecisionRule, records: list[RequestRecord]) -> bool:
    until = max(r.end_ns for r in records)
    return rule.done(records, elapsed_s=until / NS, workers=WORKERS, complete_until_ns=until)


def test_one_turnover_is_not_enough_without_a_bar() -> None:
    # A loose precision, so only the turnover count decides.
    rule = PrecisionRule(precision=0.9, min_s=1.0, max_s=600.0)
    assert not _done(rule, lockstep(1, prefill_s=1.0, decode_s=10.0))
    assert _done(rule, lockstep(2, prefill_s=1.0, decode_s=10.0))


def test_a_lock_step_level_is_precise_once_its_window_holds_three_whole_waves() -> None:
    # Identical waves: batches closed on whole waves agree exactly, so three of them settle the level.
    # Cut into ten equal sub-windows, the same windows read the prefill/decode pattern (tens of %).
    rule = PrecisionRule(precision=0.02, min_s=1.0, max_s=600.0)
    assert not _done(rule, lockstep(3, prefill_s=3.0, decode_s=7.0))   # a 20 s window: two waves
    assert _done(rule, lockstep(4, prefill_s=3.0, decode_s=7.0))
    ten_cycles = lockstep(10, prefill_s=3.0, decode_s=7.0)
    until = max(r.end_ns for r in ten_cycles)
    assert rule.ci_rel(ten_cycles, workers=WORKERS, complete_until_ns=until) == 0.0


def test_clear_growth_ends_after_one_turnover_charged_with_a_prefill_phase() -> None:
    # One turnover: 400 tokens over the 10 s decode phase = 40 tok/s; a full cycle (1 s prefill) gives
    # 400 / 11 = 36.4 tok/s. Charged one prefill phase (the longest TTFT, 1 s) the worst case is 36.4.
    records = lockstep(1, prefill_s=1.0, decode_s=10.0)
    assert _done(PrecisionRule(precision=0.02, min_s=1.0, max_s=600.0, clear_above=30.0), records)
    # A bar above the full-cycle figure is not cleared, though the decode phase alone (40) would clear it.
    assert not _done(PrecisionRule(precision=0.02, min_s=1.0, max_s=600.0, clear_above=37.0), records)
    # A long prefill phase (prefill-first engines) is charged in full: 400 / (10 + 8) = 22 tok/s.
    slow_prefill = lockstep(1, prefill_s=8.0, decode_s=10.0)
    assert not _done(PrecisionRule(precision=0.02, min_s=1.0, max_s=600.0, clear_above=30.0), slow_prefill)


def test_clear_growth_still_needs_the_minimum_window() -> None:
    records = lockstep(1, prefill_s=1.0, decode_s=10.0)
    assert not _done(PrecisionRule(precision=0.02, min_s=20.0, max_s=600.0, clear_above=1.0), records)


def test_the_replay_index_reads_what_the_finished_records_give_at_every_check() -> None:
    # A simulated steady level, then at many checks: the index's progress against the records finished
    # by then, through the rule's own estimate (the window ends where the token count is complete).
    import numpy as np

    from plateau_bench.analysis.convergence import ReplayIndex
    from plateau_bench.sim.level import simulate_level
    from plateau_bench.sim.presets import get_preset
    from plateau_bench.spec import LevelSpec, WorkloadSpec

    level = LevelSpec(mode="steady", concurrency=48, duration_s=60.0)
    records = simulate_level(get_preset("seed-b-fp4"), level, WorkloadSpec(input_len=128, output_len=64)).records
    by_end = sorted(records, key=lambda r: r.end_ns)
    index = ReplayIndex(by_end)
    ends = np.array([r.end_ns for r in by_end])
    rule = PrecisionRule(precision=0.0, min_s=1.0, max_s=600.0, min_turnover=1.0)
    compared = 0
    for t in np.linspace(0.5, 60, 40) * NS:
        n = int(np.searchsorted(ends, t, side="right"))
        pending = [r.sent_ns for r in by_end[n:] if r.sent_ns <= t]
        complete = min(pending) if pending else int(t)
        fast, slow = index.after(n), Progress.of(by_end[:n])
        assert (fast.finished, fast.workers_started, fast.steady_start_ns, fast.ttft_max_ns, fast.last_ok_end_ns) == (
            slow.finished, slow.workers_started, slow.steady_start_ns, slow.ttft_max_ns, slow.last_ok_end_ns)
        assert fast.mean_ok_s == pytest.approx(slow.mean_ok_s)
        a = rule._estimate(fast, 48, complete, 1.0)
        b = rule._estimate(slow, 48, complete, 1.0)
        assert a == b
        compared += a is not None
    assert compared > 20


def test_the_monitors_check_gives_what_ci_rel_and_done_give_apart() -> None:
    rule = PrecisionRule(precision=0.05, min_s=1.0, max_s=600.0)
    for cycles in (1, 2, 6):
        records = lockstep(cycles, prefill_s=1.0, decode_s=10.0)
        until = max(r.end_ns for r in records)
        for elapsed in (until / NS, 601.0):
            apart = (rule.ci_rel(records, workers=WORKERS, complete_until_ns=until),
                     rule.done(records, elapsed_s=elapsed, workers=WORKERS, complete_until_ns=until))
            assert rule.check(records, elapsed_s=elapsed, workers=WORKERS, complete_until_ns=until) == apart
    # The cases differ: not enough turnovers, then a CI, then past the time limit.
    assert rule.check(lockstep(1, prefill_s=1.0, decode_s=10.0), elapsed_s=11.0, workers=WORKERS,
                      complete_until_ns=11 * NS) == (None, False)
    ci, _ = rule.check(lockstep(6, prefill_s=1.0, decode_s=10.0), elapsed_s=66.0, workers=WORKERS,
                       complete_until_ns=66 * NS)
    assert ci is not None


def test_only_a_stop_on_the_interval_may_cancel_the_requests_in_flight() -> None:
    records = lockstep(8, prefill_s=1.0, decode_s=10.0)
    loose = PrecisionRule(precision=0.9, min_s=1.0, max_s=600.0, drain=False)
    stop = loose.first_stop(records, workers=WORKERS, check_s=1.0)
    assert stop is not None and stop[1], "a stop on the interval: its window ends before anything in flight"
    assert loose.first_stop_s(records, workers=WORKERS, check_s=1.0) == stop[0]
    # Draining (the default) waits for them at the same stop.
    drained = PrecisionRule(precision=0.9, min_s=1.0, max_s=600.0, drain=True).first_stop(
        records, workers=WORKERS, check_s=1.0)
    assert drained == (stop[0], False)
    # After one turnover on a clear bar the window holds the first decode phase alone: it drains.
    clear = PrecisionRule(precision=0.02, min_s=1.0, max_s=600.0, clear_above=30.0, drain=False)
    one = clear.first_stop(records, workers=WORKERS, check_s=1.0)
    assert one is not None and not one[1] and one[0] < stop[0] + 11.0
    # The time limit: whatever the interval, the level drains.
    capped = PrecisionRule(precision=1e-9, min_s=1.0, max_s=30.0, drain=False).first_stop(
        records, workers=WORKERS, check_s=1.0)
    assert capped is not None and capped[0] >= 30.0 and not capped[1]
    assert not loose.may_cancel_in_flight(None, 10.0) and not loose.may_cancel_in_flight(0.95, 10.0)
    assert loose.may_cancel_in_flight(0.5, 10.0) and not loose.may_cancel_in_flight(0.5, 600.0)


def _done_at(rule: PrecisionRule, records: list[RequestRecord], t: float) -> bool:
    """The rule at ``t`` s into a level: the requests finished by then, the window complete up to the oldest
    one still in flight."""
    finished = [r for r in records if r.end_ns <= t * NS]
    pending = [r.sent_ns for r in records if r.end_ns > t * NS and r.sent_ns <= t * NS]
    return rule.done(finished, elapsed_s=t, workers=WORKERS, complete_until_ns=min(pending) if pending else int(t * NS))


def test_auto_level_time_stretches_a_level_with_no_estimate_while_its_server_answers() -> None:
    # Lock step with a 61 s cycle: nothing ends in the first minute; the estimate needs two turnovers.
    records = lockstep(8, prefill_s=1.0, decode_s=60.0)
    assert _done_at(PrecisionRule(precision=0.02, min_s=5.0, max_s=60.0), records, 60.0), "a hard minute"
    rule = PrecisionRule(precision=0.02, min_s=5.0, max_s=60.0, stretch_s=600.0, expect_cycle_s=50.0)
    assert not _done_at(rule, records, 60.0), "nothing ended yet, but within 1.5 expected cycles"
    assert not _done_at(rule, records, 110.0), "one wave ended 49 s ago: within 1.5 measured cycles"
    first = next(t for t in range(61, 601) if _done_at(rule, records, float(t)))
    finished = [r for r in records if r.end_ns <= first * NS]
    until = max(r.end_ns for r in finished)
    assert first < 600 and rule.ci_rel(finished, workers=WORKERS, complete_until_ns=until) is not None, \
        "it ends once it has an estimate, long before the bound"
    # No prediction and nothing ended in the minute: a server that does not answer is not held.
    assert _done_at(PrecisionRule(precision=0.02, min_s=5.0, max_s=60.0, stretch_s=600.0), records, 60.0)
    # A server that answered one wave, then fell silent for longer than 1.5 cycles, is not held either.
    one_wave = lockstep(1, prefill_s=1.0, decode_s=60.0)
    assert not _done_at(rule, one_wave, 100.0) and _done_at(rule, one_wave, 160.0)
    assert rule.bound_s == 600.0 and PrecisionRule(max_s=60.0).bound_s == 60.0
