"""Faults with real servers: a server that is still starting, a closed port, a server killed in the
middle of a sweep level, and llama-server closing kept-alive connections after each stream (no
request may be lost to that)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plateau_bench.store import load_summary

from support import real_servers
from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

STARTUP_DELAY_S = 3.0


def _plateau(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "plateau_bench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.fixture
def tiny_llamacpp() -> Iterator[ServerHandle]:
    """A llama-server of its own (tiny model, starts in about a second), to be killed by the test."""
    handle = real_servers.start_llamacpp(parallel=4, model="tiny")
    try:
        yield handle
    finally:
        handle.stop()


def test_wait_ready_waits_for_a_server_that_is_still_starting() -> None:
    port = real_servers.free_port()
    url = f"http://{real_servers.HOST}:{port}"
    run = _plateau("run", "--url", url, "--wait-ready", "60s", "--concurrency", "2", "--num-requests", "2",
                   "--input-len", "16", "--output-len", "8", "--json", "--quiet")  # fmt: skip
    server: ServerHandle | None = None
    try:
        time.sleep(STARTUP_DELAY_S)
        assert run.poll() is None, run.communicate()  # still waiting: nothing listens yet
        server = real_servers.start_llamacpp(parallel=2, port=port, model="tiny")
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if server is not None:
            server.stop()
    assert run.returncode == 0, err
    level = json.loads(out)
    assert (level["completed"], level["failed"]) == (2, 0), level["errors"]


def test_closed_port_without_wait_ready_is_one_line_naming_the_url(plateau_cli: PlateauCli) -> None:
    url = f"http://{real_servers.HOST}:{real_servers.free_port()}"
    code, output = plateau_cli.invoke("run", "--url", url, "--concurrency", "1", "--quiet")
    assert code == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("plateau: error:")
    assert url in lines[0] and "connection refused" in lines[0]


@pytest.mark.parametrize("levels", ["--warm-levels", "--cold-levels"])
def test_server_killed_during_a_sweep_level(
    tiny_llamacpp: ServerHandle, tmp_path: Path, plateau_cli: PlateauCli, levels: str
) -> None:
    out = tmp_path / "sweep"
    sweep = _plateau(
        "sweep", *plateau_cli.target(tiny_llamacpp), "--out", str(out), "--concurrency", "1,2,4,8", levels,
        "--min-level-time", "2s", "--max-level-time", "4s", "--input-len", "32", "--output-len", "512",
        "--quiet",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and sweep.poll() is None:
            if (out / "result.json").exists() and load_summary(out)["levels"]:
                break
            time.sleep(0.1)
        assert sweep.poll() is None, sweep.communicate()
        time.sleep(1.0)  # into the second level (C=2), which lasts at least --min-level-time
        os.killpg(tiny_llamacpp.pid, signal.SIGKILL)  # a crash, not a graceful shutdown
        _, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    print(f"exit code {sweep.returncode}; stderr: {err.strip()!r}")
    # Exit 1 with one clear line: the sweep did not finish, and says where its levels are.
    assert sweep.returncode == 1 and "Traceback" not in err, err
    assert "the target stopped answering during C=2" in err

    summary = load_summary(out)
    levels = {lv["concurrency"]: lv for lv in summary["levels"]}
    print(
        json.dumps(
            {c: {k: lv[k] for k in ("completed", "failed", "errors", "level_failed")} for c, lv in levels.items()}
        )
    )
    print(f"stop reason: {summary['stop_reason']}; verdict: {summary['verdict']['headline']}")
    # The level finished before the crash is kept as measured.
    assert levels[1]["failed"] == 0 and levels[1]["completed"] > 0
    # The level the crash interrupted is kept, marked failed, with the cause; the sweep goes no further.
    assert sorted(levels) == [1, 2]
    assert levels[2]["level_failed"]
    assert levels[2]["dominant_error"] == "connect"
    assert "connect" in summary["stop_reason"]
    assert summary["plateau"] is None or summary["plateau"]["reached"] is False  # None: no plateau at all
    assert summary["verdict"]["headline"] == "the server stopped answering at C=2 (connections refused or reset)"
    # The dead level ends early instead of spinning through refused connections until its time is up.
    assert levels[2]["failed"] < 200


def test_llamacpp_closing_kept_alive_connections_costs_no_request(
    llamacpp_server: ServerHandle, plateau_cli: PlateauCli
) -> None:
    # llama-server answers a stream with "Keep-Alive: timeout=5, max=100" yet closes the connection
    # when the stream ends; each worker's next request finds its pooled connection closed.
    code, output = plateau_cli.invoke("run", "--url", llamacpp_server.url, "--concurrency", "2",
                                      "--num-requests", "8", "--input-len", "16", "--output-len", "8", "--json",
                                      "--quiet")  # fmt: skip
    assert code == 0, output
    level = json.loads(output)
    assert (level["completed"], level["failed"]) == (8, 0), level["errors"]


def test_llamacpp_closed_connections_cost_no_request_at_high_concurrency(
    tiny_llamacpp: ServerHandle, plateau_cli: PlateauCli
) -> None:
    code, output = plateau_cli.invoke("run", "--url", tiny_llamacpp.url, "--concurrency", "16",
                                      "--num-requests", "160", "--input-len", "16", "--output-len", "16",
                                      "--json", "--quiet")  # fmt: skip
    assert code == 0, output
    level = json.loads(output)
    assert (level["completed"], level["failed"]) == (160, 0), level["errors"]
