"""GuideLLM (the release pinned in versions.env) against serve-sim: ``plateau import`` of exactly the
directory it wrote names the admission cap serve-sim was given, drawn afresh each run.

GuideLLM runs a concurrent profile, one benchmark per stream count, at stream counts straddling the cap
(one, half of it, twice and four times it), streaming fixed lengths, a few seconds a level (each level
costs GuideLLM some ten seconds more to start its worker and compile its statistics; about a minute in
all). Its directory holds what a user's holds: the report (``benchmarks.json``, with every request), its
CSV, YAML and HTML twins, and the console saved beside them (``peer.log``); the companions must be
skipped, not misread. The importer that ended a request's decoding at GuideLLM's ``request_end`` (after the
usage chunk and ``[DONE]``) read the busiest instant well above the cap here (5 as 8-10, 9 as 12-15)
and the verdict fell to compute.

Two settings keep the client's timestamps honest on a small, shared CI machine: GuideLLM runs one worker
process (``GUIDELLM__MAX_WORKER_PROCESSES=1``; its default of up to ten, on two cores, stamps tokens tens
of ms late and out of order between processes), and the engine runs at half speed (5 ms steps rather than
2.6), so a request's last token and the next one's first, one step apart on the server, stay in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset

from support.loading import plateau
from support.peers import peer_command, random_cap, run_peer
from support.real_servers import tail

SECONDS_PER_LEVEL = 3
SPEED = 0.5


def streams(cap: int) -> list[int]:
    """Two levels below the cap (the TPOT fit needs two) and two well above it (the cap signature)."""
    return sorted({1, max(2, cap // 2), 2 * cap, 4 * cap})


def _guidellm(out: Path, levels: list[int], url: str, model: str, tokenizer_dir: Path) -> str:
    """Run GuideLLM into ``out``; its log's tail (for the assertion messages)."""
    command = [peer_command("guidellm"), "run",
               "--backend", f"kind=openai_http,target={url},model={model}",
               "--profile", "kind=concurrent", "--override", "profile.streams", ",".join(map(str, levels)),
               "--constraint", f"kind=max_duration,seconds={SECONDS_PER_LEVEL}",
               "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir}",
               "--data", "kind=synthetic_text,prompt_tokens=64,output_tokens=64",
               "--output", "kind=json", "--output", "kind=csv", "--output", "kind=yaml", "--output", "kind=html",
               "--disable-console-interactive"]
    done = run_peer(command, cwd=out, timeout_s=240, env={"GUIDELLM__MAX_WORKER_PROCESSES": "1"})
    log = tail(out / "peer.log")
    assert done.returncode == 0, f"guidellm exited {done.returncode}:\n{log}"
    return log


@pytest.mark.timeout(300)
def test_guidellm_directory_names_the_admission_cap(tmp_path: Path, tokenizer_dir: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    cap = random_cap()
    config = get_preset("tiny").with_overrides(max_num_seqs=cap)
    out = tmp_path / "guidellm"
    out.mkdir()
    with start_sim_server(config, tokenizer=str(tokenizer_dir), speed=SPEED) as sim:
        log = _guidellm(out, streams(cap), sim.url, config.model_name, tokenizer_dir)
    imported = tmp_path / "imported"
    code, text, err = plateau(["import", str(out), "--out", str(imported), "--json"], capsys)
    assert code == 0, f"cap {cap}: plateau import failed: {err}\nguidellm's log:\n{log}"
    summary = json.loads(text)
    levels = [f"C={n}" for n in streams(cap)]
    assert summary["levels"] == levels and summary["with_records"] == levels, f"cap {cap}: {summary}"
    skipped = " ".join(summary["warnings"])
    for name in ("benchmarks.csv", "benchmarks.yaml", "benchmarks.html", "peer.log"):
        assert f"{name}:" in skipped, f"cap {cap}: {name} not skipped: {summary['warnings']}"
    code, text, err = plateau(["diagnose", str(imported), "--json"], capsys)
    assert code == 0, err
    verdict = json.loads(text)["verdict"]
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", cap), (
        f"cap {cap}: the verdict names {verdict['constraint']} {verdict['estimated_cap']}\n"
        f"verdict: {json.dumps(verdict, indent=1)}\nguidellm's log:\n{log}")
