"""Level summaries still say why: the decoding batch by Little's law on tokens, the queue, and the KV cache.

Each table is written from a twin sweep (``plateau sim``, virtual time) as a summary tool would: one row per
level with its mean TTFT, mean TPOT and output tok/s, nothing per request. It goes through ``plateau import``
and ``plateau diagnose`` as a user's table would; the cap the twin ran with is drawn at random (printed on
failure), so the verdict must read it from the table.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.diagnosis_kv_room import KvRoom, weigh_kv
from plateau_bench.result import Latency, LevelResult

from support.builders import level_result
from support.loading import Cli

MODELS = Path(__file__).parents[2] / "examples" / "models"
LLAMA_H100 = ["--roofline", str(MODELS / "dense_gqa_llama.json"), "--gpu", "h100-sxm"]


def summary_table(cli: Cli, tmp_path: Path, *sim: str, concurrency: list[int], input_len: int = 128,
                  output_len: int = 128, columns: str = "means") -> Path:
    """A twin sweep written as a table of level summaries, imported: the result directory."""
    run = tmp_path / "twin"
    done = cli("sim", *sim, "--mode", "steady", "--concurrency", ",".join(map(str, concurrency)),
               "--input-len", str(input_len), "--output-len", str(output_len), "--out", str(run))
    assert done.exit_code == 0, done.output
    levels = json.loads((run / "result.json").read_text())["levels"]
    if columns == "means":
        rows = ["concurrency,mean TTFT (ms),mean TPOT (ms),output tok/s"]
        rows += [f"{lv['concurrency']},{lv['ttft_ms']['mean']:.2f},{lv['tpot_ms']['mean']:.3f},"
                 f"{lv['output_throughput']:.1f}" for lv in levels]
    else:   # a tool's summary: counts, duration and E2E too (decoding concurrency follows by Little's law)
        rows = ["concurrency,ok,duration (s),mean TTFT (ms),mean TPOT (ms),mean E2E (ms),output tok/s"]
        rows += [f"{lv['concurrency']},{lv['completed']},{lv['duration_s']:.2f},{lv['ttft_ms']['mean']:.2f},"
                 f"{lv['tpot_ms']['mean']:.3f},{lv['e2e_ms']['mean']:.1f},{lv['output_throughput']:.1f}"
                 for lv in levels]
    table = tmp_path / "levels.csv"
    table.write_text("\n".join(rows) + "\n")
    out = tmp_path / "imported"
    done = cli("import", str(table), "--out", str(out), "--mode", "steady", "--input-len", str(input_len),
               "--output-len", str(output_len))
    assert done.exit_code == 0, done.output
    return out


def verdict_of(cli: Cli, run: Path, *flags: str) -> dict[str, Any]:
    done = cli("diagnose", str(run), "--json", *flags)
    assert done.exit_code == 0, done.output
    verdict: dict[str, Any] = json.loads(done.output)["verdict"]
    return verdict


def claims_only_what_was_measured(evidence: list[str]) -> None:
    """No line states a figure a summary cannot hold, and a figure said to rise (or not) did so."""
    for line in evidence:
        assert not re.search(r"most requests decoding at once|time-average|peak", line), line
        for said, a, b in re.findall(r"(kept rising|rose in proportion|did not rise|stayed at)[^:]*: ?([\d,.]+) -> "
                                     r"([\d,.]+)", line):
            first, last = float(a.replace(",", "")), float(b.replace(",", ""))
            if said in ("kept rising", "rose in proportion"):
                assert last > 1.1 * first, line
            else:
                assert abs(last / first - 1) <= 0.2, line


@pytest.mark.parametrize("low, high", [(3, 16), (17, 300)])
def test_a_cap_held_by_littles_law_is_named_within_ten_percent(cli: Cli, tmp_path: Path, low: int,
                                                               high: int) -> None:
    cap = random.SystemRandom().randint(low, high)
    run = summary_table(cli, tmp_path, "--max-num-seqs", str(cap),
                        concurrency=sorted({max(1, cap // 2), cap, 2 * cap, 4 * cap, 8 * cap}))
    v = verdict_of(cli, run)
    assert v["constraint"] == "admission_cap", (cap, v)
    assert abs(v["estimated_cap"] - cap) <= 0.1 * cap, (cap, v)
    assert any("Little's law on tokens" in e and "did not rise" in e for e in v["evidence"]), (cap, v)
    claims_only_what_was_measured(v["evidence"])


def test_a_compute_bound_summary_sweep_is_named_compute_with_consistent_evidence(cli: Cli, tmp_path: Path) -> None:
    run = summary_table(cli, tmp_path, "--preset", "compute-bound", concurrency=[16, 32, 64, 128, 256, 512, 1024])
    v = verdict_of(cli, run)
    assert v["constraint"] == "compute", v
    batch = next(e for e in v["evidence"] if "Little's law on tokens" in e)
    sizes = [float(n.replace(",", "")) for n in re.findall(r"([\d,.]+) at C=", batch)]
    assert len(sizes) >= 2 and all(b > a for a, b in itertools.pairwise(sizes)), batch
    assert "kept rising" in batch
    assert any(e.startswith("TPOT rose in proportion") for e in v["evidence"]), v
    claims_only_what_was_measured(v["evidence"])


def test_a_summary_with_littles_law_concurrency_is_not_read_as_per_request_figures(cli: Cli, tmp_path: Path) -> None:
    # Counts, duration, E2E and TTFT give the decoding concurrency by Little's law (as inference-perf's stage
    # summaries do): still a summary, diagnosed from the batch, never as a batch "kept rising" that held.
    cap = random.SystemRandom().randint(4, 40)
    run = summary_table(cli, tmp_path, "--max-num-seqs", str(cap), concurrency=[cap, 2 * cap, 4 * cap],
                        columns="tool")
    v = verdict_of(cli, run)
    assert v["constraint"] == "admission_cap" and abs(v["estimated_cap"] - cap) <= 0.1 * cap, (cap, v)
    assert not any("kept rising" in e for e in v["evidence"]), v
    claims_only_what_was_measured(v["evidence"])


def test_a_held_batch_that_fills_the_roofline_kv_cache_may_be_the_kv_cache(cli: Cli, tmp_path: Path) -> None:
    # The twin built from the same roofline holds as many sequences as its KV cache fits (no cap below that).
    run = summary_table(cli, tmp_path, "--model", str(MODELS / "dense_gqa_llama.json"), "--gpu", "h100-sxm",
                        "--duration", "600s", concurrency=[32, 64, 128, 256, 512], input_len=3072, output_len=1024)
    assert verdict_of(cli, run)["constraint"] == "admission_cap"   # without the cache's size: a cap, at best
    v = verdict_of(cli, run, *LLAMA_H100)
    assert v["constraint"] == "kv_capacity" and v["secondary"] == "admission_cap", v
    assert v["confidence"] == "low", v
    assert any(e.startswith("KV cache: ") and "roofline" in e and "rather than a cap" in e for e in v["evidence"]), v


def test_a_capped_batch_with_room_in_the_kv_cache_stays_a_cap(cli: Cli, tmp_path: Path) -> None:
    cap = random.SystemRandom().randint(8, 48)
    run = summary_table(cli, tmp_path, "--model", str(MODELS / "dense_gqa_llama.json"), "--gpu", "h100-sxm",
                        "--max-num-seqs", str(cap), "--duration", "600s", concurrency=[cap // 2, cap, 2 * cap, 4 * cap],
                        input_len=512, output_len=256)
    v = verdict_of(cli, run, *LLAMA_H100)
    assert v["constraint"] == "admission_cap" and abs(v["estimated_cap"] - cap) <= 0.1 * cap, (cap, v)
    assert v["confidence"] == "medium", v   # the queue before a held batch, and the cache has room: a cap
    assert any(e.startswith("KV cache: ") and "not what holds it" in e for e in v["evidence"]), v


def held(c: int, prompt: float, output: float) -> LevelResult:
    """A level of a sweep held at 40 sequences: TPOT 25 ms, the queue in TTFT."""
    batch = min(c, 40) * 0.98
    tok_s = batch / 0.025
    return level_result(c, tok_s, completed=1000, num_requests=1000, duration_s=60.0,
                        request_throughput=tok_s / output, total_throughput=tok_s * (1 + prompt / output),
                        tpot_ms=Latency(mean=25.0), ttft_ms=Latency(mean=50.0 * max(1.0, c / 40) ** 2),
                        token_source="imported")


@pytest.mark.parametrize("cache, expected", [(40 * 1000 * 1.05, "kv_capacity"), (40 * 1000 * 3.0, "admission_cap"),
                                             (None, "admission_cap")])
def test_the_kv_cache_is_weighed_against_the_held_batch(cache: float | None, expected: str) -> None:
    levels = [held(c, 600.0, 400.0) for c in (10, 20, 40, 80, 160)]
    v = diagnose(levels, kv_room=KvRoom(cache, "stated for the test") if cache else None)
    assert v.constraint == expected and v.estimated_cap == 39, v
    kv_lines = [e for e in v.evidence if e.startswith("KV cache: ")]
    assert len(kv_lines) == (1 if cache else 0), v.evidence


def test_the_weight_needs_the_lengths() -> None:
    room = KvRoom(10_000, "test")
    assert weigh_kv(10, 0.0, 0.0, room) is None
    weight = weigh_kv(10, 600.0, 200.0, room)
    assert weight is not None and weight.reading == "full" and weight.share == pytest.approx(0.8)
    assert weigh_kv(10, 100.0, 100.0, room).reading == "room"   # type: ignore[union-attr]


def test_a_compute_verdict_does_not_call_a_flat_batch_rising() -> None:
    # Per-request levels whose decoding batch held at 12 while C grew and nothing pinned the peak: the step
    # time is what is left, and no line may say the batch kept rising from 12 to 12.
    levels = [level_result(c, 1200.0 if c >= 16 else 75.0 * c, completed=500, num_requests=500, duration_s=60.0,
                           decoding_concurrency=min(c, 12) * 0.99, peak_decoding=c, achieved_concurrency=c * 0.99,
                           tpot_ms=Latency(mean=10.0, p50=10.0, p99=10.5), ttft_ms=Latency(mean=40.0, p50=40.0))
              for c in (2, 4, 8, 16, 32, 64)]
    v = diagnose(levels)
    assert v.constraint == "compute" and v.confidence == "low", v
    assert not any("kept rising" in e or "rose in proportion" in e for e in v.evidence), v.evidence
    assert "decoding concurrency did not rise: 11.9 -> 11.9 from C=16 to C=64" in v.evidence, v.evidence
    assert any("did not grow over the plateau" in t for t in v.to_separate), v.to_separate
