"""Load loops against an in-process sender with a known service time (asyncio.sleep)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from plateau_bench.analysis.health import summarize_health
from plateau_bench.driver.health import HealthSampler
from plateau_bench.driver.load import run_level
from plateau_bench.driver.load_state import LoadProgress
from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.result import ClientHealth
from plateau_bench.spec import LevelSpec
from plateau_bench.workload.arrivals import arrival_offsets_ns
from plateau_bench.workload.feed import ListFeed
from plateau_bench.workload.prompts import Prompt

PROMPTS = [Prompt(f"prompt {i}", 10 + i, 5) for i in range(7)]


class FakeSender:
    """Serves each request in ``service_s``; records what the load loop did."""

    def __init__(self, t0_ns: int, service_s: float = 0.05, *, swallow_cancel: bool = False) -> None:
        self.t0_ns = t0_ns
        self.service_s = service_s
        self.swallow_cancel = swallow_cancel
        self.in_flight = 0
        self.seen_in_flight: list[int] = []   # in flight when each request was sent (itself included)
        self.calls: list[dict[str, object]] = []

    def now(self) -> int:
        return time.monotonic_ns() - self.t0_ns

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        self.in_flight += 1
        self.seen_in_flight.append(self.in_flight)
        self.calls.append({"index": index, "prompt": prompt, "worker": worker, "warmup": warmup})
        sent = self.now()
        try:
            await asyncio.sleep(self.service_s)
        except asyncio.CancelledError:
            if not self.swallow_cancel:
                raise
            return RequestRecord(index=index, worker=worker, scheduled_ns=scheduled_ns, sent_ns=sent,
                                 end_ns=self.now(), error=ErrorClass.CANCELLED, warmup=warmup)
        finally:
            self.in_flight -= 1
        end = self.now()
        return RequestRecord(index=index, worker=worker, scheduled_ns=scheduled_ns, sent_ns=sent, end_ns=end,
                             first_token_ns=sent + (end - sent) // 2, prompt_tokens=prompt_tokens,
                             output_tokens=max_tokens, warmup=warmup)


def _level(**kw: object) -> LevelSpec:
    return LevelSpec(**kw)  # type: ignore[arg-type]


async def test_burst_sends_everything_at_once() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0)
    records = await run_level(sender, PROMPTS, _level(mode="burst", concurrency=16), t0_ns=t0)
    assert len(records) == 16
    assert max(sender.seen_in_flight) == 16
    assert len({r.scheduled_ns for r in records}) == 1
    assert sorted(r.index for r in records) == list(range(16))
    assert sorted(r.worker for r in records) == list(range(16))


async def test_burst_with_more_requests_than_workers_and_prompts_cycle() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.01)
    records = await run_level(sender, PROMPTS, _level(mode="burst", concurrency=4, num_requests=30), t0_ns=t0)
    assert len(records) == 30
    assert max(sender.seen_in_flight) == 4
    assert all(c["prompt"] == PROMPTS[int(c["index"]) % len(PROMPTS)].text for c in sender.calls)  # type: ignore[call-overload]
    assert {r.prompt_tokens for r in records} == {p.prompt_tokens for p in PROMPTS}


async def test_closed_loop_keeps_exactly_c_in_flight() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.01)
    progress = LoadProgress()
    records = await run_level(sender, PROMPTS, _level(mode="steady", concurrency=5, num_requests=60), t0_ns=t0,
                              progress=progress)
    assert len(records) == 60
    assert sender.seen_in_flight[:5] == [1, 2, 3, 4, 5]
    assert set(sender.seen_in_flight[5:]) == {5}
    assert progress.peak_in_flight == 5 and progress.in_flight == 0 and progress.phase == "done"
    by_worker: dict[int, list[RequestRecord]] = {}
    for r in sorted(records, key=lambda r: r.sent_ns):
        by_worker.setdefault(r.worker, []).append(r)
    for rs in by_worker.values():  # each worker sends its next request only after the last one ended
        assert all(a.end_ns <= b.sent_ns for a, b in itertools.pairwise(rs))
        assert all(b.scheduled_ns >= a.end_ns for a, b in itertools.pairwise(rs))


async def test_duration_stops_new_sends_and_drains() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.08)
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=3, duration_s=0.2)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, progress=progress)
    deadline = int(0.2 * 1e9)
    assert records and all(r.scheduled_ns < deadline for r in records)
    assert max(r.end_ns for r in records) > deadline  # in-flight requests were allowed to finish
    assert len(records) == progress.sent == progress.completed
    assert all(r.error is None for r in records)


async def test_open_loop_follows_schedule_and_respects_max_concurrency() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.05)
    level = _level(mode="rate", rate=400.0, num_requests=24, max_concurrency=3)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, seed=4)
    assert len(records) == 24
    assert max(sender.seen_in_flight) <= 3
    scheduled = sorted(r.scheduled_ns for r in records)
    offsets = arrival_offsets_ns(24, 400.0, seed=4)
    start = scheduled[0]
    assert [s - start for s in scheduled] == offsets
    lags = [r.sent_ns - r.scheduled_ns for r in records]
    assert min(lags) >= 0
    # 24 requests of 50 ms through 3 slots take >= 0.4 s, the schedule only 60 ms: the bound held them back
    assert max(lags) >= int(0.2 * 1e9)


async def test_open_loop_duration_leaves_queued_arrivals_unsent() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.1)
    progress = LoadProgress()
    level = _level(mode="rate", rate=200.0, duration_s=0.15, max_concurrency=2)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, progress=progress)
    assert all(r.sent_ns < int(0.15 * 1e9) + 5_000_000 for r in records)  # none sent well after the end
    assert progress.unsent > 0
    assert len(records) == progress.sent


async def test_warmup_goes_first_and_is_flagged() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.02)
    records = await run_level(sender, PROMPTS, _level(mode="burst", concurrency=2, num_requests=4, warmup=3),
                              t0_ns=t0)
    warm = [r for r in records if r.warmup]
    measured = [r for r in records if not r.warmup]
    assert len(warm) == 3 and len(measured) == 4
    assert max(r.end_ns for r in warm) <= min(r.sent_ns for r in measured)
    assert max(sender.seen_in_flight[:3]) <= 2
    assert sorted(r.index for r in records) == list(range(7))
    assert {r.index for r in warm} == {0, 1, 2}


@pytest.mark.parametrize("swallow", [False, True])
async def test_stop_cancels_in_flight_and_keeps_finished_records(swallow: bool) -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.05, swallow_cancel=swallow)
    stop = asyncio.Event()
    delivered: list[RequestRecord] = []
    progress = LoadProgress()

    def on_record(r: RequestRecord) -> None:
        delivered.append(r)
        if len(delivered) == 6:
            stop.set()

    level = _level(mode="steady", concurrency=4, duration_s=30.0)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, on_record=on_record, stop=stop, progress=progress)
    assert records == delivered
    assert len(records) >= 6 and all(r.error is None for r in records)
    assert progress.cancelled >= 1 and progress.in_flight == 0
    assert progress.sent == len(records) + progress.cancelled
    assert sender.in_flight == 0


async def test_cancelling_the_level_task_delivers_finished_records_and_cleans_up() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.03)
    delivered: list[RequestRecord] = []
    task = asyncio.create_task(run_level(sender, PROMPTS, _level(mode="steady", concurrency=3, duration_s=30.0),
                                         t0_ns=t0, on_record=delivered.append))
    while len(delivered) < 5:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(delivered) >= 5 and sender.in_flight == 0
    count = len(delivered)
    await asyncio.sleep(0.05)
    assert len(delivered) == count  # nothing keeps running behind the caller's back


async def test_on_record_failure_ends_the_level_with_that_error() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.01)

    def on_record(r: RequestRecord) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await run_level(sender, PROMPTS, _level(mode="steady", concurrency=2, duration_s=30.0), t0_ns=t0,
                        on_record=on_record)
    assert sender.in_flight == 0


async def test_health_sampler_sees_a_starved_loop() -> None:
    async def sample(busy: float) -> ClientHealth:
        async with HealthSampler(interval_s=0.05, busy_fraction=busy, in_flight=lambda: 3) as sampler:
            await asyncio.sleep(0.4)
        return summarize_health(sampler.samples)

    idle, busy = await sample(0.0), await sample(0.8)
    assert (busy.cpu_pct_mean or 0.0) > (idle.cpu_pct_mean or 0.0)
    assert (busy.loop_lag_ms_max or 0.0) >= 5.0  # the loop is blocked 16 ms in every 20
    assert busy.in_flight_mean == 3.0
    assert busy.loop_lag_ms_p99 is not None and busy.cpu_pct_max is not None and busy.samples > 0


def test_health_summary_of_no_samples_is_empty() -> None:
    assert summarize_health([]) == ClientHealth()
    with pytest.raises(ValueError, match="busy_fraction"):
        HealthSampler(busy_fraction=1.0)


class HangingSender(FakeSender):
    """Like FakeSender, but every ``every``-th request (by index) is never answered."""

    def __init__(self, t0_ns: int, service_s: float, every: int) -> None:
        super().__init__(t0_ns, service_s)
        self.every = every

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        if index % self.every == self.every - 1:
            self.in_flight += 1
            try:
                await asyncio.Event().wait()
            finally:
                self.in_flight -= 1
        return await super().send(index=index, prompt=prompt, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
                                  scheduled_ns=scheduled_ns, worker=worker, warmup=warmup)


@pytest.mark.slow
async def test_requests_still_in_flight_after_the_grace_period_are_hung_failures() -> None:
    t0 = time.monotonic_ns()
    sender = HangingSender(t0, 0.02, every=5)
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=4, duration_s=0.4)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, progress=progress, grace_min_s=0.3)
    hung = [r for r in records if r.error == ErrorClass.HUNG]
    assert hung and len(hung) == progress.hung
    # Every request sent ends in exactly one record: none vanished, none was cancelled silently.
    assert len(records) == progress.sent and progress.cancelled == 0
    assert sorted(r.index for r in records) == list(range(progress.sent))
    assert all(r.index % 5 == 4 for r in hung) and all(r.output_tokens == 0 for r in hung)
    assert all("grace period" in (r.error_detail or "") for r in hung)
    assert sender.in_flight == 0
    # The drain began at the duration and lasted the grace period (0.3 s > 2 x the 20 ms requests).
    assert (time.monotonic_ns() - t0) / 1e9 < 0.4 + 0.3 + 1.0


async def test_a_timed_level_whose_requests_never_answer_ends_on_time() -> None:
    """Nothing finishing gives the drain no yardstick; a level with a duration (or ended by finish: the stop
    rule or the first Ctrl-C) still ends within about twice the time it ran, not at the client's timeout."""
    t0 = time.monotonic_ns()
    sender = HangingSender(t0, 0.02, every=1)   # every request hangs
    progress = LoadProgress()
    records = await run_level(sender, PROMPTS, _level(mode="steady", concurrency=4, duration_s=0.3), t0_ns=t0,
                              progress=progress, grace_min_s=0.2)
    took = (time.monotonic_ns() - t0) / 1e9
    assert len(records) == progress.sent == progress.hung == 4 and sender.in_flight == 0
    assert all(r.error == ErrorClass.HUNG for r in records)
    assert took < 0.3 + 0.3 + 1.0   # the duration, as long again, slack for a busy machine (timeout: 600 s)
    finish = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, finish.set)
    t1 = time.monotonic_ns()
    stopped = await run_level(HangingSender(t1, 0.02, every=1), PROMPTS, _level(mode="burst", concurrency=4),
                              t0_ns=t1, finish=finish, grace_min_s=0.2)
    assert [r.error for r in stopped] == [ErrorClass.HUNG] * 4
    assert (time.monotonic_ns() - t1) / 1e9 < 0.3 + 0.3 + 1.0


