"""``plateau roofline``: the tables, --json, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.loading import plateau

DATA = Path(__file__).parents[2] / "examples" / "models"   # model configs shipped as examples
RUN_A = ["roofline", "--model", str(DATA / "gqa_moe_230b.json"), "--gpu", "rtx-pro-6000", "--gpus", "8",
         "--tp", "8", "--ep", "8", "--input-len", "128", "--output-len", "512"]


def test_table_names_the_binding_resource_and_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(RUN_A, capsys)
    assert code == 0
    assert "Decode: ceiling per step" in out and "Prefill" in out
    assert "memory: weights" in out and "interconnect" in out
    assert "14,077" in out                        # the ceiling at batch 256 (Run A measured 3,963)
    assert "KV cache: 2,017,314 tokens" in out
    assert "Sources:" in out and "https://www.nvidia.com/en-us/products/workstations" in out


def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau([*RUN_A, "--json", "--batches", "1,256"], capsys)
    assert code == 0
    report = json.loads(out)
    assert [p["batch"] for p in report["decode"]] == [1, 256]
    assert report["decode"][1]["binding"] == "weights"
    assert report["roofline"]["deployment"]["dtype"] == "fp8"          # from the config's quantization
    assert report["gpu_spec"]["bandwidth_gbps"]["source"].startswith("https://")


def test_a_gpu_spec_file_with_bare_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = {"key": "mine", "name": "My GPU", "memory_gib": 64, "bandwidth_gbps": 2000, "tflops_bf16": 400,
            "interconnect": "pcie4"}
    (tmp_path / "gpu.json").write_text(json.dumps(spec))
    code, out, _ = plateau(["roofline", "--model", str(DATA / "dense_gqa_llama.json"), "--gpu-spec",
                            str(tmp_path / "gpu.json"), "--json", "--batches", "1"], capsys)
    assert code == 0
    assert json.loads(out)["roofline"]["link"]["name"] == "pcie4"


GOOD = ["--gpu", "rtx-pro-6000", "--gpus", "8", "--tp", "8"]


@pytest.mark.parametrize(("drop", "args", "expected"), [
    ("num_hidden_layers", GOOD, 'missing "num_hidden_layers"'),
    ("num_experts_per_tok", GOOD, 'missing "num_experts_per_tok"'),
    (None, ["--gpu", "h100", "--gpu-spec", "x.json"], "give one of --gpu NAME"),
    (None, ["--gpu", "tpu-v9"], "unknown GPU 'tpu-v9'"),
    (None, [*GOOD, "--interconnect", "carrier-pigeon"], "--interconnect: unknown link"),
    (None, ["--gpu", "rtx-pro-6000", "--gpus", "8", "--tp", "3"], "multiple of --tp"),
    (None, ["--gpu", "h100"], "GiB per GPU"),
    (None, [*GOOD, "--step-overhead-ms", "-1"], "--step-overhead-ms must be >= 0"),
    (None, [*GOOD, "--mem-fraction", "0"], "--mem-fraction must be in (0, 1]"),
    (None, [*GOOD, "--dtype", "int3"], "--dtype: unknown dtype 'int3'"),
])
def test_bad_input_is_one_line_and_exit_2(drop: str | None, args: list[str], expected: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = json.loads((DATA / "gqa_moe_230b.json").read_text())
    if drop:
        del config[drop]
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, err = plateau(["roofline", "--model", str(tmp_path), *args], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("plateau: error: ") and expected in err, err
