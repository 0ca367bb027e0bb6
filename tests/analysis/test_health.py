"""The load generator's health per level: one process, or several (``--workers``) read together."""

from __future__ import annotations

from plateau_bench.analysis.health import summarize_health, with_requests
from plateau_bench.records import HealthSample, RequestRecord

from support.builders import request_record

MS = 1_000_000


def _samples() -> list[HealthSample]:
    return [HealthSample(t_ns=t * 100 * MS, cpu_pct=cpu, loop_lag_ms=lag, in_flight=n, worker=w)
            for t in range(1, 21) for w, cpu, lag, n in ((0, 30.0, 1.0, 10), (1, 90.0, 40.0 if t < 20 else 400.0, 6))]


def test_several_processes_are_read_at_their_busiest_and_in_flight_summed() -> None:
    health = summarize_health(_samples(), processes=2)
    assert health.processes == 2 and [h.worker for h in health.per_worker] == [0, 1]
    assert health.cpu_pct_mean == 90.0 and health.cpu_pct_max == 90.0       # the busiest, not the average (60)
    assert health.loop_lag_ms_max == 400.0 and health.loop_lag_ms_p99 == health.per_worker[1].loop_lag_ms_p99
    assert health.in_flight_mean == 16.0 and health.samples == 40
    # a window picks each process's own samples in it
    early = summarize_health(_samples(), 0, 1_000 * MS, processes=2)
    assert early.loop_lag_ms_max == 40.0 and all(h.samples == 10 for h in early.per_worker)


def test_one_process_keeps_the_old_figures() -> None:
    samples = [HealthSample(t_ns=t * MS, cpu_pct=50.0, loop_lag_ms=2.0, in_flight=3) for t in range(5)]
    health = summarize_health(samples)
    assert health.processes == 1 and not health.per_worker and health.cpu_pct_mean == 50.0
    assert with_requests(health, [RequestRecord(index=0, scheduled_ns=0, sent_ns=1, end_ns=2)]) == health


def test_each_process_gets_its_own_send_lag_and_connect_time() -> None:
    def record(i: int, process: int, lag_ms: float, connect_ms: float, warmup: bool = False) -> RequestRecord:
        return request_record(i, scheduled_ns=0, sent_ns=int(lag_ms * MS), end_ns=10**9,
                              connect_ns=int(connect_ms * MS), process=process, warmup=warmup)

    records = [record(i, 0, 1.0, 2.0) for i in range(50)] + [record(50 + i, 1, 30.0, 1500.0) for i in range(50)]
    records.append(record(100, 0, 9_999.0, 9_999.0, warmup=True))   # warm-up is no measurement
    health = with_requests(summarize_health(_samples(), processes=2), records)
    first, second = health.per_worker
    assert (first.requests, second.requests) == (50, 50)
    assert first.send_lag_ms_p99 == 1.0 and second.send_lag_ms_p99 == 30.0
    assert first.connect_ms_p99 == 2.0 and second.connect_ms_p99 == 1500.0
    assert first.cpu_pct_mean == 30.0   # the samples' figures are kept
