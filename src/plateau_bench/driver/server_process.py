"""An inference server that plateau-bench starts itself (``plateau tune``): own process group, log kept,
ready when it answers, stopped cleanly.

The command runs in a new session (its own process group), so stopping it ends the workers it
forks too (vLLM's engine core, tokenizer processes); SIGTERM first, SIGKILL after a grace period.
Its output goes to a log file in the run directory, whose last lines are shown when it fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from plateau_bench.errors import PlateauError

STOP_GRACE_S = 20.0
LOG_TAIL = 15


class ServerStartError(PlateauError):
    """The server exited or did not answer in time (the message ends with its log's last lines)."""


def log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().split("\n")[-lines:])


def die_with_parent() -> None:
    """In the started server, before it runs: the kernel sends it SIGTERM when plateau dies, however it dies
    (``kill -9`` included), so no server is left running on its own (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class ServerProcess:
    """One started server: ``await start()``, ``await stop()`` (also as an async context manager)."""

    def __init__(self, argv: list[str], url: str, log_path: Path, *, ready_timeout_s: float = 600.0) -> None:
        self.argv = argv
        self.url = url.rstrip("/")
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s: float | None = None

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            try:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True,
                                             preexec_fn=die_with_parent if sys.platform == "linux" else None)
            except OSError as exc:
                raise ServerStartError(f"cannot start {self.argv[0]}: {exc.strerror or exc}") from None
        await self._wait_ready()
        self.ready_s = time.monotonic() - started

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < deadline:
                if self.proc is not None and self.proc.poll() is not None:
                    raise ServerStartError(f"{self.argv[0]} exited with code {self.proc.returncode} during start-up; "
                                           f"last lines of {self.log_path}:\n{log_tail(self.log_path)}")
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                    async with session.get(f"{self.url}/v1/models") as resp:
                        if resp.status == 200:
                            return
                await asyncio.sleep(0.5)
        await self.stop()
        raise ServerStartError(f"{self.argv[0]} did not answer {self.url}/v1/models within "
                               f"{self.ready_timeout_s:.0f} s; last lines of {self.log_path}:\n"
                               f"{log_tail(self.log_path)}")

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    async def __aenter__(self) -> ServerProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
