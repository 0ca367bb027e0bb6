"""The server's prefix-cache hit rate by level: shown for workloads that share on purpose, and for new
prompts only when the server found some of them cached."""

from __future__ import annotations

from plateau_bench.report.terminal import cache_line
from plateau_bench.result import LevelResult, ResultFile, RunSpec, ServerTelemetry
from plateau_bench.spec import WorkloadSpec


def _result(rates: list[float | None], workload: WorkloadSpec | None = None) -> ResultFile:
    levels = [LevelResult(label=f"C={2 ** i}", mode="steady", concurrency=2 ** i,
                          telemetry=ServerTelemetry(prefix_cache_hit_rate=r)) for i, r in enumerate(rates)]
    return ResultFile(kind="sweep", spec=RunSpec(workload=workload or WorkloadSpec()), levels=levels)


def test_new_prompts_show_the_rate_only_when_the_server_found_them_cached() -> None:
    assert cache_line(_result([0.0, 0.01, None])) is None
    assert cache_line(_result([0.0, 0.44, 0.99])) == "Prefix cache hit rate by level (server): C=1 0%, C=2 44%, C=4 99%"


def test_shared_prefixes_always_show_it() -> None:
    shared = WorkloadSpec(prefix_groups=2, prefix_len=64)
    assert cache_line(_result([0.0, 0.5], shared)) == "Prefix cache hit rate by level (server): C=1 0%, C=2 50%"
