"""Failure accounting under random fault mixes, over real HTTP against the fault-injecting twin.

For any mix of hangs, truncations, resets, malformed chunks and HTTP errors, every request sent ends
in exactly one class (``ok + failed == sent``, hung among the failed), only successful requests'
tokens are throughput, and every finished request is on disk.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.faults import parse_faults
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_requests, load_result

from support.loading import Cli

pytestmark = pytest.mark.slow

FAULTS = ("hang", "truncate", "reset", "malformed", "http_500", "http_429")


@st.composite
def fault_mixes(draw: st.DrawFn) -> str:
    chosen = draw(st.lists(st.sampled_from(FAULTS), min_size=1, max_size=4, unique=True))
    shares = [draw(st.floats(0.02, 0.2)) for _ in chosen]
    return ",".join(f"{name}={p:.2f}" for name, p in zip(chosen, shares, strict=True))


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mix=fault_mixes(), seed=st.integers(0, 1000))
@pytest.mark.timeout(240)
def test_every_request_ends_in_exactly_one_class(cli: Cli, tmp_path: Path, mix: str, seed: int) -> None:
    out = tmp_path / f"run-{seed}-{abs(hash(mix))}"
    with start_sim_server(get_preset("tiny"), speed=4.0, faults=parse_faults(mix), faults_seed=seed) as twin:
        done = cli("run", "--url", twin.url, "--concurrency", "8", "--num-requests", "40", "--output-len", "32",
                   "--input-len", "16", "--out", str(out), "--quiet")
    assert done.exit_code in (0, 1), done.output
    (level,) = load_result(out).levels
    records = load_requests(out)[level.label]
    assert level.num_requests == 40 == len(records)
    assert level.completed + level.failed == level.num_requests
    assert level.completed == sum(1 for r in records if r.error is None)
    assert level.hung == sum(1 for r in records if r.error == "hung")
    assert sum(level.errors.values()) == level.failed
    # A burst's window is the whole level: throughput is exactly the successful requests' tokens.
    assert level.output_tokens == sum(r.output_tokens for r in records if r.error is None)
    assert level.failed_output_tokens == sum(r.output_tokens for r in records if r.error is not None)
    if "hang" not in mix:
        assert level.hung == 0
