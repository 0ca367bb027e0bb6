"""SGLang's own serving benchmark (``python -m sglang.benchmark.serving``, SGLang's release pinned in
versions.env, from the venv scripts/provision_sglang_bench.sh makes) against serve-sim with a cap drawn at
random: the JSONL lines it writes with ``--output-details``, one file per concurrency as a user's shell loop
writes them, import as they are, and the verdict names that exact cap. SGLang saves no send times: the
import rebuilds them from the client's closed loop, which is what this test holds to the exact cap."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.loading import Cli
from support.peers import assert_runs_name_the_cap, peer_command, run_peer

ENTRY = Path(__file__).parents[1] / "support" / "sglang_bench_entry.py"


def test_sglang_bench_serving_lines_import_and_name_the_cap(cli: Cli, tokenizer_dir: Path, tmp_path: Path) -> None:
    python = peer_command("sglang-bench", "python")   # not provisioned: fails with the provisioning log's tail
    out = tmp_path / "sglang-bench"
    out.mkdir()

    def bench(url: str, model: str, concurrency: int) -> subprocess.CompletedProcess[str]:
        return run_peer([python, ENTRY, "sglang.benchmark.serving", "--backend", "sglang-oai",
                         "--base-url", url, "--model", model, "--tokenizer", tokenizer_dir,
                         "--dataset-name", "random-ids", "--random-input-len", "64", "--random-output-len", "48",
                         "--random-range-ratio", "1", "--num-prompts", str(3 * concurrency),
                         "--max-concurrency", str(concurrency), "--output-details",
                         "--output-file", out / f"sglang-c{concurrency}.jsonl"], cwd=tmp_path, timeout_s=300)

    assert_runs_name_the_cap(cli, tokenizer_dir, tmp_path, out, bench)
