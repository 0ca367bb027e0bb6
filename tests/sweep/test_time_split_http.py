"""The server's own time split end to end: serve-sim publishes vLLM's request-phase histograms, the
scraper keeps them, the level builder splits each level's window, and the sweep's output, ``diagnose``
and the HTML report show it.

The twin's cap is 4: at C=2 nothing waits, at C=32 most of the time to first token is queueing (C=8 makes
the plateau the verdict explains).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from plateau_bench.result import ResultFile
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_result

from support.loading import Cli

pytestmark = pytest.mark.slow  # a real-time sweep over HTTP and a report: ~15 s on two cores

CAP = 4


def test_each_level_is_split_and_queueing_is_where_ttft_grows(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny").with_overrides(max_num_seqs=CAP)) as twin:
        result = cli("sweep", "--url", twin.url, "--out", str(out), "--concurrency", "2,8,32", "--min-level-time",
                     "2s", "--max-level-time", "4s", "--input-len", "32", "--output-len", "64")
    assert result.exit_code == 0, result.output
    assert "server's own time split" in result.output
    saved: ResultFile = load_result(out)
    levels = {lv.concurrency: lv for lv in saved.levels}
    for lv in levels.values():
        split = lv.time_split
        assert split is not None, msgspec.json.encode(lv.telemetry)
        assert split.engine == "vllm"
        for phase in (split.queue_ms, split.prefill_ms, split.decode_ms, split.step_tokens):
            assert phase is not None and phase.mean is not None and phase.observations >= 5
    low, high = levels[2].time_split, levels[32].time_split
    assert low is not None and high is not None
    assert low.queue_ms is not None and high.queue_ms is not None and high.prefill_ms is not None
    assert low.queue_ms.mean is not None and high.queue_ms.mean is not None and high.prefill_ms.mean is not None
    ttft = levels[32].ttft_ms.mean
    assert ttft is not None
    # 32 clients on 4 slots: each waits ~7 turns of the others; the queue is most of what the client saw
    assert high.queue_ms.mean > 0.6 * ttft and high.queue_ms.mean > 5 * high.prefill_ms.mean
    assert low.queue_ms.mean < 0.1 * high.queue_ms.mean
    # what the server does not account for is the HTTP path on this host: small, and not the queue
    assert high.outside_engine_ms is not None and abs(high.outside_engine_ms) < 0.2 * ttft
    assert high.step_tokens is not None and high.step_tokens.mean is not None and high.step_tokens.mean <= CAP + 32

    diagnosed = cli("diagnose", str(out))
    assert diagnosed.exit_code == 0, diagnosed.output
    assert "server's own time split" in diagnosed.output and "outside the engine" in diagnosed.output
    page = tmp_path / "report.html"
    reported = cli("report", str(out), "--html", str(page))
    assert reported.exit_code == 0, reported.output
    assert "The server's own time split" in page.read_text()
