from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from plateau_bench.analysis.compare import Comparison, RunData, compare_runs, curve_of, users_at_target
from plateau_bench.analysis.crossover import Curve, find_crossovers, interpolate_log2
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.result import Latency, LevelResult, RunSpec
from plateau_bench.result_parts import Interval, RepeatStats

from support.builders import level_result, request_record

GRID = (1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256)


def level(c: int, thr: float, *, ttft_ms: float | None = 100.0, tpot_ms: float | None = 20.0,
          ci: float | None = None, mode: str = "burst") -> LevelResult:
    return level_result(c, thr, mode=mode, request_throughput=c / 10, duration_s=10.0, window_end_s=10.0,
                        throughput_ci_rel=ci, ttft_ms=Latency(p50=ttft_ms, p90=ttft_ms, p99=ttft_ms),
                        tpot_ms=Latency(p50=tpot_ms, p90=tpot_ms, p99=tpot_ms))


def run(name: str, thr: Sequence[float], grid: Sequence[int] = GRID, **kw: object) -> RunData:
    return RunData(name, tuple(level(c, t) for c, t in zip(grid, thr, strict=True)), **kw)  # type: ignore[arg-type]


def saturating(top: float, half: float, grid: Sequence[int] = GRID) -> list[float]:
    """A throughput curve that rises and saturates at ``top`` (half of it at C=``half``)."""
    return [top * c / (c + half) for c in grid]


def curve(r: RunData) -> Curve:
    return curve_of(r)


def spec(**tree: Any) -> RunSpec:
    """A saved spec from its JSON form (``target`` needs a ``url``)."""
    return msgspec.convert(tree, RunSpec)


def test_interpolation_is_linear_in_log2_and_never_extrapolates() -> None:
    xs, ys = [1, 4, 16], [10.0, 30.0, 50.0]
    assert interpolate_log2(xs, ys, 4) == 30.0
    assert interpolate_log2(xs, ys, 2) == pytest.approx(20.0)   # halfway in log2 between 1 and 4
    assert interpolate_log2(xs, ys, 8) == pytest.approx(40.0)
    assert interpolate_log2(xs, ys, 0.5) is None
    assert interpolate_log2(xs, ys, 32) is None


def test_no_crossover_when_one_curve_leads_everywhere() -> None:
    a, b = run("a", saturating(4000, 20)), run("b", saturating(2000, 20))
    pair = find_crossovers(curve(a), curve(b))
    assert pair.crossovers == ()
    assert pair.leader_low == pair.leader_high == "a"
    assert pair.common_range == (1, 256)


def test_one_crossover_lies_in_its_bracket_where_the_curves_meet() -> None:
    # b starts lower but saturates higher: it overtakes a between two measured levels.
    a, b = run("a", saturating(2600, 30)), run("b", saturating(4000, 55))
    ca, cb = curve(a), curve(b)
    pair = find_crossovers(ca, cb)
    assert len(pair.crossovers) == 1
    x = pair.crossovers[0]
    assert (x.leader_below, x.leader_above) == ("a", "b")
    lo, hi = x.bracket
    assert lo < x.concurrency < hi and lo in GRID and hi in GRID
    assert GRID.index(hi) == GRID.index(lo) + 1
    assert ca.at(x.concurrency) == pytest.approx(cb.at(x.concurrency))
    assert x.per_user_tok_s == pytest.approx(x.throughput / x.concurrency)
    # The measured levels on either side agree with who leads.
    assert ca.at(lo) > cb.at(lo) and ca.at(hi) < cb.at(hi)  # type: ignore[operator]


