"""``plateau presets`` / ``plateau sim`` / ``plateau serve-sim`` through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.store import load_levels, load_requests, load_summary

from support.loading import Cli, plateau


def test_presets_lists_every_preset(cli: Cli) -> None:
    result = cli("presets", "--details", env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in ("seed-a-tp8ep", "seed-a-tp4", "seed-b-fp4", "tiny", "llama-8b-h100", "compute-bound"):
        assert name in result.output


def test_sim_writes_labelled_results(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = cli("sim", "--preset", "tiny", "--concurrency", "16,64", "--output-len", "64", "--max-num-seqs", "48",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "C=   16 | 16/16 ok" in result.output and "C=   64 | 64/64 ok" in result.output
    summary = load_summary(out)
    assert summary["kind"] == "sim" and summary["target"]["kind"] == "sim"
    assert summary["spec"]["sim"]["preset"] == "tiny" and summary["spec"]["sim"]["overrides"] == {"max_num_seqs": 48}
    levels = load_levels(out)
    assert [lv.concurrency for lv in levels] == [16, 64]
    assert len(load_requests(out)["C=64"]) == 64
    # 64 requests through a cap of 48: the second wave shows as decoding concurrency below C.
    assert levels[1].decoding_concurrency < 48.5


def test_sim_takes_the_servers_engine_flags_and_its_result_reads_back(cli: Cli, tmp_path: Path) -> None:
    """The step time, replicas and balancer serve-sim takes replay in virtual time, and the overrides they
    make (nested and text ones included) are saved so that the result loads again."""
    out = tmp_path / "sim"
    result = cli("sim", "--concurrency", "4", "--a-ms", "0.5", "--replicas", "2", "--balancer", "least-outstanding",
                 "--no-prefix-cache", "--reserve-kv", "--out", str(out))
    assert result.exit_code == 0, result.output
    overrides = load_summary(out)["spec"]["sim"]["overrides"]
    assert overrides["step.a"] == 0.0005 and overrides["replicas"] == 2
    assert overrides["balancer"] == "least_outstanding" and overrides["prefix_caching"] is False
    assert overrides["reserve_kv"] is True
    assert [lv.concurrency for lv in load_levels(out)] == [4]
    shown = cli("report", str(out))
    assert shown.exit_code == 0, shown.output


def test_sim_draws_lengths_from_the_given_distributions(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = cli("sim", "--concurrency", "200", "--input-len", "uniform:10,20", "--output-len", "normal:30,4",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    records = load_requests(out)["C=200"]
    prompts = {r.prompt_tokens for r in records}
    assert min(prompts) == 10 and max(prompts) == 20
    outputs = [r.output_tokens for r in records]
    assert 28 < sum(outputs) / len(outputs) < 32 and len(set(outputs)) > 5
    spec = load_summary(out)["spec"]["workload"]
    assert spec["input_dist"]["text"] == "uniform:10,20" and spec["input_len"] == 15


def test_steady_sim_runs_for_the_virtual_duration(cli: Cli) -> None:
    result = cli("sim", "--mode", "steady", "--concurrency", "8", "--duration", "5s")
    assert result.exit_code == 0, result.output
    assert "C=    8" in result.output


@pytest.mark.parametrize(("argv", "message"), [
    (["sim", "--preset", "nope"], "known presets: seed-a-tp8ep"),
    (["serve-sim", "--preset", "nope"], "unknown preset 'nope'"),
    (["sim", "--max-num-seqs", "0"], "--max-num-seqs 0"),
    (["sim", "--mode", "sideways"], "--mode must be"),
    (["sim", "--max-num-batched-tokens", "8", "--max-num-seqs", "16"], "--max-num-batched-tokens"),
    (["serve-sim", "--speed", "0"], "--speed must be > 0"),
    (["serve-sim", "--backlog", "0"], "--backlog must be between 1 and"),
    (["sim", "--input-len", "gamma:1,2"], "--input-len: unknown distribution 'gamma'"),
    (["sim", "--output-len", "uniform:8"], "--output-len uniform: needs two numbers"),
    (["sim", "--length-convention", "tgi"], "--length-convention must be one of plateau, sglang, vllm"),
])
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(argv, capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("flags", [["--t0-ms", "nan"], ["--a-ms", "inf"], ["--b-ms", "-1"]])
def test_a_step_time_that_is_not_a_finite_number_is_one_line(cli: Cli, flags: list[str]) -> None:
    """nan once simulated levels with negative wall times instead of refusing."""
    result = cli("sim", "--concurrency", "4", *flags)
    assert result.exit_code == 2
    assert "step-time coefficients must be finite and >= 0, with t0 > 0" in result.output
