"""Load workers as Ray actors on a local two-node Ray cluster started by the test, against the twin.

A head and one extra node (``ray.cluster_utils.Cluster``: two raylets on this machine), one actor per
node. The nodes share this machine's monotonic clock, so the estimated clock offsets must come out
within their own error bound (half the round trip) of zero: a check of the estimator itself.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_requests, load_result

from support.loading import Cli

if TYPE_CHECKING:
    from conftest import ScriptedServer


FLAGS = ["--mode", "burst", "--concurrency", "4,12", "--input-len", "16", "--output-len", "24", "--quiet"]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    from ray.cluster_utils import Cluster

    src = str(Path(__file__).resolve().parents[2] / "src")
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (src, previous)))   # the raylets' actors import it
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster.address
    finally:
        cluster.shutdown()
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


def _sweep(cli: Cli, url: str, out: Path, *extra: str) -> None:
    result = cli("sweep", "--url", url, "--out", str(out), *FLAGS, *extra)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "nowhere"])
def test_an_address_where_no_cluster_answers_is_refused_at_once(address: str) -> None:
    from plateau_bench.driver.ray_pool import check_reachable
    from plateau_bench.errors import ConfigError

    with pytest.raises(ConfigError, match="--ray"):
        check_reachable(address, timeout_s=1.0)
    check_reachable("auto")   # Ray finds this machine's cluster itself


@pytest.mark.slow            # a Ray cluster takes ~20 s to start on two cores
@pytest.mark.timeout(300)
def test_a_sweep_through_ray_actors_counts_like_one_process(cli: Cli, ray_cluster: str, tmp_path: Path) -> None:
    with start_sim_server(get_preset("tiny"), speed=4.0) as twin:
        _sweep(cli, twin.url, tmp_path / "ray", "--ray", ray_cluster, "--workers-per-node", "1")
        _sweep(cli, twin.url, tmp_path / "one")
    on_ray, alone = load_result(tmp_path / "ray"), load_result(tmp_path / "one")
    assert [lv.label for lv in on_ray.levels] == [lv.label for lv in alone.levels] == ["C=4", "C=12"]
    for a, b in zip(on_ray.levels, alone.levels, strict=True):
        assert (a.num_requests, a.completed, a.failed) == (b.num_requests, b.completed, b.failed)
        assert a.output_tokens == b.output_tokens
        assert a.client.processes == 2 and b.client.processes == 1
        # one actor per node, each with its clock measured; one machine's clock: offsets within the error
        assert len({c.node for c in a.worker_clocks}) == 2 and not b.worker_clocks
        for clock in a.worker_clocks:
            assert clock.rtt_ns is not None and abs(clock.offset_ns) <= clock.rtt_ns // 2 + 1_000_000
    records = load_requests(tmp_path / "ray")
    assert sorted(r.worker for r in records["C=12"]) == list(range(12))
    assert len({r.index for r in records["C=12"]}) == 12


@pytest.mark.slow            # a Ray cluster takes ~20 s to start on two cores
@pytest.mark.timeout(300)
async def test_a_killed_actor_is_reported_and_its_requests_are_counted(ray_cluster: str,
                                                                      server: ScriptedServer) -> None:
    import asyncio
    import time

    import ray

    from plateau_bench.analysis.level import build_level
    from plateau_bench.driver.pool import WorkerPool
    from plateau_bench.driver.ray_pool import RayLauncher
    from plateau_bench.driver.runner import HttpLevelRunner
    from plateau_bench.errors import ErrorClass
    from plateau_bench.spec import LevelSpec, TargetSpec
    from plateau_bench.workload.prompts import Prompt

    server.plan.ttft_s, server.plan.itl_s = 0.05, 0.4     # 8 tokens: ~3 s per request
    prompts = [Prompt(f"prompt {i}", 2, 8) for i in range(8)]
    target = TargetSpec(url=server.url, model="tiny")
    async with WorkerPool(auto=False, target=target, prompts=prompts, launcher=RayLauncher(ray_cluster)) as pool:
        runner = HttpLevelRunner(target, prompts, metrics_url=None, pool=pool)
        task = asyncio.create_task(runner.run_level(LevelSpec(mode="steady", concurrency=4, duration_s=2.0),
                                                    label="C=4", on_record=None, stop_rule=None))
        victim = pool.processes[1]
        deadline = time.monotonic() + 30
        while not (victim.part is not None and len(victim.part.pending) == 2):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        ray.kill(victim.actor)  # type: ignore[attr-defined]
        run = await task
        lost = [r for r in run.records if r.error == ErrorClass.HUNG and "died" in (r.error_detail or "")]
        assert len(lost) == 2 and {r.worker for r in lost} == {2, 3}
        assert len(run.records) == len(server.served) == len({r.index for r in run.records})
        assert run.lost_workers == 1 and any("load worker 1" in n and "died" in n for n in run.notes)
        assert build_level(run).level_failed


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_a_sweep_on_ray_and_keeps_its_records(ray_cluster: str, tmp_path: Path, sig: signal.Signals,
                                                            code: int) -> None:
    import json
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny"), speed=4.0) as twin:
        args = [sys.executable, "-m", "plateau_bench", "sweep", "--url", twin.url, "--out", str(out), "--quiet",
                "--ray", ray_cluster, "--concurrency", "8,16", "--min-level-time", "50s", "--max-level-time", "60s",
                "--output-len", "64"]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        requests = out / "requests.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (requests.exists() and requests.stat().st_size > 20_000):
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert time.monotonic() - sent < 10.0
    assert b"--resume" in err and b"Traceback" not in err
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    indices = [line["record"]["index"] for line in lines if line["level"] == "C=8"]
    assert len(indices) >= 20 and len(set(indices)) == len(indices)
    assert {line["record"]["process"] for line in lines} == {0, 1}   # both nodes' actors sent them