def test_two_crossovers_when_curves_cross_twice() -> None:
    base = saturating(3000, 20)
    bumped = [t * (1.3 if 8 <= c <= 32 else 0.9) for c, t in zip(GRID, base, strict=True)]
    pair = find_crossovers(curve(run("a", base)), curve(run("b", bumped)))
    assert [(x.leader_below, x.leader_above) for x in pair.crossovers] == [("a", "b"), ("b", "a")]
    assert pair.crossovers[0].bracket == (4, 8)
    assert pair.crossovers[1].bracket == (32, 64)
    assert pair.leader_low == pair.leader_high == "a"


def test_identical_runs_tie_everywhere() -> None:
    thr = saturating(3000, 20)
    comp = compare_runs([run("a", thr), run("b", thr)])
    pair = comp.pairs[0]
    assert pair.crossovers == () and pair.leader_low is None
    assert all(row.values[0] == row.values[1] for row in comp.aligned)


def test_a_lead_within_the_noise_is_a_tie() -> None:
    grid = (1, 2, 4, 8, 16)
    a = RunData("a", tuple(level(c, 100.0 * c, ci=0.05) for c in grid))
    wiggle = {4: 1.02, 8: 1.01}   # b ahead by 1-2 % at two levels, inside +-5 % CIs
    b = RunData("b", tuple(level(c, 100.0 * c * wiggle.get(c, 0.8), ci=0.05) for c in grid))
    pair = find_crossovers(curve(a), curve(b))
    assert pair.crossovers == ()
    assert pair.leader_low == pair.leader_high == "a"


def test_alignment_interpolates_where_grids_differ() -> None:
    a = run("a", [100.0, 400.0], grid=(1, 4))
    b = run("b", [150.0, 300.0], grid=(2, 8))
    comp = compare_runs([a, b])
    rows = {row.concurrency: row for row in comp.aligned}
    assert set(rows) == {1, 2, 4, 8}
    assert rows[2].values[0] == pytest.approx(250.0) and rows[2].measured == (False, True)
    assert rows[1].values[1] is None and rows[8].values[0] is None   # never extrapolated
    assert comp.pairs[0].common_range == (2, 4)
    # Rows are keyed by run name, in the order the runs were given.
    assert list(rows[2].runs) == ["a", "b"]
    assert rows[2].runs["b"].output_throughput == 150.0 and rows[2].runs["b"].measured
    assert rows[8].runs["a"].output_throughput is None and not rows[8].runs["a"].measured


def test_run_summary_keeps_the_curve_and_its_best_level() -> None:
    comp = compare_runs([run("a", [100.0, 400.0, 300.0], grid=(1, 4, 8)), run("b", [150.0, 300.0], grid=(2, 8))])
    a = comp.runs[0]
    assert [(p.concurrency, p.output_throughput) for p in a.levels] == [(1, 100.0), (4, 400.0), (8, 300.0)]
    assert a.concurrencies == (1, 4, 8) and a.throughputs == (100.0, 400.0, 300.0)
    assert (a.best.concurrency, a.best.output_throughput) == (4, 400.0)
    assert (a.best_concurrency, a.best_throughput) == (4, 400.0)


def test_a_single_level_run_is_compared_without_crossover() -> None:
    a = run("a", saturating(3000, 20))
    single = run("one", [900.0], grid=(16,))
    comp = compare_runs([a, single])
    pair = comp.pairs[0]
    assert pair.common_range == (16, 16) and pair.crossovers == ()
    assert pair.leader_low == ("a" if curve(a).at(16) > 900 else "one")  # type: ignore[operator]
    assert comp.runs[1].plateau is None and comp.runs[1].best_concurrency == 16


def test_disjoint_ranges_have_no_common_range() -> None:
    pair = find_crossovers(curve(run("a", [1.0, 2.0], grid=(1, 2))), curve(run("b", [3.0, 4.0], grid=(8, 16))))
    assert pair.common_range is None and pair.crossovers == ()