async def test_max_wall_s_ends_a_level_whose_requests_never_answer_at_the_bound() -> None:
    """--max-level-time bounds a level that gets no answer: what was silent the whole level is hung then,
    without waiting for the drain's grace period (5 s here) or the client's timeout."""
    t0 = time.monotonic_ns()
    sender = HangingSender(t0, 0.02, every=1)
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=4, duration_s=0.4, max_wall_s=0.4)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, progress=progress, grace_min_s=5.0)
    took = (time.monotonic_ns() - t0) / 1e9
    assert 0.4 <= took < 0.4 + 0.4
    assert progress.wall_bound and len(records) == progress.sent == progress.hung == progress.hung_at_bound == 4
    assert all(r.error == ErrorClass.HUNG for r in records) and sender.in_flight == 0


@pytest.mark.slow   # a second of real time
async def test_answers_still_coming_at_the_bound_finish_and_count() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.3)
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=4, duration_s=5.0, max_wall_s=1.0)   # the bound comes first
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, progress=progress, grace_min_s=5.0)
    assert progress.wall_bound and progress.hung == 0 and progress.cancelled_at_end == 0
    assert len(records) == progress.sent and all(r.error is None for r in records)
    assert max(r.sent_ns for r in records) <= 1.0e9 < max(r.end_ns for r in records)   # nothing sent after it


