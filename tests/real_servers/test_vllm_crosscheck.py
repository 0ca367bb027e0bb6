"""Cross-check against vLLM's own benchmark, ``vllm bench serve``, on the same server and workload.

Both tools run the same shape: a closed loop of 4 over N requests (vLLM: ``--max-concurrency 4
--num-prompts N``; plateau: ``run --concurrency 4 --num-requests N``), 32-token random prompts, exactly
64 output tokens (ignore_eos), the same local tokenizer. Both define output throughput as output
tokens over the wall time of the whole burst and TPOT as (E2E - TTFT) / (output tokens - 1) per
request, averaged over requests, so the figures should agree up to measurement noise. plateau runs
with ``--no-metrics`` here, as ``vllm bench serve`` reads no /metrics: on two shared cores the scrapes
cost the server's API process time, which a comparison of the clients' measurements must leave out.

The noise is real on a small shared machine: one burst of either tool can differ from the next by
tens of percent. So each tool runs ROUNDS times, alternating, and the medians are compared with a
tolerance of 10 % or the tools' own run-to-run spread, whichever is larger, but never more than
MAX_TOLERANCE (25 %). Every figure is printed so a reader can see where a difference comes from.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

CONCURRENCY = 4
NUM_REQUESTS = 48
INPUT_LEN = 32
OUTPUT_LEN = 64
ROUNDS = 3
TOLERANCE = 0.10
# The spread of three runs has no bound on a shared machine (one disturbed run makes it tens of
# percent), and a tolerance that follows it lets any difference pass. With the server on its own cores
# (conftest) three rounds of each tool spread 2-6 % and the medians differ by 6-7 % (measured on the
# 2-core machine), so 25 % leaves room for a noisy run while a gross disagreement still fails: the
# tools measuring different things (another window or denominator, chunks counted instead of tokens).
MAX_TOLERANCE = 0.25

VllmBench = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def _vllm_figures(run_vllm_bench: VllmBench, result_dir: Path, name: str) -> dict[str, float]:
    done = run_vllm_bench([
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(OUTPUT_LEN), "--num-prompts", str(NUM_REQUESTS),
        "--max-concurrency", str(CONCURRENCY), "--ignore-eos", "--seed", "0",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", name,
    ])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads((result_dir / name).read_text())
    assert saved["completed"] == NUM_REQUESTS and saved["total_output_tokens"] == NUM_REQUESTS * OUTPUT_LEN
    return {
        "output_tok_s": saved["output_throughput"],
        "mean_tpot_ms": saved["mean_tpot_ms"],
        "mean_ttft_ms": saved["mean_ttft_ms"],
        "duration_s": saved["duration"],
    }


def _plateau_figures(plateau_cli: PlateauCli, server: ServerHandle, out: Path) -> dict[str, float]:
    summary = plateau_cli.saved(
        out, "run", *plateau_cli.target(server), "--concurrency", str(CONCURRENCY),
        "--num-requests", str(NUM_REQUESTS), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
        "--no-metrics",
    )  # fmt: skip
    level = summary["levels"][0]
    assert level["completed"] == NUM_REQUESTS and level["output_tokens"] == NUM_REQUESTS * OUTPUT_LEN
    return {
        "output_tok_s": level["output_throughput"],
        "mean_tpot_ms": level["tpot_ms"]["mean"],
        "mean_ttft_ms": level["ttft_ms"]["mean"],
        "duration_s": level["duration_s"],
    }


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def test_throughput_and_tpot_agree_with_vllm_bench_serve(
    vllm_server: ServerHandle, run_vllm_bench: VllmBench, plateau_cli: PlateauCli, tmp_path: Path
) -> None:
    vllm_runs: list[dict[str, float]] = []
    plateau_runs: list[dict[str, float]] = []
    for round_ in range(ROUNDS):
        vllm_runs.append(_vllm_figures(run_vllm_bench, tmp_path, f"vllm-{round_}.json"))
        plateau_runs.append(_plateau_figures(plateau_cli, vllm_server, tmp_path / f"plateau-{round_}"))

    failures = []
    for key in ("output_tok_s", "mean_tpot_ms"):
        ours = [run[key] for run in plateau_runs]
        theirs = [run[key] for run in vllm_runs]
        tolerance = min(max(TOLERANCE, _spread(ours), _spread(theirs)), MAX_TOLERANCE)
        difference = abs(statistics.median(ours) - statistics.median(theirs)) / statistics.median(theirs)
        print(
            f"{key}: vllm bench serve {[round(v, 2) for v in theirs]} (median {statistics.median(theirs):.2f}); "
            f"plateau run {[round(v, 2) for v in ours]} (median {statistics.median(ours):.2f}); "
            f"difference {difference:.1%}, tolerance {tolerance:.1%}"
        )
        if difference > tolerance:
            failures.append(f"{key} differs by {difference:.1%} (> {tolerance:.1%})")
    for name, runs in (("vllm bench serve", vllm_runs), ("plateau run", plateau_runs)):
        for run in runs:
            print(f"{name}: " + ", ".join(f"{k}={v:.2f}" for k, v in run.items()))
    assert not failures, "; ".join(failures)
