"""Builders of the result types tests make by hand: a level (``LevelResult``), a request record
(``RequestRecord``) and a result file (``ResultFile``).

Each builder fills what names the object (a level's label, mode, concurrency and throughput; a record's
index and times) and leaves every other field at the type's own default, so a test states exactly the
fields it depends on (``**fields`` passes any of them through). A test's own factory with a meaning of
its own (one signature per level, a queueing model's records) builds on these rather than listing the
type's fields again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, ResultKind, RunSpec
from plateau_bench.spec import WorkloadSpec
from plateau_bench.units import NS, NS_PER_MS


def level_result(concurrency: int | None = None, throughput: float = 0.0, *, label: str | None = None,
                 mode: str = "steady", **fields: Any) -> LevelResult:
    """A measured level: ``C={concurrency}`` (or ``label``) in ``mode``, ``throughput`` output tok/s."""
    if label is None:
        if concurrency is None:
            raise TypeError("level_result: give a concurrency or a label")
        label = f"C={concurrency}"
    return LevelResult(label=label, mode=mode, concurrency=concurrency, output_throughput=throughput, **fields)


def request_record(index: int = 0, *, sent_ns: int = 0, end_ns: int | None = None, scheduled_ns: int | None = None,
                   ttft_ms: float | None = None, e2e_ms: float | None = None, **fields: Any) -> RequestRecord:
    """A request sent at ``sent_ns`` (scheduled then too unless ``scheduled_ns`` says otherwise).

    Its first token and end either as times (``first_token_ns=``, ``end_ns``) or as milliseconds after
    the send (``ttft_ms``, ``e2e_ms``, rounded to the nanosecond); the end defaults to the send."""
    if e2e_ms is not None:
        if end_ns is not None:
            raise TypeError("request_record: give end_ns or e2e_ms, not both")
        end_ns = sent_ns + round(e2e_ms * NS_PER_MS)
    if ttft_ms is not None:
        if "first_token_ns" in fields:
            raise TypeError("request_record: give first_token_ns or ttft_ms, not both")
        fields["first_token_ns"] = sent_ns + round(ttft_ms * NS_PER_MS)
    return RequestRecord(index=index, scheduled_ns=sent_ns if scheduled_ns is None else scheduled_ns,
                         sent_ns=sent_ns, end_ns=sent_ns if end_ns is None else end_ns, **fields)


def lockstep_records(tokens_per_wave: Sequence[int], *, workers: int = 4, prefill_s: float,
                     decode_s: float) -> list[RequestRecord]:
    """Workers in lock step, one request each per wave: all sent at the wave's start, a prefill phase
    (``prefill_s``, no tokens), then each request's ``tokens_per_wave[k]`` tokens over ``decode_s``."""
    cycle = prefill_s + decode_s
    out = []
    for k, tokens in enumerate(tokens_per_wave):
        for w in range(workers):
            sent = round(k * cycle * NS)
            out.append(request_record(k * workers + w, worker=w, sent_ns=sent,
                                      first_token_ns=sent + round(prefill_s * NS), end_ns=round((k + 1) * cycle * NS),
                                      prompt_tokens=10, output_tokens=tokens))
    return out


def result_file(levels: Iterable[LevelResult] = (), *, kind: ResultKind = "sweep",
                workload: WorkloadSpec | None = None, **fields: Any) -> ResultFile:
    """A result holding ``levels`` (a sweep unless ``kind`` says otherwise); ``workload`` sets its spec's."""
    if workload is not None:
        if "spec" in fields:
            raise TypeError("result_file: give spec or workload, not both")
        fields["spec"] = RunSpec(workload=workload)
    return ResultFile(kind=kind, levels=list(levels), **fields)
