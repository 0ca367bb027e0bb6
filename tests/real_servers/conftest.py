"""Fixtures that run real third-party inference servers (vLLM CPU build, llama.cpp) on 127.0.0.1.

The servers must have been provisioned first (``scripts/provision.sh``, run by ``.ci/provision``): it
installs them and generates their random-weight models under ``$PLATEAU_CACHE`` (default
``~/.cache/plateau-bench``). A server that is not provisioned makes every test using its fixture FAIL
with the provisioning log's tail; nothing is skipped silently.

Every test collected under this directory gets the ``real_server`` marker (also set by pytestmark in
each file), so ``pytest -m "not real_server"`` runs the rest of the suite without these servers, and a
timeout of REAL_SERVER_TIMEOUT_S unless it sets its own.

Fixtures (session scope: each server starts once per test run and is stopped at the end):

``vllm_server`` -> ServerHandle
    ``vllm serve`` of a tiny random LlamaForCausalLM (2 layers, hidden 128) with ``--max-num-seqs 4``
    and ``--max-model-len 2048``. Startup ~130 s. Exposes vllm:num_requests_running/waiting etc. on
    /metrics.
``llamacpp_server`` -> ServerHandle
    ``llama-server`` with ``--parallel 4 -c 8192`` on the "mid" GGUF (8 layers, hidden 512: big enough
    that batching 4 slots pays). Startup ~1 s. Exposes llamacpp:requests_processing etc. on /metrics,
    plus /slots and /props.

ServerHandle (tests/support/real_servers.py) attributes:
    url             base URL, e.g. "http://127.0.0.1:41234"; OpenAI API under /v1
    model           served model name to put in requests ("tiny" for both servers)
    tokenizer_dir   vLLM: local Hugging Face tokenizer dir (for ``--tokenizer``); llama.cpp: None
    model_path      the model directory / GGUF file being served
    vllm_executable vLLM: the venv's ``vllm`` command; llama.cpp: None
    pid, port, log_path, kind ("vllm" | "llamacpp"), extra (e.g. {"max_num_seqs": 4})
    log_tail(lines) last lines of the server's log, for assertion messages

Both servers honour ``max_tokens`` exactly with ``"ignore_eos": true`` and report token counts in
``usage`` (ask with ``"stream_options": {"include_usage": true}`` when streaming); vLLM may merge
several tokens into one text chunk, so count tokens from ``usage``.

Other configurations: call ``real_servers.start_vllm(max_num_seqs, port=None)`` or
``real_servers.start_llamacpp(parallel, port=None, model="tiny"|"mid", ctx=8192)`` directly and
``handle.stop()`` in a ``finally``; a free high port is picked when none is given.

Cross-checks against vLLM's own benchmark: ``run_vllm_bench(args)`` (fixture) or
``real_servers.vllm_bench_serve(handle, args)`` runs ``vllm bench serve`` from the vLLM venv with the
base URL, model and local tokenizer filled in, and returns the CompletedProcess.

Driving the CLI: ``plateau_cli`` (fixture) -> PlateauCli with ``target(server)`` (the --url,
--tokenizer where the server has a local one, and known workarounds), ``invoke(*args)`` -> (exit code, output) and
``saved(out, *args)`` -> result.json of a run that must exit 0.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from plateau_bench.store import load_summary

from support import real_servers
from support.loading import Cli
from support.real_servers import ProvisioningError, ServerHandle

VLLM_MAX_NUM_SEQS = 4
LLAMACPP_PARALLEL = 4
LLAMACPP_MODEL = "mid"
# Per-test bound (pytest-timeout counts fixture set-up): the first test to use vLLM also waits for its
# start-up (~130 s measured, up to real_servers.VLLM_STARTUP_TIMEOUT_S = 600 s on a busy machine).
# Tests that need longer say so with their own @pytest.mark.timeout.
REAL_SERVER_TIMEOUT_S = int(real_servers.VLLM_STARTUP_TIMEOUT_S) + 300

def _started(start: Callable[[], ServerHandle]) -> Iterator[ServerHandle]:
    try:
        handle = start()
    except ProvisioningError as exc:
        failure = str(exc)
    else:
        failure = ""
    if failure:  # failed outside the except block so the report shows the log tail, not a chained traceback
        pytest.fail(failure, pytrace=False)
    try:
        yield handle
    finally:
        handle.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test here needs a real server: mark them all, so `-m "not real_server"` leaves them out even
    # when a test file forgets its pytestmark.
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.real_server)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(REAL_SERVER_TIMEOUT_S))


@pytest.fixture(scope="session", autouse=True)
def load_generator_core() -> Iterator[None]:
    """Keep this process (the load generator, and the tools it starts) off the servers' cores."""
    if not hasattr(os, "sched_setaffinity") or not real_servers.client_cpus():
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, real_servers.client_cpus())
    yield
    os.sched_setaffinity(0, before)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[ServerHandle]:
    yield from _started(lambda: real_servers.start_vllm(max_num_seqs=VLLM_MAX_NUM_SEQS))


@pytest.fixture(scope="session")
def llamacpp_server() -> Iterator[ServerHandle]:
    yield from _started(lambda: real_servers.start_llamacpp(parallel=LLAMACPP_PARALLEL, model=LLAMACPP_MODEL))


@pytest.fixture
def run_vllm_bench(vllm_server: ServerHandle) -> Callable[[Sequence[str]], subprocess.CompletedProcess[str]]:
    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return real_servers.vllm_bench_serve(vllm_server, args)

    return run


class PlateauCli:
    """Runs the ``plateau`` CLI in-process (the suite's ``cli`` fixture), as a user would, against a real server."""

    def __init__(self, cli: Cli) -> None:
        self._cli = cli

    def target(self, server: ServerHandle) -> list[str]:
        flags = ["--url", server.url]
        if server.tokenizer_dir is not None:
            flags += ["--tokenizer", str(server.tokenizer_dir)]
        return flags

    def invoke(self, *args: str) -> tuple[int, str]:
        result = self._cli(*args)
        return result.exit_code, result.output

    def saved(self, out: Path, *args: str) -> dict[str, Any]:
        code, output = self.invoke(*args, "--out", str(out), "--quiet")
        assert code == 0, output
        return load_summary(out)


@pytest.fixture(scope="session")  # stateless; session scope lets module fixtures (one sweep, several tests) use it
def plateau_cli(cli: Cli) -> PlateauCli:
    return PlateauCli(cli)
