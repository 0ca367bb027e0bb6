"""The peer benchmark tools (AIPerf, GuideLLM, inference-perf) that tests/peers/ runs against serve-sim.

``scripts/provision.sh peers`` (run by ``.ci/provision``) installs each current release, pinned in
versions.env, in its own venv under ``$PLATEAU_CACHE/peers/<tool>-<version>/venv``. A tool that is not
provisioned makes its tests FAIL with the provisioning log's tail; nothing is skipped silently.

The tools need a Hugging Face tokenizer and no hub is reachable: ``write_tokenizer_dir`` saves a byte-level
BPE trained on generated text, which serve-sim is given too (``--tokenizer``), so the prompt tokens the
server reports are the ones the tool counted.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset

from support.loading import Cli
from support.real_servers import ProvisioningError, cache_root, tail, versions
from support.trained_tokenizers import train_byte_bpe

PEERS = {"aiperf": "AIPERF_VERSION", "guidellm": "GUIDELLM_VERSION", "inference-perf": "INFERENCE_PERF_VERSION",
         "sglang-bench": "SGLANG_BENCH_VERSION"}
# Provisioned by its own script (not yet part of ``scripts/provision.sh peers``): name -> that script.
OWN_SCRIPTS = {"sglang-bench": "scripts/provision_sglang_bench.sh"}


def peer_venv(name: str) -> Path:
    return cache_root() / "peers" / f"{name}-{versions()[PEERS[name]]}" / "venv"


def peer_command(name: str, executable: str | None = None) -> Path:
    """The tool's command in its venv; ProvisioningError with the provisioning log's tail when absent."""
    venv = peer_venv(name)
    command = venv / "bin" / (executable or name)
    if (venv / ".plateau-ready").exists() and command.exists():
        return command
    log = cache_root() / "logs" / f"peer-{name}.log"
    script = OWN_SCRIPTS.get(name, "scripts/provision.sh peers")
    raise ProvisioningError(f"{name} is not provisioned (missing {command}). Run {script}. "
                            f"Last lines of {log}:\n{tail(log)}")


def random_cap(low: int = 3, high: int = 12) -> int:
    """The admission cap a test gives serve-sim: drawn afresh each run (printed by the test on failure),
    so no importer can pass by knowing it."""
    return random.SystemRandom().randint(low, high)


def write_tokenizer_dir(directory: Path) -> Path:
    """A Hugging Face tokenizer directory (tokenizer.json and its config, with a chat template)."""
    directory.mkdir(parents=True, exist_ok=True)
    train_byte_bpe().save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
              "pad_token": "</s>", "model_max_length": 8192, "clean_up_tokenization_spaces": False,
              "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 2000}))
    return directory


def run_peer(command: Sequence[str | Path], cwd: Path, timeout_s: float, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    """Run a peer tool offline; its output is kept in cwd/peer.log for the assertion message."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "NO_COLOR": "1", **(env or {})}
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    (cwd / "peer.log").write_text(done.stdout + "\n" + done.stderr)
    return done


# A peer tool's run at one concurrency against serve-sim: (server URL, model name, concurrency) -> its process.
PeerRun = Callable[[str, str, int], subprocess.CompletedProcess[str]]


def assert_runs_name_the_cap(cli: Cli, tokenizer_dir: Path, tmp_path: Path, out: Path, run_at: PeerRun) -> None:
    """Run a peer tool against serve-sim with a random cap at half, twice and four times that cap (each run
    writing its result file into ``out``), import ``out`` as it is, and assert the verdict names that exact
    cap: below, at and well past the cap is what a user's shell loop covers to find it."""
    cap = random_cap(3, 8)
    config = get_preset("tiny").with_overrides(max_num_seqs=cap)
    with start_sim_server(config, tokenizer=str(tokenizer_dir)) as sim:
        for concurrency in (max(1, cap // 2), 2 * cap, 4 * cap):
            done = run_at(sim.url, config.model_name, concurrency)
            assert done.returncode == 0, f"cap {cap}, C={concurrency}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    imported = cli("import", str(out), "--out", str(tmp_path / "imported"))
    assert imported.exit_code == 0, imported.output
    diagnosed = cli("diagnose", str(tmp_path / "imported"), "--json")
    assert diagnosed.exit_code == 0, diagnosed.output
    verdict = json.loads(diagnosed.stdout)["verdict"]
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", cap), (cap, verdict)
