"""The twin's prefix cache over real HTTP: shared prefixes from ``plateau run`` hit it, /metrics counts it."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_requests

from support.loading import Cli

TINY = get_preset("tiny")


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f.samples[0].value for f in text_string_to_metric_families(text) if f.type == "counter"}


def _run_prefixes(cli: Cli, url: str, out: Path) -> None:
    result = cli("run", "--url", url, "--concurrency", "8", "--num-requests", "200", "--prefix-groups", "4",
                 "--prefix-len", "256", "--input-len", "32", "--output-len", "8", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output


def test_shared_prefixes_hit_the_twins_cache_exactly(cli: Cli, tmp_path: Path) -> None:
    with start_sim_server(TINY, speed=4.0, in_process=True) as twin:
        _run_prefixes(cli, twin.url, tmp_path / "run")
        counters = _counters(twin.url)
    records = load_requests(tmp_path / "run")["C=8"]
    assert len(records) == 200 and all(r.error is None for r in records)
    # The server's usage report: exactly prefix + suffix tokens, each request.
    assert {r.prompt_tokens for r in records} == {288}
    assert counters["vllm:prefix_cache_queries"] == 200 * 288
    # Each group's first request computes its 16 prefix blocks; the other 196 find all 256 tokens cached.
    assert counters["vllm:prefix_cache_hits"] == (200 - 4) * 256


def test_no_prefix_cache_counts_no_hits(cli: Cli, tmp_path: Path) -> None:
    config = msgspec.structs.replace(TINY, prefix_caching=False)
    with start_sim_server(config, speed=4.0, in_process=True) as twin:
        _run_prefixes(cli, twin.url, tmp_path / "run")
        counters = _counters(twin.url)
    assert counters["vllm:prefix_cache_queries"] == 0 and counters["vllm:prefix_cache_hits"] == 0