class StreamingForeverSender(HangingSender):
    """Every request streams a token every 50 ms and never ends (an answer longer than the level)."""

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord:
        now = self.now()
        return RequestRecord(index=index, worker=0, scheduled_ns=0, sent_ns=0, end_ns=now, first_token_ns=50_000_000,
                             chunk_ns=[now - 50_000_000], chunk_tokens=[1], output_tokens=1, error=error,
                             error_detail=detail)


@pytest.mark.slow   # a second of real time
async def test_an_answer_still_streaming_at_the_bound_is_not_called_silent() -> None:
    t0 = time.monotonic_ns()
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=4, duration_s=0.4, max_wall_s=0.4)
    records = await run_level(StreamingForeverSender(t0, 0.02, every=1), PROMPTS, level, t0_ns=t0, progress=progress,
                              grace_min_s=0.2)
    # Not hung by the bound on silence; the drain's own grace period ends them (nothing ever finished).
    assert progress.hung_at_bound == 0 and progress.hung == len(records) == 4
    assert all("grace period" in (r.error_detail or "") for r in records)


class CappedSender(FakeSender):
    """A server that serves one request at a time, ``service_s`` each: the others queue behind it, silent."""

    def __init__(self, t0_ns: int, service_s: float) -> None:
        super().__init__(t0_ns, service_s)
        self.slot = asyncio.Semaphore(1)

    async def send(self, **kw: object) -> RequestRecord:  # type: ignore[override]
        async with self.slot:
            return await super().send(**kw)  # type: ignore[arg-type]


