"""Trace replay: requests at their recorded times (scaled), their send lag recorded, over real HTTP.

The 5 ms send-lag figure at 100 requests/s is a performance figure: ``bench/trace_send_lag.py``
measures it. Here the schedule itself is checked exactly, and that the lag is what the result records.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.driver.load import run_level
from plateau_bench.records import RequestRecord
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec
from plateau_bench.store import load_levels, load_requests
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.trace import load_trace

from support.loading import Cli, plateau

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


class FakeSender:
    """Answers each request after ``service_s``; keeps what it was asked."""

    def __init__(self, t0_ns: int, service_s: float) -> None:
        self.t0_ns = t0_ns
        self.service_s = service_s
        self.calls: list[dict[str, object]] = []

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        self.calls.append({"index": index, "prompt": prompt})
        sent = time.monotonic_ns() - self.t0_ns
        await asyncio.sleep(self.service_s)
        end = time.monotonic_ns() - self.t0_ns
        return RequestRecord(index=index, worker=worker, scheduled_ns=scheduled_ns, sent_ns=sent, end_ns=end,
                             first_token_ns=end, prompt_tokens=prompt_tokens, output_tokens=max_tokens)


async def test_the_open_loop_follows_the_given_offsets() -> None:
    t0 = time.monotonic_ns()
    sender = FakeSender(t0, 0.001)
    offsets = [0, 5_000_000, 5_000_000, 20_000_000, 31_000_000]
    prompts = [Prompt(f"p{i}", 10 + i, 2) for i in range(5)]
    level = LevelSpec(mode="rate", rate=100.0, num_requests=5, time_scale=1.0)
    records = await run_level(sender, prompts, level, t0_ns=t0, offsets_ns=offsets)
    by_index = sorted(records, key=lambda r: r.index)
    start = by_index[0].scheduled_ns
    assert [r.scheduled_ns - start for r in by_index] == offsets
    assert [c["prompt"] for c in sorted(sender.calls, key=lambda c: int(c["index"]))] == [p.text for p in prompts]  # type: ignore[call-overload]


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_replay_on_the_twin_keeps_the_schedule_and_records_the_lag(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny")) as twin:
        result = cli("run", "--url", twin.url, "--trace", str(TRACES / "plain.jsonl"), "--time-scale", "8", "--out",
                     str(out), "--quiet")
    assert result.exit_code == 0, result.output
    trace = load_trace(TRACES / "plain.jsonl")
    level = load_levels(out)[0]
    assert level.label == "trace x8" and level.completed == level.num_requests == len(trace.rows)
    assert level.rate == pytest.approx(trace.rate(8.0))
    records = sorted(load_requests(out)["trace x8"], key=lambda r: r.index)
    start = records[0].scheduled_ns
    assert [r.scheduled_ns - start for r in records] == trace.offsets_ns(8.0)
    assert [(r.prompt_tokens, r.output_tokens) for r in records] == [(t.input_len, t.output_len) for t in trace.rows]
    lags = np.array([(r.sent_ns - r.scheduled_ns) / 1e6 for r in records])
    assert lags.min() >= 0
    assert level.send_lag_ms.max == pytest.approx(lags.max()) and level.send_lag_ms.p50 == pytest.approx(
        float(np.median(lags)))


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_mooncake_hash_ids_hit_the_twins_prefix_cache_as_recorded(cli: Cli, tmp_path: Path) -> None:
    trace = load_trace(TRACES / "mooncake.jsonl")
    with start_sim_server(get_preset("tiny"), in_process=True, speed=4.0) as twin:
        result = cli("run", "--url", twin.url, "--trace", str(TRACES / "mooncake.jsonl"), "--time-scale", "8",
                     "--out", str(tmp_path / "run"), "--quiet")
        with urllib.request.urlopen(twin.url + "/metrics", timeout=10) as resp:
            families = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
    assert result.exit_code == 0, result.output
    # Each request finds cached the leading blocks whose ids came before (512 tokens each), as long as
    # its last block is not the one limited by the (tokens - 1) rule; the twin's cache holds them all.
    seen: set[int] = set()
    expected = 0
    for row in trace.rows:
        run = 0
        for h in row.hash_ids:
            if h not in seen:
                break
            run += 1
        expected += min(run * 512, (row.input_len - 1) // 16 * 16)
        seen.update(row.hash_ids)
    assert families["vllm:prefix_cache_hits"].samples[0].value == expected > 0
    assert families["vllm:prefix_cache_queries"].samples[0].value == sum(r.input_len for r in trace.rows)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "--trace", "missing.csv"], "--trace missing.csv: cannot read the file"),
    (["run", "--trace", str(TRACES / "plain.csv"), "--concurrency", "4"], "--trace sets its own schedule"),
    (["run", "--trace", str(TRACES / "plain.csv"), "--time-scale", "0"], "--time-scale must be > 0"),
    (["run", "--trace", str(TRACES / "plain.csv"), "--sessions", "2"], "cannot be combined with --sessions"),
])
def test_bad_trace_flags_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(argv, capsys)
    assert code == 2 and message in err and err.count("\n") == 1
