"""inference-perf's per-stage summaries alone (no per-request report) against serve-sim with a random cap: the
verdict reads the cap from the decoding batch by Little's law on tokens, and states no figure it lacks.

inference-perf's ``concurrent`` load type runs each stage at ``rate = num_requests`` per second over one
second, under the concurrency limit: a stage is a closed loop only when the server cannot serve that many in
a second, so each stage asks for more requests than the twin serves in one. The twin runs in real time (a
faster clock leaves the tool's two workers as the limit, not the cap).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset

from support.loading import Cli
from support.peers import peer_command, random_cap, run_peer

OUTPUT_TOKENS = 96


def config(url: str, tokenizer: Path, out: Path, concurrencies: list[int], requests: list[int]) -> str:
    stages = "\n".join(f"  - {{num_requests: {n}, concurrency_level: {c}}}"
                       for c, n in zip(concurrencies, requests, strict=True))
    return f"""load:
  type: concurrent
  num_workers: 2
  interval: 0.5
  stages:
{stages}
api: {{type: completion, streaming: true}}
server: {{type: vllm, model_name: tiny, base_url: {url}, ignore_eos: true}}
tokenizer: {{pretrained_model_name_or_path: {tokenizer}}}
data:
  type: random
  input_distribution: {{min: 100, max: 140, mean: 120, std_dev: 10}}
  output_distribution: {{min: {OUTPUT_TOKENS - 4}, max: {OUTPUT_TOKENS + 4}, mean: {OUTPUT_TOKENS}, std_dev: 2}}
report:
  request_lifecycle: {{summary: true, per_stage: true, per_request: false}}
storage:
  local_storage: {{path: {out}}}
"""


def test_stage_summaries_name_the_cap_by_littles_law(cli: Cli, tokenizer_dir: Path, tmp_path: Path) -> None:
    cap = random_cap()
    concurrencies = sorted({max(1, cap // 2), cap, 2 * cap, 4 * cap})
    reports = tmp_path / "reports"
    with start_sim_server(get_preset("tiny").with_overrides(max_num_seqs=cap), tokenizer=str(tokenizer_dir)) as sim:
        (tmp_path / "config.yml").write_text(config(sim.url, tokenizer_dir, reports, concurrencies,
                                                    [8 * max(c, cap) for c in concurrencies]))
        done = run_peer([peer_command("inference-perf"), "--config_file", "config.yml"], tmp_path, 420)
    assert done.returncode == 0, (cap, (tmp_path / "peer.log").read_text()[-3000:])
    stages = sorted(reports.glob("stage_*_lifecycle_metrics.json"))
    assert len(stages) == len(concurrencies), sorted(p.name for p in reports.iterdir())
    out = tmp_path / "imported"
    done_import = cli("import", *map(str, stages), "--out", str(out))
    assert done_import.exit_code == 0, done_import.output
    diagnosed = cli("diagnose", str(out), "--json")
    assert diagnosed.exit_code == 0, diagnosed.output
    v = json.loads(diagnosed.output)["verdict"]
    assert v["constraint"] == "admission_cap", (cap, v)
    assert abs(v["estimated_cap"] - cap) <= 0.1 * cap, (cap, v)
    assert any("Little's law on tokens" in e for e in v["evidence"]), (cap, v)
    for line in v["evidence"]:   # the stages state no per-request figure: none is claimed, none said to rise
        assert not re.search(r"kept rising|most requests decoding at once|time-average", line), (cap, line)
