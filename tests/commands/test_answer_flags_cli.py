"""The flags ``predict``, ``plan``, ``import`` and ``roofline`` share with other commands: each reaches what it
sets, and a bad value is one line naming the flag (exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from plateau_bench.answers import CalibratedModel, EngineModel, Parameter
from plateau_bench.sim.presets import get_preset

from support.loading import plateau

MODELS = Path(__file__).parents[2] / "examples" / "models"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """The tiny preset as a calibrated model, saved as plateau calibrate --out saves one."""
    tiny = get_preset("tiny")
    s = tiny.step
    engine = EngineModel(t0=s.t0, a=s.a, b=s.b, c=s.c, max_num_seqs=tiny.max_num_seqs,
                         max_num_batched_tokens=tiny.max_num_batched_tokens, kv_tokens=tiny.kv_tokens)
    path = tmp_path / "model.json"
    path.write_bytes(msgspec.json.encode(CalibratedModel(
        engine=engine, parameters=[Parameter(name=n, value=getattr(s, n)) for n in ("t0", "a", "b", "c")],
        levels=[], sources=["tiny"], cap_source="diagnosis", kv_source="server", policy_source="preset",
        input_len=128, output_len=128)))
    return path


def test_plan_takes_the_step_budget(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["plan", str(model), "--rate", "60", "--slo", "ttft_p99=1s", "--max-num-seqs", "64",
                            "--max-num-batched-tokens", "16"], capsys)
    assert code == 2 and "--max-num-batched-tokens (16) must be >= --max-num-seqs (64)" in err


@pytest.mark.parametrize("command", [["predict"], ["plan", "--rate", "60", "--slo", "ttft_p99=1s"]])
@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--input-len", "0", "--input-len must be >= 1 (got 0)"),
    ("--output-len", "-3", "--output-len must be >= 1 (got -3)"),
    ("--max-num-seqs", "0", "--max-num-seqs 0 admits no request"),
])
def test_predict_and_plan_refuse_a_bad_setting(model: Path, command: list[str], flag: str, value: str,
                                               expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau([command[0], str(model), *command[1:], flag, value], capsys)
    assert code == 2 and out == "" and expected in err and len(err.strip().splitlines()) == 1, err


def test_import_refuses_a_length_below_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "levels.csv"
    table.write_text("concurrency,output_throughput\n1,100\n")
    code, _, err = plateau(["import", str(table), "--out", str(tmp_path / "out"), "--input-len", "0"], capsys)
    assert code == 2 and "--input-len must be >= 1 (got 0)" in err
    assert not (tmp_path / "out").exists()


ROOFLINE = ["roofline", "--model", str(MODELS / "gqa_moe_230b.json"), "--gpu", "rtx-pro-6000", "--gpus", "8",
            "--tp", "8", "--ep", "8", "--batches", "1", "--json"]


def test_roofline_lengths_take_the_load_flags_syntax(capsys: pytest.CaptureFixture[str]) -> None:
    """--input-len is the sweep's flag: a plain count, or a distribution taken at its nominal length."""
    code, out, err = plateau([*ROOFLINE, "--input-len", "uniform:100,300", "--output-len", "512"], capsys)
    assert code == 0, err
    deployment = json.loads(out)["roofline"]["deployment"]
    assert (deployment["input_len"], deployment["output_len"]) == (200, 512)
    code, _, err = plateau([*ROOFLINE, "--input-len", "many"], capsys)
    assert code == 2 and "--input-len" in err and len(err.strip().splitlines()) == 1


def test_roofline_layout_defaults_to_one_gpu_and_refuses_zero(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["roofline", "--model", str(MODELS / "dense_gqa_llama.json"), "--gpu", "h200-sxm", "--json",
            "--batches", "1"]
    code, out, err = plateau(base, capsys)
    assert code == 0, err
    deployment = json.loads(out)["roofline"]["deployment"]
    assert (deployment["gpus"], deployment["tp"], deployment["ep"], deployment["kv_dtype"]) == (1, 1, 1, "bf16")
    code, _, err = plateau([*base, "--gpus", "1", "--tp", "0"], capsys)
    assert code == 2 and "--tp must be >= 1 (got 0)" in err