@pytest.mark.slow   # a second of real time
async def test_requests_queued_behind_a_cap_the_server_still_serves_are_not_hung_at_the_bound() -> None:
    """Four workers on a server that serves one at a time, 0.15 s each: at the bound (0.3 s) the queued ones
    have been silent longer than the bound on silence (0.2 s), but the server answered one 0 to 0.15 s ago:
    they are a cap's queue, not a dead server, and finish in the drain."""
    t0 = time.monotonic_ns()
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=4, duration_s=0.3, max_wall_s=0.3)
    records = await run_level(CappedSender(t0, 0.15), PROMPTS, level, t0_ns=t0, progress=progress, grace_min_s=0.2)
    assert progress.wall_bound and progress.hung_at_bound == 0 and progress.hung == 0
    assert len(records) == progress.sent and all(r.error is None for r in records)


def test_the_bound_on_silence_spares_only_the_queue_of_a_server_that_still_answers() -> None:
    from plateau_bench.driver.load_state import silent_at_bound

    ms = 1_000_000
    signs = {1: (100 * ms, False), 2: (100 * ms, True), 3: (950 * ms, True), 4: (990 * ms, False)}
    # The server answered 50 ms ago: the queued request 1 waits; 2 stalled mid-answer: hung.
    assert silent_at_bound(1000 * ms, signs, 950 * ms, 200 * ms) == [2]
    # Nothing from the server for 900 ms: every request silent for the bound is hung, queued or not.
    assert silent_at_bound(1000 * ms, signs, 100 * ms, 200 * ms) == [1, 2]


