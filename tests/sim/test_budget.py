"""A simulated level too large for memory is refused before it starts, in one line naming its inputs."""

from __future__ import annotations

import resource

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.sim.budget import check_level_size, expected_requests, memory_budget_bytes
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, WorkloadSpec

from support.loading import plateau

TINY = get_preset("tiny")
WORKLOAD = WorkloadSpec(input_len=32, output_len=16)
GIB = 2**30


def test_a_closed_loop_is_bounded_by_what_the_engine_can_finish() -> None:
    level = LevelSpec(mode="steady", concurrency=64, duration_s=100.0)
    requests, made_by = expected_requests(TINY, level, WORKLOAD)
    measured = simulate_level(TINY, level, WORKLOAD).records
    assert len(measured) <= requests < 20 * len(measured)   # an upper bound, and not a loose one
    assert made_by == "--concurrency 64 for --duration 100s"


@pytest.mark.parametrize(("level", "named"), [
    (LevelSpec(mode="rate", rate=1e6, duration_s=3600.0), "--rate 1e+06/s for --duration 3600s"),
    (LevelSpec(mode="steady", concurrency=1_000_000, duration_s=1e7), "--concurrency 1,000,000 for --duration"),
    (LevelSpec(mode="burst", concurrency=10_000_000 // 10, num_requests=900_000_000), "--num-requests 900,000,000"),
])
def test_a_level_beyond_the_budget_is_refused_naming_its_inputs(level: LevelSpec, named: str) -> None:
    with pytest.raises(ConfigError, match="the simulation would hold") as refused:
        check_level_size(TINY, level, WORKLOAD, chunks=False, budget_bytes=8 * GIB)
    assert named in str(refused.value) and "\n" not in str(refused.value)


def test_streamed_tokens_count_when_chunks_are_kept() -> None:
    level = LevelSpec(mode="rate", rate=1000.0, duration_s=600.0)   # 600,000 requests of 2,048 tokens
    long_answers = WorkloadSpec(input_len=32, output_len=2048)
    check_level_size(TINY, level, long_answers, chunks=False, budget_bytes=8 * GIB)
    with pytest.raises(ConfigError):
        check_level_size(TINY, level, long_answers, chunks=True, budget_bytes=8 * GIB)


def test_the_budget_follows_the_address_space_limit() -> None:
    unlimited = memory_budget_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, hard))   # what `ulimit -v` does to a job
    try:
        limited = memory_budget_bytes()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert limited == min(unlimited, GIB)


def test_sim_refuses_an_impossible_level_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["sim", "--mode", "steady", "-c", "1000000", "--duration", "1000000s",
                              "--output-len", "16"], capsys)
    assert code == 2 and "Traceback" not in out + err
    assert err.strip().count("\n") == 0 and "the simulation would hold" in err
