from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from plateau_bench.analysis.compare import compare_runs
from plateau_bench.cli import main
from plateau_bench.commands.compare import comparison_lines, comparison_table, load_run, run_names
from plateau_bench.records import Latency, LevelResult, RequestRecord
from plateau_bench.report.results import ResultWriter

GRID = (1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256)
MS = 1_000_000


def write_run(out: Path, throughputs: Sequence[float], *, ttft_per_c_ms: float = 20.0, output_len: int = 512,
              with_requests: bool = True) -> Path:
    """A burst sweep's result directory: each level's requests share TTFT and TPOT."""
    spec = {"workload": {"input_len": 128, "output_len": output_len}, "target": {"endpoint": "completions"}}
    with ResultWriter(out, kind="sweep", spec=spec) as writer:
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


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_prints_table_and_crossover(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs
    code, out, _ = run_cli(["compare", str(a), str(b)], capsys)
    assert code == 0
    assert "tp4" in out and "tp8ep" in out and "plateau" in out
    assert "Crossover: tp8ep overtakes tp4 at C~" in out


def test_compare_with_slo_cost_and_users(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_runs
    code, out, _ = run_cli(["compare", str(a), str(b), "--slo", "ttft_p99=2s", "--slo", "tpot_p99=50ms,e2e_p99=30s",
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
    code, out, _ = run_cli(["compare", str(a), str(b), "--slo", "ttft_p99=2s", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    runs = [load_run(a, "tp4", with_requests=True), load_run(b, "tp8ep", with_requests=True)]
    from plateau_bench.analysis.slo import parse_slo
    expected = compare_runs(runs, [parse_slo("ttft_p99=2s")]).to_dict()
    assert data == json.loads(json.dumps(expected))
    # Goodput came from the saved requests.
    assert {lv["goodput_source"] for lv in data["slo"][0]["runs"][0]["levels"]} == {"requests"}


def test_table_shows_the_chosen_levels_plateau_and_knee(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", saturating(2000, 10), with_requests=False)
    b = write_run(tmp_path / "b", saturating(3000, 10), with_requests=False)
    comp = compare_runs([load_run(a, "a"), load_run(b, "b")])
    console = Console(width=160, record=True, color_system=None)
    console.print(comparison_table(comp, columns=[1, 16, 256]))
    text = console.export_text()
    assert "C=1" in text and "C=16" in text and "C=256" in text
    assert "plateau" in text and "knee" in text
    assert comparison_lines(comp) == ["No crossover over C=1..256: b leads throughout."]


def test_workload_difference_is_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", saturating(2000, 10), with_requests=False)
    b = write_run(tmp_path / "b", saturating(3000, 20), output_len=128, with_requests=False)
    code, out, _ = run_cli(["compare", str(a), str(b)], capsys)
    assert code == 0
    assert "Warning: the workloads differ in output_len (a=512, b=128)" in out


def test_names_default_to_directories_and_disambiguate(tmp_path: Path) -> None:
    assert run_names([tmp_path / "runs" / "tp4", tmp_path / "runs" / "tp8ep"]) == ["tp4", "tp8ep"]
    assert run_names([tmp_path / "x" / "run", tmp_path / "y" / "run"]) == ["x/run", "y/run"]


@pytest.mark.parametrize("extra,fragment", [
    (["--gpu-cost", "-1", "--gpus", "4,8"], "--gpu-cost must not be negative"),
    (["--gpu-cost", "2.5", "--gpus", "4"], "--gpus gives 1 GPU count(s) for 2 runs"),
    (["--slo", "itl_p99=50ms"], "has no itl_p99 measurements"),
    (["--name", "only-one"], "--name given 1 time(s) for 2 runs"),
])
def test_bad_input_is_one_line(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                               extra: list[str], fragment: str) -> None:
    a, b = two_runs
    code, _, err = run_cli(["compare", str(a), str(b), *extra], capsys)
    assert code == 2
    assert err.count("\n") == 1 and fragment in err


def test_one_run_is_refused(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", str(two_runs[0])], capsys)
    assert code == 2 and "a compare needs at least two runs" in err


def test_missing_directory_is_a_results_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["compare", str(tmp_path / "nope"), str(tmp_path / "nada")], capsys)
    assert code == 2 and "no results in" in err


def test_interpolated_cells_are_marked() -> None:
    from plateau_bench.analysis.compare import RunData

    def lv(c: int, thr: float) -> LevelResult:
        return LevelResult(label=f"C={c}", mode="burst", concurrency=c, output_throughput=thr)

    a = RunData("a", (lv(1, 100.0), lv(4, 400.0)))
    b = RunData("b", (lv(2, 150.0), lv(8, 300.0)))
    console = Console(width=120, record=True, color_system=None)
    console.print(comparison_table(compare_runs([a, b])))
    rows = {line.split()[0]: line.split()[1:5] for line in console.export_text().splitlines()[1:]}
    assert rows["a"] == ["100", "~250", "400", "-"]
    assert rows["b"] == ["-", "150", "~225", "300"]


# The first reference run (docs: seed-runs.md, Run A): TP=4 vs TP=8+EP, 512 output tokens, bursts.
REFERENCE = {"seed-a-tp4": {1: 84.0, 256: 2586.0}, "seed-a-tp8ep": {1: 71.0, 256: 3982.0}}
SEED_GRID = "1,2,4,8,12,16,24,32,64,128,256,512,1024"


def test_twin_presets_reproduce_the_reference_crossover(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    dirs = []
    for preset in REFERENCE:
        out = tmp_path / preset
        code, _, err = run_cli(["sim", "--preset", preset, "--mode", "burst", "--concurrency", SEED_GRID,
                                "--output-len", "512", "--out", str(out)], capsys)
        assert code == 0, err
        dirs.append(out)
    code, out, err = run_cli(["compare", *map(str, dirs), "--name", "tp4", "--name", "tp8ep", "--json"], capsys)
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
