"""inference-perf (the release pinned in versions.env) against serve-sim with an admission cap drawn at random:
its reports directory, imported exactly as the tool wrote it, must make the verdict name that cap.

The run is one concurrency stage per level (``load.type: concurrent``), streaming, 64-token prompts and
96-token outputs, with the per-request report switched on (``report.request_lifecycle.per_request``): the
one that holds each request's times. The levels double from 1 past two and a half times the cap, so at least
two sit above it.

The twin runs at a quarter of real time: a request then takes about a second, and the few milliseconds that
the tool's worker processes add to a first token while they start up (two cores, shared) stay small beside a
step; at full speed they read as a prefill cost larger than the whole step.
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

pytestmark = pytest.mark.slow   # about a minute of a real tool's run: not for the inner loop

SPEED = 0.25
INPUT_LEN, OUTPUT_LEN = 64, 96
RUN_TIMEOUT_S = 240


def stages(cap: int) -> list[dict[str, int]]:
    """Concurrency 1, 2, 4, ... up to the first level at least 2.5x the cap; three times as many requests as
    the level runs at once (four at least): a steady state between the ramp-up and the drain."""
    levels, c = [], 1
    while True:
        levels.append(c)
        if c >= 2.5 * cap:
            break
        c *= 2
    return [{"concurrency_level": c, "num_requests": max(4, 3 * c)} for c in levels]


def config(url: str, model: str, tokenizer: Path, reports: Path, cap: int) -> dict[str, object]:
    """inference-perf's configuration (its YAML; JSON is YAML)."""
    fixed = {"type": "fixed", "std_dev": 0}
    return {
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": model, "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "data": {"type": "random",
                 "input_distribution": {**fixed, "min": INPUT_LEN, "max": INPUT_LEN, "mean": INPUT_LEN},
                 "output_distribution": {**fixed, "min": OUTPUT_LEN, "max": OUTPUT_LEN, "mean": OUTPUT_LEN}},
        "load": {"type": "concurrent", "interval": 1, "stages": stages(cap)},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": True}},
        "storage": {"local_storage": {"path": str(reports)}},
    }


def _verdict(out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, text, err = plateau(["diagnose", str(out), "--json"], capsys)
    assert code == 0, err
    verdict: dict[str, object] = json.loads(text)["verdict"]
    return verdict


def test_inference_perf_stages_give_the_drawn_cap(tmp_path: Path, tokenizer_dir: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cap = random_cap()
    command = peer_command("inference-perf")
    engine = get_preset("tiny").with_overrides(max_num_seqs=cap)
    reports = tmp_path / "reports"
    with start_sim_server(engine, tokenizer=str(tokenizer_dir), speed=SPEED) as sim:
        (tmp_path / "config.yml").write_text(json.dumps(config(sim.url, engine.model_name, tokenizer_dir, reports,
                                                               cap)))
        done = run_peer([command, "-c", "config.yml"], cwd=tmp_path, timeout_s=RUN_TIMEOUT_S)
    log = tail(tmp_path / "peer.log")
    assert done.returncode == 0, f"cap {cap}: inference-perf failed:\n{log}"
    assert (reports / "per_request_lifecycle_metrics.json").is_file(), f"cap {cap}: no per-request report:\n{log}"

    out = tmp_path / "imported"
    code, _, err = plateau(["import", str(reports), "--out", str(out)], capsys)
    assert code == 0, f"cap {cap}: plateau import failed: {err}\n{log}"
    result = json.loads((out / "result.json").read_text())
    levels = [(lv["concurrency"], lv["num_requests"], lv["peak_decoding"]) for lv in result["levels"]]
    verdict = _verdict(out, capsys)
    context = f"cap {cap}; levels (C, requests, peak decoding) {levels}; verdict {verdict}; inference-perf:\n{log}"
    assert [(c, n) for c, n, _ in levels] == [(s["concurrency_level"], s["num_requests"]) for s in stages(cap)], context
    assert (verdict["constraint"], verdict["estimated_cap"]) == ("admission_cap", cap), context