async def test_a_level_that_ends_before_its_bound_is_not_cut() -> None:
    t0 = time.monotonic_ns()
    progress = LoadProgress()
    level = _level(mode="steady", concurrency=2, num_requests=6, max_wall_s=30.0)
    records = await run_level(FakeSender(t0, 0.02), PROMPTS, level, t0_ns=t0, progress=progress)
    assert len(records) == 6 and not progress.wall_bound and progress.cancelled_at_end == 0


async def test_a_burst_with_a_hung_request_ends_after_its_grace_period() -> None:
    t0 = time.monotonic_ns()
    sender = HangingSender(t0, 0.05, every=8)
    records = await run_level(sender, PROMPTS, _level(mode="burst", concurrency=8), t0_ns=t0, grace_min_s=0.2)
    assert len(records) == 8
    assert [r.index for r in records if r.error == ErrorClass.HUNG] == [7]


async def test_finish_drains_the_level_instead_of_cancelling() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.05)
    finish = asyncio.Event()
    progress = LoadProgress()

    def on_record(r: RequestRecord) -> None:
        if progress.completed >= 6:
            finish.set()

    level = _level(mode="steady", concurrency=4, duration_s=30.0)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, on_record=on_record, finish=finish,
                              progress=progress)
    assert progress.cancelled == 0 and progress.hung == 0
    assert len(records) == progress.sent and all(r.error is None for r in records)
    assert sender.in_flight == 0


async def test_cancel_ends_the_level_at_once_and_counts_what_was_in_flight() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.2)
    cancel = asyncio.Event()
    progress = LoadProgress()

    def on_record(r: RequestRecord) -> None:
        if progress.completed >= 8:
            cancel.set()

    level = _level(mode="steady", concurrency=4, duration_s=30.0)
    records = await run_level(sender, PROMPTS, level, t0_ns=t0, on_record=on_record, cancel=cancel,
                              progress=progress)
    # What was in flight got no record (a drain would have waited for it: sent == records).
    assert progress.cancelled_at_end >= 1 and progress.cancelled == 0 and progress.hung == 0
    assert progress.sent == len(records) + progress.cancelled_at_end
    assert all(r.error is None for r in records) and sender.in_flight == 0


async def test_a_feed_that_runs_out_ends_the_sending_and_the_level_drains() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, service_s=0.02)
    feed = ListFeed(PROMPTS, reuse=False, dataset=True)   # a dataset of 7 prompts, --allow-reuse not given
    started = time.monotonic()
    records = await run_level(sender, feed, _level(mode="steady", concurrency=3, duration_s=30.0), t0_ns=t0)
    assert time.monotonic() - started < 5.0                # not the level's 30 s
    assert sorted(str(c["prompt"]) for c in sender.calls) == sorted(p.text for p in PROMPTS)
    assert len(records) == 7 and all(r.error is None for r in records)
    assert feed.use().exhausted and feed.use().requests == 7
