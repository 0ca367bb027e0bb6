"""Long prompts against real servers with their prefix caches on: a steady sweep's prompts are each new
to the cache, and the same server finds a shared prefix cached, so the zero is a measurement.

* vLLM states its cache in ``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries`` (tokens).
* llama.cpp states none; a slot keeps its last prompt and reuses the longest common start of the next
  one, and plateau-bench estimates the share from its evaluated-prompt-token counter
  (``analysis.level``).

Before every request had a prompt of its own, these sweeps cycled a pool of prompts and restarted it at
every level, so the second level found the first one's prompts cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

PROMPT, OUTPUT = 960, 8             # a long prompt, a short answer: prefill is most of the work
FRESH_HIT_MAX = 0.05                # new prompts: at most a token or two of each found cached
SHARED_PREFIX, SHARED_HIT_MIN = 896, 0.5


def _hit_rates(summary: dict[str, Any]) -> list[float]:
    return [lv["telemetry"]["prefix_cache_hit_rate"] for lv in summary["levels"]]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("server_name", ["vllm_server", "llamacpp_server"])
def test_a_steady_sweep_sends_prompts_the_prefix_cache_has_not_seen(
    server_name: str, request: pytest.FixtureRequest, tmp_path: Path, plateau_cli: PlateauCli
) -> None:
    server: ServerHandle = request.getfixturevalue(server_name)
    fresh = plateau_cli.saved(
        tmp_path / "fresh", "sweep", *plateau_cli.target(server), "--endpoint", "completions", "--mode", "steady",
        "-c", "2,4", "--input-len", str(PROMPT), "--output-len", str(OUTPUT),
        "--min-level-time", "3s", "--max-level-time", "6s",
    )  # fmt: skip
    figures = [(lv["label"], lv["prompts"], lv["telemetry"].get("prefix_cache_hit_rate")) for lv in fresh["levels"]]
    assert all(lv["prompts"]["repeated"] == 0 and lv["completed"] > 0 for lv in fresh["levels"]), figures
    assert all(rate is not None and rate <= FRESH_HIT_MAX for rate in _hit_rates(fresh)), figures
    assert fresh["verdict"]["constraint"] != "measurement", fresh["verdict"]
    # The control: every request starting with one shared prefix is found cached by the same server.
    shared = plateau_cli.saved(
        tmp_path / "shared", "run", *plateau_cli.target(server), "--endpoint", "completions", "--mode", "steady",
        "--concurrency", "2", "--duration", "4s", "--prefix-groups", "1", "--prefix-len", str(SHARED_PREFIX),
        "--input-len", str(PROMPT - SHARED_PREFIX), "--output-len", str(OUTPUT),
    )  # fmt: skip
    (rate,) = _hit_rates(shared)
    print(f"{server.kind}: hit rates {_hit_rates(fresh)} with new prompts, {rate:.2f} with a shared prefix")
    assert rate >= SHARED_HIT_MIN, (rate, shared["levels"][0]["prompts"])
    assert (shared.get("verdict") or {}).get("constraint") != "measurement", shared.get("verdict")