def test_crossovers_for_every_pair() -> None:
    runs = [run("a", saturating(2000, 10)), run("b", saturating(3000, 30)), run("c", saturating(4000, 60))]
    comp = compare_runs(runs)
    assert [p.runs for p in comp.pairs] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert [(p.first, p.second) for p in comp.pairs] == [p.runs for p in comp.pairs]
    assert all(x.runs == p.runs for p in comp.pairs for x in p.crossovers)


def _slo_runs() -> list[RunData]:
    # TTFT grows with concurrency; "fast" has a lower TTFT but a lower ceiling.
    fast = RunData("fast", tuple(level(c, 100.0 * min(c, 32), ttft_ms=50.0 * c) for c in GRID))
    big = RunData("big", tuple(level(c, 80.0 * min(c, 128), ttft_ms=200.0 * c) for c in GRID))
    return [fast, big]


def test_slo_capacity_and_winner_per_profile() -> None:
    comp = compare_runs(_slo_runs(), [parse_slo("ttft_p99=2s"), parse_slo("ttft_p99=100ms")])
    loose, tight = comp.slo
    fast, big = loose.runs
    assert fast.max_concurrency == 32 and big.max_concurrency == 8
    assert fast.max_throughput == 3200.0 and big.max_throughput == 640.0
    assert loose.winner == "fast"
    # Level-wide goodput without saved requests: all requests per second when the level meets.
    assert [lv.goodput_rps > 0 for lv in fast.levels] == [lv.meets for lv in fast.levels]
    assert {lv.goodput_source for lv in fast.levels} == {"level"}
    assert tight.runs[1].max_concurrency is None and tight.winner == "fast"


def test_goodput_from_requests_counts_requests_meeting_every_bound() -> None:
    lv = level(2, 100.0, ttft_ms=900.0)
    good = request_record(0, ttft_ms=500, e2e_ms=2000, output_tokens=10)
    late = request_record(1, ttft_ms=1500, e2e_ms=3000, output_tokens=10)
    with_requests = RunData("r", (lv,), requests={"C=2": [good, late]})
    other = RunData("o", (level(2, 50.0),))
    comp = compare_runs([with_requests, other], [parse_slo("ttft_p99=1s")])
    row = comp.slo[0].runs[0].levels[0]
    assert row.goodput_source == "requests"
    assert row.goodput_rps == pytest.approx(1 / lv.duration_s)


def test_cost_per_million_tokens_and_per_gpu() -> None:
    # $3.60/GPU-hour on one GPU is $0.001/s; at 1,000 tok/s a million tokens take 1,000 s: $1.
    flat = RunData("flat", tuple(level(c, 1000.0) for c in (1, 2, 4, 8)))
    double = RunData("double", tuple(level(c, 1000.0) for c in (1, 2, 4, 8)))
    comp = compare_runs([flat, double], [parse_slo("ttft_p99=1s")], gpu_cost=3.6, gpus=[1, 2])
    one, two = comp.runs
    assert one.cost_per_mtok == pytest.approx(1.0)
    assert two.cost_per_mtok == pytest.approx(2.0)
    assert two.tok_s_per_gpu == pytest.approx(500.0)
    assert one.slo_cost_per_mtok == pytest.approx((1.0,))


def test_users_at_a_latency_target() -> None:
    # TPOT grows with C; at 101 tokens E2E = 100 ms + 100 x TPOT.
    cv = curve(RunData("r", tuple(level(c, 10.0 * c, tpot_ms=10.0 + c) for c in GRID)))
    target_ms = 100 + 100 * (10 + 20)          # met at C=16 (2,700 ms), missed at C=24 (3,500 ms)
    users = users_at_target(cv, 101, target_ms)
    assert 16 <= users.users < 24 and not users.at_least
    estimates = {e.concurrency: e.e2e_ms for e in users.estimated_e2e_ms}
    assert estimates[16] <= target_ms < estimates[24]  # type: ignore[operator]
    assert dict(users.estimates_ms) == estimates
    assert users_at_target(cv, 101, 1e9).at_least
    assert users_at_target(cv, 101, 1.0).users == 0


