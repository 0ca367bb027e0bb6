from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rich.console import Console

from plateau_bench.analysis.compare import RunData, compare_runs
from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.compare import load_run
from plateau_bench.records import RequestRecord
from plateau_bench.report.compare import comparison_lines, comparison_table, display_levels, energy_line
from plateau_bench.result import GpuMetrics, Latency, LevelResult, ResultFile, RunSpec, TargetPublic
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import ResultWriter, load_result, run_names

from support.loading import plateau

GRID = (1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256)
MS = 1_000_000


def write_run(out: Path, throughputs: Sequence[float], *, ttft_per_c_ms: float = 20.0, output_len: int = 512,
              with_requests: bool = True) -> Path:
    """A burst sweep's result directory: each level's requests share TTFT and TPOT."""
    spec = RunSpec(workload=WorkloadSpec(input_len=128, output_len=output_len),
                   target=TargetPublic(url="http://127.0.0.1:8000", endpoint="completions"))
    with ResultWriter(out, ResultFile(kind="sweep", spec=spec)) as writer:
        for c, thr in zip(GRID, throughputs, strict=True):
            ttft = ttft_per_c_ms * c
            tpot = 1000.0 * c / thr
            e2e_ns = round((ttft + (output_len - 1) * tpot) * MS)
            if with_requests:
                writer.add_requests(f"C={c}", [
                    RequestRecord(index=i, scheduled_ns=0, sent_ns=0, first_token_ns=round(ttft * MS), end_ns=e2e_ns,
                                  output_tokens=output_len) for i in range(c)])
            lat = Latency(mean=ttft, p50=ttft, p90=ttft, p99=ttft, count=c)
            tp = Latency(mean=tpot, p50=tpot, p90=tpot, p99=tpot, count=c)
            writer.add_level(LevelResult(
                label=f"C={c}", mode="burst", concurrency=c, num_requests=c, completed=c,
                duration_s=e2e_ns / 1e9, wall_s=e2e_ns / 1e9, window_end_s=e2e_ns / 1e9,
                output_throughput=thr, request_throughput=c / (e2e_ns / 1e9), ttft_ms=lat, tpot_ms=tp,
                e2e_ms=Latency(p50=e2e_ns / MS, p99=e2e_ns / MS)))
    return out


def saturating(top: float, half: float) -> list[float]:
    return [top * c / (c + half) for c in GRID]


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    return (write_run(tmp_path / "runs" / "tp4", saturating(2700, 30)),
            write_run(tmp_path / "runs" / "tp8ep", saturating(4100, 56)))


