"""SGLang's own serving benchmark (``python -m sglang.benchmark.serving``, SGLang's release pinned in
versions.env, from the venv scripts/provision_sglang_bench.sh makes) against serve-sim with a cap drawn at
random: the JSONL lines it writes with ``--output-details``, one file per concurrency as a user's shell loop
writes them, import as they are, and the verdict names that exact cap. SGLang saves no send times: the
import rebuilds them from the client's closed loop, which is what this test holds to the exact cap."""

from __future__ import annotations

import json
from pathlib import Path

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset

from support.loading import Cli
from support.peers import peer_command, random_cap, run_peer

ENTRY = Path(__file__).parents[1] / "support" / "sglang_bench_entry.py"


def test_sglang_bench_serving_lines_import_and_name_the_cap(cli: Cli, tokenizer_dir: Path, tmp_path: Path) -> None:
    python = peer_command("sglang-bench", "python")   # not provisioned: fails with the provisioning log's tail
    cap = random_cap(3, 8)
    config = get_preset("tiny").with_overrides(max_num_seqs=cap)
    out = tmp_path / "sglang-bench"
    out.mkdir()
    with start_sim_server(config, tokenizer=str(tokenizer_dir)) as sim:
        for concurrency in (max(1, cap // 2), 2 * cap, 4 * cap):
            done = run_peer([python, ENTRY, "sglang.benchmark.serving", "--backend", "sglang-oai",
                             "--base-url", sim.url, "--model", config.model_name, "--tokenizer", tokenizer_dir,
                             "--dataset-name", "random-ids", "--random-input-len", "64", "--random-output-len", "48",
                             "--random-range-ratio", "1", "--num-prompts", str(3 * concurrency),
                             "--max-concurrency", str(concurrency), "--output-details",
                             "--output-file", out / f"sglang-c{concurrency}.jsonl"], cwd=tmp_path, timeout_s=300)
            assert done.returncode == 0, f"cap {cap}, C={concurrency}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    imported = cli("import", str(out), "--out", str(tmp_path / "imported"))
    assert imported.exit_code == 0, imported.output
    diagnosed = cli("diagnose", str(tmp_path / "imported"), "--json")
    assert diagnosed.exit_code == 0, diagnosed.output
    verdict = json.loads(diagnosed.stdout)["verdict"]
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", cap), (cap, verdict)
