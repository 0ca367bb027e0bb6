"""The server's own time split against vLLM (CPU build, ``--max-num-seqs 4``): its request-phase histograms
are read on every level, and past the cap the time to first token grows in the queue, not in prefill.

A fixed grid of 1, 4 and 16 (four times the cap) with 64-token outputs: at C=16 each request waits about
three turns of the others before it is scheduled, so the growth of the client's mean TTFT from C=1 must
be mostly the server's queue time; a split that were missing, or queue and prefill read the wrong way
round, fails. A client that stalled (the diagnosis's own threshold) is skipped with the figure, as the
other real-server sweeps do: its TTFT is not the server's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from plateau_bench.analysis.diagnosis import STALL_MS

from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

CAP = 4  # --max-num-seqs of the session's vLLM server (conftest)
LEVELS = ["--concurrency", "1,4,16", "--min-level-time", "3s", "--max-level-time", "12s", "--input-len", "32",
          "--output-len", "64"]


def _figures(levels: list[dict[str, Any]]) -> str:
    return json.dumps([{"C": lv["concurrency"], "ttft_mean_ms": lv["ttft_ms"].get("mean"),
                        "time_split": lv.get("time_split"), "lag_p99_ms": lv["client"].get("loop_lag_ms_p99")}
                       for lv in levels], indent=1)


def _mean(split: dict[str, Any], phase: str) -> float:
    value = (split.get(phase) or {}).get("mean")
    assert value is not None, f"{phase} unknown: {split}"
    return float(value)


@pytest.mark.timeout(900)
def test_every_level_is_split_and_the_ttft_grows_in_the_queue(
        vllm_server: ServerHandle, plateau_cli: PlateauCli, tmp_path: Path) -> None:
    summary = plateau_cli.saved(tmp_path / "split", "sweep", *plateau_cli.target(vllm_server), *LEVELS)
    levels = sorted(summary["levels"], key=lambda lv: lv["concurrency"])
    figures = _figures(levels)
    print(f"vLLM time split:\n{figures}")
    lag = max(lv["client"].get("loop_lag_ms_p99", 0.0) for lv in levels)
    if lag >= STALL_MS:
        pytest.skip(f"the load generator stalled (event-loop lag p99 {lag:.0f} ms >= {STALL_MS:.0f} ms): its TTFT "
                    "is not the server's to split")
    assert [lv["concurrency"] for lv in levels] == [1, 4, 16], figures
    for lv in levels:
        split = lv.get("time_split")
        assert split is not None and split["engine"] == "vllm", figures
        for phase in ("queue_ms", "prefill_ms", "decode_ms", "step_tokens"):
            assert _mean(split, phase) >= 0, figures
        assert split["outside_engine_ms"] is not None, figures
    low, high = levels[0], levels[-1]
    ttft_growth = high["ttft_ms"]["mean"] - low["ttft_ms"]["mean"]
    queue_growth = _mean(high["time_split"], "queue_ms") - _mean(low["time_split"], "queue_ms")
    prefill_growth = _mean(high["time_split"], "prefill_ms") - _mean(low["time_split"], "prefill_ms")
    checks = {
        "TTFT grows past the cap": ttft_growth > 0,
        "the queue carries most of that growth": queue_growth >= 0.5 * ttft_growth,
        "prefill carries less of it than the queue": prefill_growth < queue_growth,
        "the queue is most of the TTFT at 4x the cap": _mean(high["time_split"], "queue_ms")
        >= 0.5 * high["ttft_ms"]["mean"],
    }
    unmet = [name for name, held in checks.items() if not held]
    assert not unmet, f"unmet: {unmet}\n{figures}"
