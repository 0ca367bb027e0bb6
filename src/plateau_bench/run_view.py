"""A saved run as the presentation receives it: typed data, loaded by ``store``, rendered by ``report``.

``ReportRun`` is one result directory: the name the report shows, where it was read from, and its
typed ``ResultFile`` (levels, and the sweep's plateau, knee and verdict when they were written).
``records`` gives the request records and telemetry samples of the kept attempts (``RunRecords``),
which only the HTML time series and the vLLM export read. They are loaded when asked for, one run
at a time, rather than with the result: a request record carries the arrival time of every chunk, so
a sweep's records can take hundreds of megabytes, and a table or a PNG never needs them.

This module is data only: it reads no file (the store builds these, the report renders them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.spec import WorkloadSpec


@dataclass(frozen=True)
class RunRecords:
    """The request records and telemetry samples of a run's kept attempts, by level label."""

    requests: Mapping[str, Sequence[RequestRecord]] = field(default_factory=dict)
    telemetry: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    def level_requests(self, label: str) -> Sequence[RequestRecord]:
        return self.requests.get(label, ())

    def level_telemetry(self, label: str) -> Sequence[Mapping[str, Any]]:
        return self.telemetry.get(label, ())


class RecordsLoader(Protocol):
    """Reads a run's records when called; ``telemetry=False`` leaves the telemetry samples unread."""

    def __call__(self, *, telemetry: bool = True) -> RunRecords: ...


def no_records(*, telemetry: bool = True) -> RunRecords:
    """A run built in memory, with nothing saved beside it."""
    return RunRecords()


@dataclass(frozen=True)
class ReportRun:
    """One result directory, loaded for presentation."""

    name: str
    path: Path
    result: ResultFile
    records: RecordsLoader = field(default=no_records, compare=False, repr=False)

    @property
    def levels(self) -> list[LevelResult]:
        return self.result.levels

    @property
    def workload(self) -> WorkloadSpec:
        return self.result.spec.workload

    def renamed(self, name: str) -> ReportRun:
        return ReportRun(name, self.path, self.result, self.records)
