"""Signals every command honours: SIGTERM stops a command started in a script's background (where the shell
ignores SIGINT), and a server ``tune`` started dies with plateau, even by ``kill -9``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # what a non-interactive shell does for `cmd &`


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as fh:   # a zombie waiting for its reaper has ended too
        return fh.read().split()[2] == "Z"


@pytest.mark.slow   # a long simulation, stopped after 3 s
@pytest.mark.timeout(60)
def test_sigterm_stops_a_command_started_in_the_background(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "plateau_bench", "sim", "--mode", "steady", "-c", "4096",
                             "--duration", "36000s", "--out", str(tmp_path / "sim")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_ignore_sigint)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=10)   # the whole simulation takes ~50 s here
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("SIGTERM did not stop plateau sim started with SIGINT ignored")
    assert proc.returncode == 143, err
    assert b"stopped by SIGTERM" in err and b"Traceback" not in err


@pytest.mark.slow   # a sweep simulated and calibrated, then a long plan stopped after 3 s
@pytest.mark.timeout(120)
def test_sigterm_stops_plan_while_it_computes(tmp_path: Path) -> None:
    for argv in (["sim", "-c", "1,4,16,64", "--out", str(tmp_path / "sweep")],
                 ["calibrate", str(tmp_path / "sweep"), "--out", str(tmp_path / "model.json")]):
        done = subprocess.run([sys.executable, "-m", "plateau_bench", *argv], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
    proc = subprocess.Popen([sys.executable, "-m", "plateau_bench", "plan", str(tmp_path / "model.json"), "--rate",
                             "50", "--slo", "ttft_p99=2s", "--duration-s", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("plan went on computing after SIGTERM")
    assert proc.returncode == 143 and b"stopped by SIGTERM" in err and b"Traceback" not in err, err


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
@pytest.mark.timeout(30)
def test_a_started_server_dies_with_plateau_even_by_kill_9(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from plateau_bench.driver.server_process import die_with_parent\n"
        "child = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent, start_new_session=True)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not _gone(child)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and not _gone(child):
        time.sleep(0.05)
    assert _gone(child), "the server outlived plateau (kill -9)"
