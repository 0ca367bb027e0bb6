"""Process hygiene: the twin's child never outlives its parent, signals stop it fast with open
streams, and it listens with a backlog that holds a burst of thousands of connections."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from plateau_bench.sim.embed import ServeOptions, start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.server import LISTEN_BACKLOG, backlog_note, raise_open_files

TINY = get_preset("tiny")
posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _gone(pid: int, timeout_s: float) -> bool:
    """True once ``pid`` has exited (a zombie left to a non-reaping init counts as exited)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


_PARENT = textwrap.dedent("""
    import time
    from plateau_bench.sim.embed import start_sim_server
    from plateau_bench.sim.presets import get_preset
    handle = start_sim_server(get_preset("tiny"))
    print(handle.pid, flush=True)
    time.sleep(120)
""")


@pytest.mark.slow
@posix_only
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_child_ends_when_its_parent_dies(sig: signal.Signals) -> None:
    with subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            assert not _gone(child, 0.3)
            parent.send_signal(sig)
            parent.wait(timeout=10)
            assert _gone(child, 5.0), "the twin's child process outlived its parent"
        finally:
            parent.kill()


async def _open_streams(url: str, n: int) -> tuple[aiohttp.ClientSession, list[asyncio.Task[str]]]:
    """``n`` long streams, each past its first token; the tasks end with how their stream ended."""
    session = aiohttp.ClientSession()
    started = asyncio.Queue[None]()

    async def one() -> str:
        try:
            async with session.post(url + "/v1/completions",
                                    json={"prompt": "a b", "max_tokens": 5000, "stream": True}) as resp:
                first = True
                async for _ in resp.content.iter_any():
                    if first:
                        started.put_nowait(None)
                        first = False
        except aiohttp.ClientError:
            return "dropped"
        return "ended"

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    for _ in range(n):
        await asyncio.wait_for(started.get(), 10)
    return session, tasks


@posix_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_the_child_within_2_s_with_open_streams(sig: signal.Signals) -> None:
    handle = start_sim_server(TINY)
    try:
        assert handle.pid is not None
        session, tasks = await _open_streams(handle.url, 16)
        start = time.monotonic()
        os.kill(handle.pid, sig)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 2.0)
        assert await asyncio.to_thread(_gone, handle.pid, 2.0 - (time.monotonic() - start))
        assert results == ["dropped"] * 16
        await session.close()
    finally:
        handle.stop()


async def test_stopping_the_in_process_server_with_open_streams_is_prompt() -> None:
    handle = start_sim_server(TINY, in_process=True)
    session, tasks = await _open_streams(handle.url, 16)
    start = time.monotonic()
    await asyncio.to_thread(handle.stop)
    assert time.monotonic() - start < 1.0
    assert await asyncio.wait_for(asyncio.gather(*tasks), 1.0) == ["dropped"] * 16
    await session.close()


@pytest.mark.slow
@posix_only
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_serve_sim_within_2_s_with_open_streams(sig: signal.Signals) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "plateau_bench", "serve-sim", "--preset", "tiny", "--port", "0",
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stderr is not None
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        while "Ctrl-C to stop" not in line and line:
            line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        session, tasks = await _open_streams(f"http://127.0.0.1:{match[1]}", 16)
        proc.send_signal(sig)
        rc = await asyncio.wait_for(proc.wait(), 2.0)
        assert rc == 0
        assert await asyncio.wait_for(asyncio.gather(*tasks), 1.0) == ["dropped"] * 16
        await session.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the backlog")
def test_the_listen_backlog_holds_a_burst_of_4096() -> None:
    try:
        cap = int(Path("/proc/sys/net/core/somaxconn").read_text())
    except OSError:
        pytest.skip("no net.core.somaxconn")
    with start_sim_server(TINY, in_process=True) as handle:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{handle.port}"], capture_output=True, text=True,
                             check=True).stdout.split()
    # For a listening socket ss shows the accept backlog in the Send-Q column.
    assert int(out[2]) == min(LISTEN_BACKLOG, cap) and LISTEN_BACKLOG >= 4096


def test_a_capped_backlog_is_named(tmp_path: Path) -> None:
    somaxconn = tmp_path / "somaxconn"
    somaxconn.write_text("1024\n")
    note = backlog_note(4096, somaxconn)
    assert note is not None and "net.core.somaxconn is 1024" in note and "sysctl -w net.core.somaxconn=4096" in note
    somaxconn.write_text("4096\n")
    assert backlog_note(4096, somaxconn) is None
    assert backlog_note(4096, tmp_path / "missing") is None


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the backlog")
async def test_the_backlog_is_what_serve_sim_was_given() -> None:
    server = ServeOptions(backlog=333).server(TINY)
    port = await server.start("127.0.0.1", 0)
    try:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                             check=True).stdout.split()
    finally:
        await server.stop()
    assert int(out[2]) == 333


class _Limits:
    RLIMIT_NOFILE = 7
    RLIM_INFINITY = -1

    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard

    def getrlimit(self, which: int) -> tuple[int, int]:
        return self.soft, self.hard

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        if limits[0] > self.hard != self.RLIM_INFINITY:
            raise ValueError("above the hard limit")
        self.soft = limits[0]


def test_the_server_raises_its_open_file_limit_and_says_when_it_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = _Limits(1024, 524288)
    monkeypatch.setitem(sys.modules, "resource", limits)
    assert raise_open_files(8192) is None and limits.soft == 524288
    limits = _Limits(1024, 2048)
    monkeypatch.setitem(sys.modules, "resource", limits)
    note = raise_open_files(8192)
    assert limits.soft == 2048
    assert note is not None and "the open-file limit is 2,048" in note and "ulimit -n 8256" in note
    limits = _Limits(256, -1)
    monkeypatch.setitem(sys.modules, "resource", limits)
    assert raise_open_files(4096) is None and limits.soft == 4096 + 64
