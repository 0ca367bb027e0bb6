"""vLLM's own `vllm bench serve` (from the provisioned vLLM venv) against serve-sim with a cap drawn at
random: the result files it saves (`--save-result --save-detailed`, one per concurrency, as a user's shell
loop writes them) import as they are, and the verdict names that exact cap."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from support.loading import Cli
from support.peers import assert_runs_name_the_cap
from support.real_servers import require_provisioned, vllm_venv


def _bench(url: str, model: str, tokenizer: Path, concurrency: int, out: Path) -> subprocess.CompletedProcess[str]:
    vllm = vllm_venv() / "bin" / "vllm"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)
    command = [str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", url, "--model", model,
               "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", "64",
               "--random-output-len", "48", "--ignore-eos", "--num-prompts", str(3 * concurrency),
               "--max-concurrency", str(concurrency), "--save-result", "--save-detailed",
               "--result-dir", str(out), "--result-filename", f"vllm-c{concurrency}.json"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_vllm_bench_serve_files_import_and_name_the_cap(cli: Cli, tokenizer_dir: Path, tmp_path: Path) -> None:
    require_provisioned("vllm", [vllm_venv() / "bin" / "vllm"])
    out = tmp_path / "vllm-bench"
    assert_runs_name_the_cap(cli, tokenizer_dir, tmp_path, out,
                             lambda url, model, concurrency: _bench(url, model, tokenizer_dir, concurrency, out))