def test_workload_differences_are_warned() -> None:
    a = run("a", [1.0, 2.0], grid=(1, 2), spec=spec(workload={"input_len": 128, "output_len": 512},
                                                   target={"url": "http://a", "endpoint": "completions"}))
    b = run("b", [1.0, 2.0], grid=(1, 2), spec=spec(workload={"input_len": 128, "output_len": 256},
                                                   target={"url": "http://b", "endpoint": "chat"}))
    warnings = compare_runs([a, b]).warnings
    assert len(warnings) == 2
    assert "output_len (a=512, b=256)" in warnings[0]
    assert "endpoint" in warnings[1]
    assert compare_runs([a, a.__class__("c", a.levels, a.spec)]).warnings == ()


@pytest.mark.parametrize("kwargs,fragment", [
    ({"gpu_cost": -1.0, "gpus": [1, 1]}, "must not be negative"),
    ({"gpu_cost": 2.5, "gpus": [4]}, "give one per run"),
    ({"gpu_cost": 2.5}, "needs --gpus"),
    ({"response_tokens": 100}, "go together"),
])
def test_bad_options_are_one_sentence(kwargs: dict[str, object], fragment: str) -> None:
    runs = [run("a", [1.0], grid=(1,)), run("b", [2.0], grid=(1,))]
    with pytest.raises(ConfigError, match=fragment):
        compare_runs(runs, **kwargs)  # type: ignore[arg-type]


def test_one_run_is_not_a_comparison() -> None:
    with pytest.raises(ConfigError, match="at least two runs"):
        compare_runs([run("a", [1.0], grid=(1,))])


def test_missing_slo_metric_is_a_results_error() -> None:
    runs = [run("a", [1.0], grid=(1,)), run("b", [2.0], grid=(1,))]
    with pytest.raises(ResultsError, match="no itl_p99 measurements"):
        compare_runs(runs, [parse_slo("itl_p99=50ms")])


def test_the_comparison_encodes_as_plain_json_and_back() -> None:
    comp = compare_runs(_slo_runs(), [parse_slo("ttft_p99=2s")], gpu_cost=2.5, gpus=[4, 8],
                        response_tokens=512, target_latency_s=30.0)
    encoded = msgspec.json.encode(comp)
    assert msgspec.json.decode(encoded, type=Comparison) == comp
    data = msgspec.json.decode(encoded)
    assert [r["name"] for r in data["runs"]] == ["fast", "big"]
    assert data["slo"][0]["winner"] == "fast"
    assert data["users"]["stat"] == "p90" and len(data["users"]["runs"]) == 2
    assert all(math.isfinite(row["concurrency"]) for row in data["aligned"])


def test_workload_differences_read_every_typed_setting() -> None:
    a = run("a", [1.0, 2.0], grid=(1, 2), spec=spec(workload={"input_len": 128, "range_ratio": 0.1}))
    b = run("b", [1.0, 2.0], grid=(1, 2), spec=spec(workload={"input_len": 64, "dataset": "chats.jsonl"}))
    warnings = compare_runs([a, b]).warnings
    assert [w.split(" (")[0] for w in warnings] == [f"the workloads differ in {k}"
                                                   for k in ("input_len", "range_ratio", "dataset")]
    assert "dataset (a=unknown, b=chats.jsonl)" in warnings[2]
    # Without a saved spec every setting is its default: no difference.
    assert compare_runs([run("x", [1.0], grid=(1,)), run("y", [2.0], grid=(1,))]).warnings == ()


