"""The server's prefix-cache hit rate by level: shown for workloads that share on purpose, and for new
prompts only when the server found some of them cached."""

from __future__ import annotations

from plateau_bench.report.terminal import cache_line
from plateau_bench.result import ResultFile, ServerTelemetry
from plateau_bench.spec import WorkloadSpec

from support.builders import level_result, result_file


def _result(rates: list[float | None], workload: WorkloadSpec | None = None) -> ResultFile:
    return result_file([level_result(2 ** i, telemetry=ServerTelemetry(prefix_cache_hit_rate=r))
                        for i, r in enumerate(rates)], workload=workload or WorkloadSpec())


def test_new_prompts_show_the_rate_only_when_the_server_found_them_cached() -> None:
    assert cache_line(_result([0.0, 0.01, None])) is None
    assert cache_line(_result([0.0, 0.44, 0.99])) == "Prefix cache hit rate by level (server): C=1 0%, C=2 44%, C=4 99%"


def test_shared_prefixes_always_show_it() -> None:
    shared = WorkloadSpec(prefix_groups=2, prefix_len=64)
    assert cache_line(_result([0.0, 0.5], shared)) == "Prefix cache hit rate by level (server): C=1 0%, C=2 50%"
