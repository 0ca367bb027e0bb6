"""bench/gpu_truth.py: the decoder computes what a decoder computes, runs anywhere, and its saved
measurement is what the twin's default efficiencies and the README's GPU table are read from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import msgspec
import pytest

from plateau_bench.roofline import find_gpu, measured
from plateau_bench.roofline.efficiency import measured_efficiency

from support.loading import script

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "bench" / "data" / "gpu_truth-h200-sxm.json"


gpu_truth = script("bench/gpu_truth.py")


def _torch() -> ModuleType:
    """torch, which scripts/test installs (CPU build); the inner loop on a machine without it skips,
    CI (PLATEAU_REQUIRE_TORCH=1) fails instead."""
    if os.environ.get("PLATEAU_REQUIRE_TORCH"):
        import torch
        return torch
    return pytest.importorskip("torch")


def test_a_decode_step_reads_what_the_prefill_wrote() -> None:
    """Decoding the last token over the cache a prefill wrote gives the prefill's own last logits."""
    torch = _torch()
    model = gpu_truth.Decoder(gpu_truth.TINY, "cpu", 64, dtype=torch.float32)
    tokens = torch.randint(0, model.vocab, (20,), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        whole = model.prefill(tokens)
        last = model.decode(tokens[-1:], 20)
        other = model.decode(tokens[-2:-1], 20)   # another token at that position: other logits
    assert float((last - whole).norm() / whole.norm()) < 1e-4
    assert float((other - whole).norm() / whole.norm()) > 1e-2


def test_the_weight_products_alone_are_counted_as_the_step_has_them() -> None:
    torch = _torch()
    model = gpu_truth.Decoder(gpu_truth.TINY, "cpu", 16)
    x, wide = torch.zeros(1, 128, dtype=torch.bfloat16), torch.zeros(1, 256, dtype=torch.bfloat16)
    assert model.linears(x, wide, 1) == 4 * 2 + 1
    c = gpu_truth.LLAMA_8B
    per_layer = 4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336
    assert measured.linear_flops(c, 8192, 1) == 2.0 * (32 * per_layer * 8192 + 128256 * 4096)


@pytest.mark.slow   # two processes that import torch: ~3 s
def test_the_tiny_shape_runs_on_the_cpu_and_its_file_renders(tmp_path: Path) -> None:
    _torch()
    out = tmp_path / "tiny.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_truth.py"), "--tiny", "--device", "cpu",
                           "--gpu", "h200-sxm", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    saved = measured.load(out)
    assert saved.device == "cpu" and saved.gpu_key is None and not saved.graphs
    kinds = [(s.kind, s.batch, s.context) for s in saved.steps]
    assert kinds == [("decode", b, c) for c in (16, 32) for b in (1, 4)] + [("prefill", 1, 16), ("prefill", 1, 64)]
    assert all(s.ms > 0 and s.ms_min <= s.ms <= s.ms_max for s in saved.steps)
    assert saved.split is not None and saved.split.linear_kernels == 9 and saved.split.prefill_tokens == 64
    assert saved.nvml and "NVML not available" in saved.nvml[0]
    assert "batch-1 decode: roofline" in done.stdout
    rendered = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_truth.py"), "--render", str(out)],
                              capture_output=True, text=True, timeout=60)
    assert "no roofline: the catalogue does not know this GPU" in rendered.stdout


def test_the_saved_h200_measurement_is_whole() -> None:
    saved = measured.load(SAVED)
    assert saved.gpu_name == "NVIDIA H200" and saved.gpu_key == "h200-sxm" and saved.graphs
    assert saved.driver and saved.cuda and saved.torch
    assert saved.model == gpu_truth.LLAMA_8B
    plan = gpu_truth.FULL_PLAN
    assert [(s.batch, s.context) for s in saved.steps if s.kind == "decode"] == [
        (b, c) for c in plan["contexts"] for b in plan["batches"]]
    assert [s.tokens for s in saved.steps if s.kind == "prefill"] == plan["prefill"]
    assert all(s.gpu and "NVML samples" in s.gpu for s in saved.steps)   # NVML read during every step


def test_the_twins_default_efficiencies_are_the_saved_measurements() -> None:
    """roofline/efficiency.json ships what derived_efficiencies reads off the committed file."""
    saved = measured.load(SAVED)
    gpu = find_gpu("h200-sxm")
    derived = measured.derived_efficiencies(saved, measured.compare(saved, gpu), gpu)
    shipped = measured_efficiency()
    assert (shipped.memory, shipped.compute) == (derived["memory"], derived["compute"])
    # The whole steps of the plain implementation reach less: its small kernels are not fused.
    assert derived["memory_step"] < derived["memory"] and derived["compute_step"] < derived["compute"]


def test_the_batch_1_gap_is_explained_resource_by_resource() -> None:
    """The roofline's batch-1 decode against the measured step: the weight products read at most at
    the copy rate the chip showed, and the products plus the rest add up to the step."""
    saved = measured.load(SAVED)
    gpu = find_gpu("h200-sxm")
    first = next(r for r in measured.compare(saved, gpu) if r.step.kind == "decode" and r.step.batch == 1)
    assert first.binding == "memory"
    read_gb = first.memory_ms / 1e3 * measured.gpu_bandwidth(gpu)
    assert 14.5 < read_gb < 15.5                                   # the 8B's weights less its embedding
    assert saved.split is not None
    products_rate = read_gb / (saved.split.linears_ms / 1e3)
    assert products_rate <= saved.ceilings.copy_gbps               # no faster than the chip moves bytes
    lines = measured.render(saved, gpu).split("\n")
    assert any(line.startswith("batch-1 decode: roofline") for line in lines)
    assert any("weight products alone" in line and "GB/s" in line for line in lines)
    assert any(line.startswith("  the other ") and "kernels of the step" in line for line in lines)


def test_the_saved_file_decodes_as_plain_json() -> None:
    raw = json.loads(SAVED.read_text())
    assert msgspec.convert(raw, measured.Measurement) == measured.load(SAVED)
