"""Multi-turn load that fills the KV cache: the verdict names the cache and the growing histories."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_result

from support.loading import Cli


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_per_session_kv_growth_is_diagnosed_as_kv_capacity(cli: Cli, tmp_path: Path) -> None:
    # The tiny twin's cap is 32, but with 16,384 KV tokens only ~8 conversations of 8 turns (up to ~2,100
    # tokens each by the last turn) fit: the cache binds first, and the sessions evict each other's history.
    config = get_preset("tiny").with_overrides(kv_tokens=16_384)
    out = tmp_path / "sweep"
    with start_sim_server(config, speed=4.0) as twin:
        result = cli(
            "sweep", "--url", twin.url, "--endpoint", "chat", "--sessions", "64", "--turns", "8", "--input-len",
            "200", "--output-len", "64", "--concurrency", "4,8,16,32", "--min-level-time", "2s",
            "--max-level-time", "4s", "--out", str(out), "--quiet", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    saved = load_result(out)
    verdict = saved.verdict
    assert verdict is not None and verdict.constraint == "kv_capacity", result.output
    assert any(e.startswith("multi-turn sessions: the prompt grows with the history") for e in verdict.evidence)
    assert any("evict each other's history" in e for e in verdict.evidence)
    rates = [lv.telemetry.prefix_cache_hit_rate for lv in saved.levels]
    assert all(r is not None for r in rates) and rates[0] > 2 * rates[-1]   # type: ignore[operator]
    assert "Prefix cache hit rate by level (server): C=4 " in result.output
