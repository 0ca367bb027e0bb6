"""Adaptive sweeps against real servers whose concurrency cap is known: vLLM ``--max-num-seqs 4`` and
llama.cpp ``--parallel 4`` (mid model, so batching four slots pays). The sweep should find the
plateau at the cap, put the knee at or below it, and name an admission cap of 4, both with the
server's /metrics and from the client side alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from plateau_bench.testing.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

CAP = 4  # --max-num-seqs / --parallel of the session servers (conftest)
SHORT_LEVELS = ["--min-level-time", "2s", "--max-level-time", "8s", "--max-concurrency", "16",
                "--input-len", "32", "--output-len", "64"]  # fmt: skip


def _figures(summary: dict[str, Any]) -> str:
    levels = sorted(summary["levels"], key=lambda lv: lv["concurrency"])
    table = [
        f"C={lv['concurrency']}: {lv['output_throughput']:.0f} tok/s, decoding C "
        f"{lv['decoding_concurrency']:.1f}, {lv['completed']}/{lv['failed']} ok/failed"
        for lv in levels
    ]
    return json.dumps(
        {"levels": table, "plateau": summary["plateau"], "knee": summary["knee"], "verdict": summary["verdict"]},
        indent=1,
    )


@pytest.mark.parametrize("metrics", [True, False], ids=["metrics", "client-only"])
@pytest.mark.parametrize("server_name", ["vllm_server", "llamacpp_server"])
def test_adaptive_sweep_finds_the_admission_cap(
    server_name: str, metrics: bool, request: pytest.FixtureRequest, tmp_path: Path, plateau_cli: PlateauCli
) -> None:
    server: ServerHandle = request.getfixturevalue(server_name)
    flags = [] if metrics else ["--no-metrics"]
    summary = plateau_cli.saved(tmp_path / "sweep", "sweep", *plateau_cli.target(server), *SHORT_LEVELS, *flags)
    figures = _figures(summary)
    print(f"{server.kind} ({'with' if metrics else 'without'} /metrics):\n{figures}")

    assert all(lv["failed"] == 0 for lv in summary["levels"]), figures
    plateau, knee, verdict = summary["plateau"], summary["knee"], summary["verdict"]
    assert plateau["reached"], figures
    assert CAP <= plateau["concurrency"] <= 2 * CAP, figures
    assert knee["bracket"][0] <= CAP, figures
    assert verdict["constraint"] == "admission_cap", figures
    assert verdict["estimated_cap"] == CAP, figures

    if metrics:
        assert summary["target"]["engine"] == server.kind
        assert any("(/metrics)" in line for line in verdict["evidence"]), figures
        if server.kind == "llamacpp":  # /props total_slots states the cap outright
            assert f"the server states its cap: {CAP}" in verdict["evidence"], figures
    else:
        assert not any("/metrics" in line for line in verdict["evidence"]), figures
        assert not any("states its cap" in line for line in verdict["evidence"]), figures