def test_compare_prints_table_and_crossover(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs
    code, out, _ = plateau(["compare", str(a), str(b)], capsys)
    assert code == 0
    assert "tp4" in out and "tp8ep" in out and "plateau" in out
    assert "Crossover: tp8ep overtakes tp4 at C~" in out


def test_compare_with_slo_cost_and_users(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs
    code, out, _ = plateau(["compare", str(a), str(b), "--slo", "ttft_p99=2s", "--slo", "tpot_p99=50ms,e2e_p99=30s",
                            "--gpu-cost", "2.50", "--gpus", "4,8", "--response-tokens", "512",
                            "--target-latency", "30s", "--name", "four", "--name", "eight"], capsys)
    assert code == 0
    assert out.count("Under ") == 2
    assert "Under ttft_p99<=2s:" in out and "Under tpot_p99<=50ms, e2e_p99<=30s:" in out
    assert "Cost per 1M output tokens at $2.5/GPU-hour: four (4 GPUs)" in out
    assert "Users within 30s for 512-token responses (p90 TTFT + 511 x p90 TPOT)" in out


def test_compare_json_matches_the_pure_function(two_runs: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs
    code, out, _ = plateau(["compare", str(a), str(b), "--slo", "ttft_p99=2s", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    runs = [load_run(a, "tp4", with_requests=True), load_run(b, "tp8ep", with_requests=True)]
    expected = compare_runs(runs, [parse_slo("ttft_p99=2s")])
    assert data == json.loads(msgspec.json.encode(expected))
    # Goodput came from the saved requests.
    assert {lv["goodput_source"] for lv in data["slo"][0]["runs"][0]["levels"]} == {"requests"}


# Every key `plateau compare --json` prints, by path ([] an array's items, * a map keyed by run name).
# Scripts read these: a change here is a change of the published output.
COMPARE_JSON_KEYS: dict[str, set[str]] = {
    "": {"runs", "aligned", "pairs", "slo", "users", "gpu_cost_per_hour", "warnings", "repeats"},
    "repeats[]": {"runs", "confidence", "levels", "cannot_tell"},
    "runs[]": {"name", "levels", "plateau", "knee", "best", "gpus", "tok_s_per_gpu", "cost_per_mtok",
               "slo_cost_per_mtok", "output_tokens_per_joule", "energy_concurrency"},
    "runs[].levels[]": {"concurrency", "output_throughput"},
    "runs[].best": {"concurrency", "output_throughput"},
    "runs[].plateau": {"throughput", "concurrency", "reached", "levels"},
    "runs[].knee": {"concurrency", "throughput", "bracket", "reached"},
    "aligned[]": {"concurrency", "runs"},
    "aligned[].runs.*": {"output_throughput", "measured"},
    "pairs[]": {"runs", "common_range", "crossovers", "leader_low", "leader_high", "noise"},
    "pairs[].crossovers[]": {"runs", "leader_below", "leader_above", "concurrency", "bracket", "throughput",
                             "per_user_tok_s", "interval"},
    "slo[]": {"slo", "winner", "runs"},
    "slo[].runs[]": {"run", "max_concurrency", "max_throughput", "best_concurrency", "best_throughput", "levels"},
    "slo[].runs[].levels[]": {"concurrency", "meets", "goodput_rps", "goodput_source", "output_throughput"},
    "users": {"response_tokens", "target_latency_s", "stat", "winner", "runs"},
    "users.runs[]": {"run", "users", "at_least", "throughput", "estimated_e2e_ms"},
    "users.runs[].estimated_e2e_ms[]": {"concurrency", "e2e_ms"},
}


def key_paths(node: Any, path: str = "", names: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """(path, key) for every object key in ``node``; the keys of a map by run name are not walked as keys."""
    if isinstance(node, list):
        for item in node:
            yield from key_paths(item, f"{path}[]", names)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in names:
                yield from key_paths(value, f"{path}.*", names)
            else:
                yield path, key
                yield from key_paths(value, f"{path}.{key}" if path else key, names)


def test_compare_json_keys_are_exactly_the_documented_ones(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # A plateauing run and one that overtakes it: every optional block is filled in.
    flat = write_run(tmp_path / "flat", saturating(2000, 10))
    rising = write_run(tmp_path / "rising", saturating(2700, 30))
    code, out, err = plateau(["compare", str(flat), str(rising), "--slo", "ttft_p99=1s", "--gpu-cost", "3",
                              "--gpus", "2,4", "--response-tokens", "256", "--target-latency", "12s", "--json"],
                             capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["runs"][0]["plateau"] and data["runs"][0]["knee"] and data["pairs"][0]["crossovers"]
    found: dict[str, set[str]] = {}
    for path, key in key_paths(data, names=frozenset({"flat", "rising"})):
        found.setdefault(path, set()).add(key)
    assert found == COMPARE_JSON_KEYS


def test_table_shows_the_chosen_levels_plateau_and_knee(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", saturating(2000, 10), with_requests=False)
    b = write_run(tmp_path / "b", saturating(3000, 10), with_requests=False)
    comp = compare_runs([load_run(a, "a"), load_run(b, "b")])
    console = Console(width=160, record=True, color_system=None)
    console.print(comparison_table(comp, columns=[1, 16, 256]))
    text = console.export_text()
    assert "C=1" in text and "C=16" in text and "C=256" in text
    assert "plateau" in text and "knee" in text
    assert comparison_lines(comp) == ["No crossover over C=1..256: b leads throughout.",
                                      NO_REPEATS.format(a="a", b="b")]


def test_workload_difference_is_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", saturating(2000, 10), with_requests=False)
    b = write_run(tmp_path / "b", saturating(3000, 20), output_len=128, with_requests=False)
    code, out, _ = plateau(["compare", str(a), str(b)], capsys)
    assert code == 0
    assert "Warning: the workloads differ in output_len (a=512, b=128)" in out


def test_names_default_to_directories_and_disambiguate(tmp_path: Path) -> None:
    assert run_names([tmp_path / "runs" / "tp4", tmp_path / "runs" / "tp8ep"]) == ["tp4", "tp8ep"]
    assert run_names([tmp_path / "x" / "run", tmp_path / "y" / "run"]) == ["x/run", "y/run"]
    assert run_names([tmp_path / "tp4" / "result.json", tmp_path / "tp8"]) == ["tp4", "tp8"]


@pytest.mark.parametrize("extra,fragment", [
    (["--gpu-cost", "-1", "--gpus", "4,8"], "--gpu-cost must not be negative"),
    (["--gpu-cost", "2.5", "--gpus", "4"], "--gpus gives 1 GPU count(s) for 2 runs"),
    (["--slo", "itl_p99=50ms"], "has no itl_p99 measurements"),
    (["--name", "only-one"], "--name given 1 time(s) for 2 runs"),
])
def test_bad_input_is_one_line(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                               extra: list[str], fragment: str) -> None:
    a, b = two_runs
    code, _, err = plateau(["compare", str(a), str(b), *extra], capsys)
    assert code == 2
    assert err.count("\n") == 1 and fragment in err


def test_one_run_is_refused(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["compare", str(two_runs[0])], capsys)
    assert code == 2 and "a compare needs at least two runs" in err


def test_missing_directory_is_a_results_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["compare", str(tmp_path / "nope"), str(tmp_path / "nada")], capsys)
    assert code == 2 and "no results in" in err


def test_only_the_kept_attempt_counts_for_goodput(tmp_path: Path) -> None:
    out = write_run(tmp_path / "r", saturating(2000, 10))
    with ResultWriter(out, load_result(out), existing="resume") as writer:
        # An interrupted first attempt at C=1 whose request would miss a 1 s TTFT bound ...
        writer.add_request("C=1", RequestRecord(index=9, scheduled_ns=0, sent_ns=0, first_token_ns=5_000 * MS,
                                                end_ns=5_100 * MS, output_tokens=1), attempt=2)
    run = load_run(out, "r", with_requests=True)
    # ... is not the attempt result.json keeps (1), so it is not read.
    assert run.requests is not None and len(run.requests["C=1"]) == 1


# -- rendering (report.compare) with a fixed-width console ----------------------------------------

def _level(c: int, thr: float, ttft_ms: float = 100.0) -> LevelResult:
    return LevelResult(label=f"C={c}", mode="burst", concurrency=c, output_throughput=thr, request_throughput=c / 10,
                       duration_s=10.0, window_end_s=10.0, ttft_ms=Latency(p90=ttft_ms, p99=ttft_ms),
                       tpot_ms=Latency(p90=20.0, p99=20.0))


def _render(renderable: Any, width: int = 80) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_interpolated_cells_are_marked() -> None:
    a = RunData("a", (_level(1, 100.0), _level(4, 400.0)))
    b = RunData("b", (_level(2, 150.0), _level(8, 300.0)))
    assert _render(comparison_table(compare_runs([a, b]))) == [
        "Output tok/s by concurrency (~",
        "interpolated)",
        "run  C=1   C=2   C=4  C=8  plateau  knee",
        "a    100  ~250   400    -     none     -",
        "b      -   150  ~225  300     none     -",
    ]


G7 = (1, 2, 4, 8, 16, 32, 64)


def _capped_and_wide() -> list[RunData]:
    # "fast" caps at 1,600 tok/s from C=16 with low TTFT; "big" keeps growing with a higher TTFT.
    return [RunData("fast", tuple(_level(c, 100.0 * min(c, 16), ttft_ms=50.0 * c) for c in G7)),
            RunData("big", tuple(_level(c, 60.0 * min(c, 64), ttft_ms=200.0 * c) for c in G7))]


def test_table_with_cost_columns_golden() -> None:
    comp = compare_runs(_capped_and_wide(), [parse_slo("ttft_p99=1s")], gpu_cost=2.0, gpus=[1, 2])
    # Seven levels, six columns: the ends, the crossover's bracket (16, 32) and fast's plateau start
    # (16) stay; the fill takes the levels farthest from those (2, 4); C=8 is left out.
    assert display_levels(comp) == [1, 2, 4, 16, 32, 64]
    assert _render(comparison_table(comp)) == [
        "Output tok/s by concurrency (~ interpolated)",
        "run   C=1  C=2  C=4   C=16   C=32   C=64  plateau  knee  tok/s/GPU   $/1M",
        "fast  100  200  400  1,600  1,600  1,600    1,600   ~15      1,600  $0.35",
        "big    60  120  240    960  1,920  3,840     none     -      1,920  $0.29",
    ]


NO_REPEATS = ("Real or noise ({a} vs {b}): cannot tell: {a} and {b} have no repeats, so there is no between-run "
              "spread to test a difference against (measure with --repeat 3 or more).")


def test_comparison_lines_golden() -> None:
    comp = compare_runs(_capped_and_wide(), [parse_slo("ttft_p99=1s"), parse_slo("ttft_p99=10ms")], gpu_cost=2.0,
                        gpus=[1, 2], response_tokens=101, target_latency_s=3.0)
    assert comparison_lines(comp) == [
        "Crossover: big overtakes fast at C~25.4 (between measured 16 and 32; 1,600 tok/s, 63.0 tok/s per user).",
        NO_REPEATS.format(a="fast", b="big"),
        "Under ttft_p99<=1s: fast serves up to C=16 (1,600 tok/s), big up to C=4 (240 tok/s) -> fast.",
        "Under ttft_p99<=10ms: fast meets it at no measured level, big meets it at no measured level -> none.",
        "Cost per 1M output tokens at $2/GPU-hour: fast (1 GPUs) $0.35 at its plateau, $0.35 at its best level "
        "under ttft_p99<=1s, none under ttft_p99<=10ms; big (2 GPUs) $0.29 at its best level, $4.63 at its best "
        "level under ttft_p99<=1s, none under ttft_p99<=10ms.",
        "Users within 3s for 101-token responses (p90 TTFT + 100 x p90 TPOT): fast 19, big 4 -> fast.",
    ]


def _with_energy(lv: LevelResult, tokens_per_joule: float | None) -> LevelResult:
    gpu = GpuMetrics(gpus=1, energy_j=1000.0, output_tokens_per_joule=tokens_per_joule,
                     joules_per_output_token=None if tokens_per_joule is None else 1 / tokens_per_joule)
    return msgspec.structs.replace(lv, gpu_metrics=gpu)


def test_tokens_per_joule_where_two_runs_have_it() -> None:
    """Each run's figure at its plateau level (the most loaded one within 5 % of its best throughput)."""
    fast, big = _capped_and_wide()
    fast = RunData("fast", tuple(_with_energy(lv, 2.0 + lv.concurrency / 100) for lv in fast.levels))
    big_known = RunData("big", tuple(_with_energy(lv, 1.5) for lv in big.levels))
    comp = compare_runs([fast, big_known])
    assert (comp.runs[0].output_tokens_per_joule, comp.runs[0].energy_concurrency) == (2.64, 64)
    assert energy_line(comp) == "Output tokens per joule of GPU energy at the plateau: fast 2.64 at C=64, big 1.5 " \
                                "at C=64 -> fast."
    assert energy_line(comp) in comparison_lines(comp)
    unknown = compare_runs([fast, big, RunData("big2", big_known.levels)])
    assert energy_line(unknown) == ("Output tokens per joule of GPU energy at the plateau: fast 2.64 at C=64, big "
                                    "unknown (no GPU energy), big2 1.5 at C=64 -> fast.")
    assert energy_line(compare_runs([fast, big])) is None          # one side only: nothing to compare
    assert compare_runs([fast, big]).runs[1].output_tokens_per_joule is None


def test_lines_for_ties_disjoint_ranges_and_warnings() -> None:
    same = [_level(c, 100.0 * c) for c in (1, 2, 4)]
    tie = compare_runs([RunData("a", tuple(same)), RunData("b", tuple(same))])
    assert comparison_lines(tie) == ["No crossover: a and b deliver the same throughput over C=1..4, not "
                                     "distinguishable at any C (every difference within the levels' 95 % CIs).",
                                     NO_REPEATS.format(a="a", b="b")]
    apart = compare_runs([RunData("lo", (_level(1, 1.0), _level(2, 2.0))),
                          RunData("hi", (_level(8, 3.0), LevelResult(label="C=16", mode="steady", concurrency=16,
                                                                     output_throughput=4.0)))])
    assert comparison_lines(apart) == [
        "Warning: the load modes differ (lo=burst, hi=burst/steady): burst and steady-state levels are not like "
        "for like.",
        "No crossover: lo and hi share no measured concurrency range.",
        "Real or noise (lo vs hi): cannot tell: the runs share no measured level.",
    ]
    at_least = compare_runs(_capped_and_wide(), response_tokens=2, target_latency_s=3600.0)
    assert comparison_lines(at_least)[-1].endswith(": fast >=64, big >=64 -> fast.")


# The first reference run (docs: seed-runs.md, Run A): TP=4 vs TP=8+EP, 512 output tokens, bursts.
REFERENCE = {"seed-a-tp4": {1: 84.0, 256: 2586.0}, "seed-a-tp8ep": {1: 71.0, 256: 3982.0}}
SEED_GRID = "1,2,4,8,12,16,24,32,64,128,256,512,1024"


def test_twin_presets_reproduce_the_reference_crossover(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    dirs = []
    for preset in REFERENCE:
        run_dir = tmp_path / preset
        code, _, err = plateau(["sim", "--preset", preset, "--mode", "burst", "--concurrency", SEED_GRID,
                                "--output-len", "512", "--out", str(run_dir)], capsys)
        assert code == 0, err
        dirs.append(run_dir)
    code, out, err = plateau(["compare", *map(str, dirs), "--name", "tp4", "--name", "tp8ep", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    for run, reference in zip(data["runs"], REFERENCE.values(), strict=True):
        measured = {lv["concurrency"]: lv["output_throughput"] for lv in run["levels"]}
        for c, ref in reference.items():
            assert measured[c] == pytest.approx(ref, rel=0.10), (run["name"], c)
    (pair,) = data["pairs"]
    (crossover,) = pair["crossovers"]
    assert (crossover["leader_below"], crossover["leader_above"]) == ("tp4", "tp8ep")
    assert crossover["bracket"] == [12, 16] and 12 < crossover["concurrency"] < 16
    assert data["warnings"] == []
