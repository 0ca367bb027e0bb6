"""A trace in virtual time: its schedule, its lengths, and the reuse its hash ids record."""

from __future__ import annotations

from pathlib import Path

import msgspec

from plateau_bench.sim.level import SimResult, simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.trace_keys import trace_block_keys
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.store import load_levels, load_requests
from plateau_bench.workload.trace import load_trace

from support.loading import Cli

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
TINY = get_preset("tiny")


def _replay(scale: float, caching: bool = True) -> tuple[SimResult, list[int]]:
    trace = load_trace(TRACES / "mooncake.jsonl")
    config = TINY if caching else msgspec.structs.replace(TINY, prefix_caching=False)
    level = LevelSpec(mode="rate", rate=trace.rate(scale), num_requests=len(trace.rows), time_scale=scale)
    result = simulate_level(config, level, WorkloadSpec(), lengths=[(r.input_len, r.output_len) for r in trace.rows],
                            offsets_ns=trace.offsets_ns(scale), block_keys=trace_block_keys(trace, 16))
    return result, trace.offsets_ns(scale)


def test_requests_arrive_at_the_traces_times_with_its_lengths() -> None:
    result, offsets = _replay(4.0)
    records = sorted(result.records, key=lambda r: r.index)
    assert all(abs(r.scheduled_ns - o) <= 1 for r, o in zip(records, offsets, strict=True))
    trace = load_trace(TRACES / "mooncake.jsonl")
    assert [(r.prompt_tokens, r.output_tokens) for r in records] == [(t.input_len, t.output_len) for t in trace.rows]


def test_hash_ids_hit_the_prefix_cache_as_recorded() -> None:
    trace = load_trace(TRACES / "mooncake.jsonl")
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
    result, _ = _replay(1.0)
    assert result.state.prefix_cache_hits == expected > 0
    uncached, _ = _replay(1.0, caching=False)
    assert uncached.state.prefix_cache_hits == 0


def test_plateau_sim_replays_a_trace_at_each_time_scale(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = cli("sim", "--trace", str(TRACES / "plain.csv"), "--time-scale", "1,16", "--out", str(out))
    assert result.exit_code == 0, result.output
    levels = load_levels(out)
    assert [lv.label for lv in levels] == ["trace x1", "trace x16"]
    assert all(lv.completed == 500 for lv in levels)
    assert len(load_requests(out)["trace x16"]) == 500
