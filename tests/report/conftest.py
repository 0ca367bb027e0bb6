"""Result directories built from synthetic request records, as a sweep would write them.

A tiny queueing model stands in for a server: ``cap`` requests run at once, each step takes
``12 ms + 0.15 ms x batch``, and requests beyond the cap wait for a free slot. Levels are closed
loops (``steady``: every worker sends again as soon as its request ends, ``per_worker`` times)
or bursts (``burst``: C requests at t=0). Metrics come from ``compute_level``; the files from
``ResultWriter``, so the report reads exactly what a real sweep leaves behind.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from plateau_bench.analysis.metrics import compute_level
from plateau_bench.records import RequestRecord, TelemetrySample
from plateau_bench.result import Knee, LevelResult, Plateau, ResultFile, RunSpec, TargetPublic, TwinInfo, Verdict
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import ResultWriter
from plateau_bench.units import NS

MS = 1_000_000


def synth_level(concurrency: int, *, cap: int = 64, mode: str = "steady", per_worker: int = 3,
                output_len: int = 64, input_len: int = 128) -> list[RequestRecord]:
    batch = min(concurrency, cap)
    step_ns = int((12 + 0.15 * batch) * MS)
    service_ns = 30 * MS + output_len * step_ns
    slots = [0] * cap
    sends = [(0, w, 0) for w in range(concurrency)]  # (send time, worker, requests done)
    heapq.heapify(sends)
    records: list[RequestRecord] = []
    while sends:
        sent, worker, done = heapq.heappop(sends)
        free = heapq.heappop(slots)
        start = max(sent, free)
        end = start + service_ns
        heapq.heappush(slots, end)
        records.append(RequestRecord(
            index=len(records), worker=worker, scheduled_ns=sent, sent_ns=sent, end_ns=end,
            first_token_ns=start + 30 * MS + step_ns, prompt_tokens=input_len, output_tokens=output_len,
        ))
        if mode == "steady" and done + 1 < per_worker:
            heapq.heappush(sends, (end, worker, done + 1))
    return records


def telemetry_samples(records: list[RequestRecord], cap: int, every_s: float = 0.5) -> list[TelemetrySample]:
    last = max(r.end_ns for r in records)
    samples = []
    t = 0
    while t <= last:
        in_flight = sum(1 for r in records if r.sent_ns <= t < r.end_ns)
        running = min(in_flight, cap)
        samples.append(TelemetrySample(t_ns=t, values={"running": running, "waiting": in_flight - running,
                                                       "kv_usage": running / cap * 0.8}))
        t += int(every_s * NS)
    return samples


def write_sweep(out: Path, concurrencies: list[int], *, cap: int = 64, mode: str = "steady",
                per_worker: int = 3, output_len: int = 64, input_len: int = 128, telemetry: bool = True,
                verdict: bool = True) -> list[LevelResult]:
    spec = RunSpec(workload=WorkloadSpec(input_len=input_len, output_len=output_len),
                   target=TargetPublic(url="http://127.0.0.1:8000", model="m", endpoint="chat"),
                   twin=TwinInfo(preset="tiny"))
    levels = []
    with ResultWriter(out, ResultFile(kind="sweep", spec=spec)) as writer:
        for c in concurrencies:
            label = f"c{c}"
            records = synth_level(c, cap=cap, mode=mode, per_worker=per_worker, output_len=output_len,
                                  input_len=input_len)
            writer.add_requests(label, records)
            if telemetry:
                for sample in telemetry_samples(records, cap):
                    writer.add_telemetry(label, sample)
            level = compute_level(records, label=label, mode=mode, concurrency=c)
            writer.add_level(level)
            levels.append(level)
        if verdict:
            best = max(levels, key=lambda lv: lv.output_throughput)
            result = writer.result
            result.plateau = Plateau(best.output_throughput, best.concurrency or 0, True)
            result.knee = Knee(float(cap), best.output_throughput * 0.9, (cap // 2, cap), True)
            result.stop_reason = "throughput stopped rising"
            result.verdict = Verdict(
                "admission cap", f"Admission cap: the server runs at most {cap} requests at a time", "high",
                [f"decoding concurrency pinned at {cap} while C grows"],
                ["raising the cap to 128 would give about +40 % tok/s"], ["raise --max-num-seqs"])
            writer.flush()
    return levels


SweepFactory = Callable[..., Path]


@pytest.fixture
def make_sweep(tmp_path: Path) -> SweepFactory:
    """``make_sweep(name, concurrencies, **options)`` -> the result directory."""

    def factory(name: str, concurrencies: list[int] | None = None, **options: Any) -> Path:
        out = tmp_path / name
        write_sweep(out, concurrencies or [1, 4, 16, 64, 128], **options)
        return out

    return factory
