"""A sweep killed with SIGKILL at any point, or whose disk fills at any point, then resumed: every
invariant holds afterwards.

The kill points are drawn from a fixed seed over the sweep's first seconds (within a level, between
levels, while the result is being written); so are the sizes at which the disk fills (a file size limit,
``RLIMIT_FSIZE``: the write that crosses it is cut short, as on a full disk, then fails). After
``--resume`` the sweep is whole: every level counts ``ok + failed == sent`` and has exactly that many
records of its kept attempt, and no file of the result directory holds the secret header's value. Every
command here runs under a 4 GiB address-space limit.
"""

from __future__ import annotations

import random
import resource
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


MEMORY_CAP = 4 * 2**30


def _plateau(*args: str, file_size: int | None = None) -> subprocess.Popen[bytes]:
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        if file_size is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return subprocess.Popen([sys.executable, "-m", "plateau_bench", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=limits)


def _resumed_whole(out: Path) -> None:
    if not (out / "result.json").exists():   # stopped before the first write: nothing to resume, start again
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


@pytest.mark.slow   # three sweeps of a few seconds, each killed, then resumed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sweep_killed_anywhere_resumes_whole(tmp_path: Path, seed: int) -> None:
    out = tmp_path / "sweep"
    victim = _plateau(*SWEEP, "--out", str(out))
    time.sleep(random.Random(seed).uniform(1.5, 7.0))
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=30)
    _resumed_whole(out)


@pytest.mark.slow   # three sweeps stopped by a full disk, then resumed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sweep_whose_disk_fills_anywhere_resumes_whole(tmp_path: Path, seed: int) -> None:
    out = tmp_path / "sweep"
    victim = _plateau(*SWEEP, "--out", str(out), file_size=random.Random(seed).randint(2_000, 150_000))
    _, err = victim.communicate(timeout=240)
    lines = err.decode().strip().splitlines()
    assert victim.returncode == 2 and len(lines) == 1 and "Traceback" not in err.decode(), err.decode()
    assert lines[0].startswith(f"plateau: error: cannot write to {out}") and "File too large" in lines[0]
    _resumed_whole(out)
