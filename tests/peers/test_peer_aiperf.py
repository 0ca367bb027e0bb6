"""The real AIPerf (tests/support/versions.env) sweeps serve-sim with an admission cap drawn at random;
``plateau import`` reads exactly the directory AIPerf wrote, and the verdict must name that cap.

AIPerf runs as users run a sweep: one ``aiperf profile --concurrency A,B,C,D`` writing one subdirectory
per level (and its aggregates) under ``--artifact-dir``. The levels straddle the cap: half of it, twice
and four times it. Streaming, fixed lengths (64 in, 64 out), a few seconds per level.

Two settings keep it honest on a small shared machine: the engine clock runs at a quarter of real time, so
AIPerf's worker parses the token stream as it comes (a client that falls behind stamps requests as ending
late, and they seem to overlap more than the server let them); and AIPerf's GPU and /metrics collectors are
off (nothing to collect here, and each costs a process per level).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset

from support.loading import plateau
from support.peers import peer_command, random_cap, run_peer
from support.real_servers import tail

pytestmark = pytest.mark.slow   # the real tool over HTTP: about a minute

SPEED = 0.25              # engine clock vs real time (see the module docstring)
LEVEL_S = 2               # --benchmark-duration of each level
AIPERF_TIMEOUT_S = 240
HUB_REPO = "plateau/tokenizer"
REVISION = "0" * 40


def hub_cache(tokenizer_dir: Path, root: Path) -> dict[str, str]:
    """The tokenizer as a Hugging Face hub cache entry (``HUB_REPO``), and the environment that points there.

    Offline (HF_HUB_OFFLINE=1), AIPerf 0.13 looks a tokenizer up only in the hub cache, even when it is
    given a local directory; the cache layout is refs/main naming a snapshot directory with the files.
    """
    entry = root / "hub" / f"models--{HUB_REPO.replace('/', '--')}"
    snapshot = entry / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, snapshot / f.name)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(REVISION)
    return {"HF_HUB_CACHE": str(root / "hub"), "HF_HOME": str(root)}


def levels_around(cap: int) -> list[int]:
    """One level below the cap and two above it (the plateau needs two levels past the cap)."""
    return [max(1, cap // 2), 2 * cap, 4 * cap]


def aiperf_sweep(url: str, model: str, levels: list[int], artifacts: Path) -> list[str]:
    return [str(peer_command("aiperf")), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
            "--streaming", "--tokenizer", HUB_REPO, "--isl", "64", "--isl-stddev", "0", "--osl", "64",
            "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true", "--concurrency", ",".join(map(str, levels)),
            "--benchmark-duration", str(LEVEL_S), "--benchmark-grace-period", "30", "--random-seed", "7",
            "--ui", "none", "--no-gpu-telemetry", "--no-server-metrics", "--artifact-dir", str(artifacts)]


@pytest.mark.timeout(420)
def test_aiperf_sweep_imports_and_names_the_cap(tmp_path: Path, tokenizer_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cap = random_cap()
    levels = levels_around(cap)
    config = get_preset("tiny").with_overrides(max_num_seqs=cap)
    artifacts = tmp_path / "artifacts"
    env = hub_cache(tokenizer_dir, tmp_path / "hf")
    with start_sim_server(config, tokenizer=str(tokenizer_dir), speed=SPEED) as sim:
        done = run_peer(aiperf_sweep(sim.url, config.model_name, levels, artifacts), tmp_path, AIPERF_TIMEOUT_S, env)
    log = tail(tmp_path / "peer.log", 40)
    assert done.returncode == 0, f"cap {cap}, levels {levels}: aiperf exited {done.returncode}\n{log}"

    out = tmp_path / "imported"
    code, _, err = plateau(["import", str(artifacts), "--out", str(out)], capsys)
    assert code == 0, f"cap {cap}: plateau import {artifacts} failed: {err}\naiperf log:\n{log}"
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, f"cap {cap}: plateau diagnose failed: {err}"
    verdict = json.loads(text)["verdict"]
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", cap), \
        f"cap {cap}, levels {levels}: verdict {json.dumps(verdict, indent=1)}\naiperf log:\n{log}"