def test_workload_differences_know_prefixes_sessions_traces_and_distributions() -> None:
    from plateau_bench.spec import parse_length

    shared = {"input_len": 128, "output_len": 128}
    a = run("a", [1.0, 2.0], grid=(1, 2), spec=spec(workload={**shared, "seed": 1}))
    b = run("b", [1.0, 2.0], grid=(1, 2), spec=spec(workload={
        **shared, "seed": 2, "prefix_groups": 4, "prefix_len": 512, "sessions": 8,
        "turns": msgspec.to_builtins(parse_length("uniform:2,6", "--turns")), "trace": "azure.csv",
        "output_dist": msgspec.to_builtins(parse_length("lognormal:200,80", "--output-len"))}))
    warnings = compare_runs([a, b]).warnings
    assert [w.split(" (")[0] for w in warnings] == [f"the workloads differ in {k}" for k in (
        "output_dist", "prefix_groups", "prefix_len", "sessions", "turns", "trace")]   # not the seed
    assert "turns (a=unknown, b=uniform:2,6)" in warnings[4]


def test_an_unknown_endpoint_is_no_difference() -> None:
    workload = {"input_len": 128, "output_len": 512}
    real = run("real", [1.0, 2.0], grid=(1, 2), spec=spec(workload=workload,
                                                         target={"url": "http://x", "endpoint": "chat"}))
    twin = run("twin", [1.0, 2.0], grid=(1, 2), spec=spec(workload=workload))
    assert compare_runs([real, twin]).warnings == ()


GRID5 = (4, 8, 16, 32, 64)


def repeated(name: str, means: Sequence[float], half: float, grid: Sequence[int] = GRID5) -> Curve:
    """A run measured three times per level: the repeats' mean tok/s, +- ``half`` (the 95 % interval); its
    first repeat's own figure is off by 30 %, as one noisy run can be."""
    levels = tuple(msgspec.structs.replace(
        level(c, 1.3 * m), repeat_stats=RepeatStats(n=3, output_throughput=Interval(mean=m, low=m - half,
                                                                                   high=m + half, n=3)))
        for c, m in zip(grid, means, strict=True))
    return Curve(name, levels)


def test_with_repeats_a_crossover_has_the_interval_where_neither_leads_beyond_the_noise() -> None:
    a = repeated("a", [1000, 1400, 1600, 1700, 1750], half=50)
    b = repeated("b", [800, 1200, 1600, 2000, 2400], half=50)
    pair = find_crossovers(a, b)
    assert pair.noise == "3 repeats"
    (x,) = pair.crossovers
    assert (x.leader_below, x.leader_above) == ("a", "b") and x.concurrency == 16.0
    assert x.interval is not None
    low, high = x.interval
    assert 8 < low < 16 < high < 32   # the leads are real at 8 and at 32, not at 16
    # The curves are the repeats' means, not the first repeat's own figures (which read 30 % high).
    assert a.at(8) == 1400
    # Wider intervals, a wider crossover interval around the same crossing.
    wide = find_crossovers(repeated("a", [1000, 1400, 1600, 1700, 1750], half=120),
                           repeated("b", [800, 1200, 1600, 2000, 2400], half=120)).crossovers[0]
    assert wide.interval is not None and wide.interval[0] < low and wide.interval[1] > high


def test_with_repeats_runs_within_each_others_intervals_are_not_distinguishable_anywhere() -> None:
    a = repeated("a", [1000, 1400, 1600, 1700, 1750], half=150)
    b = repeated("b", [1100, 1300, 1650, 1600, 1800], half=150)
    pair = find_crossovers(a, b)
    assert pair.crossovers == () and pair.leader_low is None and pair.leader_high is None
    # Judged by each run's first repeat alone (no interval), the same runs would cross: the repeats decide.
    plain_a = Curve("a", tuple(level(c, m) for c, m in zip(GRID5, [1000, 1400, 1600, 1700, 1750], strict=True)))
    plain_b = Curve("b", tuple(level(c, m) for c, m in zip(GRID5, [1100, 1300, 1650, 1600, 1800], strict=True)))
    alone = find_crossovers(plain_a, plain_b)
    assert alone.crossovers and all(x.interval is None for x in alone.crossovers)   # no noise stated
