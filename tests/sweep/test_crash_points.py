"""A sweep killed with SIGKILL at any point, then resumed: every invariant holds afterwards.

The kill points are drawn from a fixed seed over the sweep's first seconds (within a level, between
levels, while the result is being written). After ``--resume`` the sweep is whole: every level counts
``ok + failed == sent`` and has exactly that many records of its kept attempt, and no file of the result
directory holds the secret header's value.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from plateau_bench.store import kept_attempts, load_requests, load_result

SECRET = "s3cr3t-crash-token"
SWEEP = ["sweep", "--concurrency", "2,4,8", "--min-level-time", "1s", "--max-level-time", "2s", "--output-len", "16",
         "--header", f"Authorization: Bearer {SECRET}", "--quiet"]


def _plateau(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "plateau_bench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


@pytest.mark.slow   # three sweeps of a few seconds, each killed, then resumed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sweep_killed_anywhere_resumes_whole(tmp_path: Path, seed: int) -> None:
    out = tmp_path / "sweep"
    victim = _plateau(*SWEEP, "--out", str(out))
    time.sleep(random.Random(seed).uniform(1.5, 7.0))
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    if not (out / "result.json").exists():   # killed before the first write: nothing to resume, start again
        resumed = _plateau(*SWEEP, "--out", str(out), "--overwrite")
    else:
        resumed = _plateau(*SWEEP, "--resume", str(out))
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err.decode()
    result = load_result(out)
    assert sorted(lv.concurrency or 0 for lv in result.levels) == [2, 4, 8]
    records = load_requests(out, attempts=kept_attempts(result))
    for lv in result.levels:
        assert lv.completed + lv.failed == lv.num_requests, lv.label
        assert len(records[lv.label]) == lv.num_requests, (lv.label, len(records[lv.label]), lv.num_requests)
    for path in out.iterdir():
        assert SECRET.encode() not in path.read_bytes(), f"{path.name} holds the secret"
