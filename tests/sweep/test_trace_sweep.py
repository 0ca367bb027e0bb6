"""A trace replayed at increasing time scales: the plan's steps, then a sweep against the twin."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.result import LevelResult
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_levels, load_summary
from plateau_bench.sweep.trace_plan import TracePlan, keeps_up

from support.builders import level_result
from support.loading import Cli

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def done(plan: TracePlan, scale: float, served_share: float) -> LevelResult:
    level = plan.level(scale)
    rate = level.rate or 0.0
    return level_result(label=level.label, mode="rate", rate=rate, num_requests=plan.requests,
                        completed=plan.requests, request_throughput=served_share * rate)


def test_auto_doubles_until_the_replay_stops_keeping_up() -> None:
    plan = TracePlan(rate=10.0, requests=50)
    first = plan.next([])
    assert first.level is not None and first.label == "trace x1" and first.level.rate == 10.0
    levels = [done(plan, 1, 0.99), done(plan, 2, 0.98)]
    step = plan.next(levels)
    assert step.label == "trace x4" and step.level is not None and step.level.rate == 40.0
    levels.append(done(plan, 4, 0.6))
    end = plan.next(levels)
    assert end.level is None and "stopped keeping up at x4" in end.reason
    assert keeps_up(levels[0], 0.2) and not keeps_up(levels[2], 0.2)


def test_given_scales_are_measured_in_order_and_the_top_scale_ends_auto() -> None:
    plan = TracePlan(rate=10.0, requests=50, scales=(2.0, 8.0))
    assert plan.next([]).label == "trace x2"
    assert plan.next([done(plan, 2, 1.0)]).label == "trace x8"
    assert plan.next([done(plan, 2, 1.0), done(plan, 8, 0.1)]).level is None
    capped = TracePlan(rate=10.0, requests=50, max_scale=2.0)
    assert "x2 reached" in capped.next([done(capped, 1, 1.0), done(capped, 2, 1.0)]).reason


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_a_trace_sweep_on_the_twin(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    with start_sim_server(get_preset("tiny"), in_process=True) as twin:
        result = cli("sweep", "--url", twin.url, "--trace", str(TRACES / "plain.jsonl"), "--time-scale", "8,256",
                     "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    levels = load_levels(out)
    assert [lv.label for lv in levels] == ["trace x8", "trace x256"]
    assert all(lv.completed == lv.num_requests == 50 for lv in levels)
    # 80 requests/s is easy for the twin; 2,560 requests/s (50 within 20 ms) queues behind its cap of 32.
    assert keeps_up(levels[0], 0.2) and not keeps_up(levels[1], 0.2)
    settings = load_summary(out)["spec"]["sweep"]
    assert settings["trace"] is True and settings["time_scales"] == [8.0, 256.0]
