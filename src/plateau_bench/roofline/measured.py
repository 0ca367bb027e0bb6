"""A GPU's measured steps beside the roofline: what ``bench/gpu_truth.py`` measures, and what it means.

``bench/gpu_truth.py`` times decode and prefill steps of a real model's shape on a real GPU and saves a
``Measurement`` (JSON under ``bench/data/``). This module reads one and sets each step beside the
roofline of that shape on that GPU (``compare``): the roofline's step, the binding resource, and the
efficiency on it (the resource's roofline time over the measured step). ``derived_efficiencies`` reads
the fractions of the datasheet reached; ``efficiency.json`` ships them as the twin's defaults, and a
test holds the two together.

* ``memory`` and ``compute``: the step's weight products alone, timed apart from its small kernels
  (norms, rotary, attention, cache writes, residuals, which an engine fuses): the batch-1 decode's
  read rate over the datasheet bandwidth, the longest prefill's FLOP rate over the dense peak.
* ``memory_step`` and ``compute_step``: whole steps of the measured implementation, the medians of the
  memory-bound decodes and of the prefills of ``COMPUTE_EFFICIENCY_FROM`` tokens and more.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.bound import build_roofline, decode_terms, prefill_terms
from plateau_bench.roofline.deployment import Deployment
from plateau_bench.roofline.hardware import GpuSpec, figure, find_link
from plateau_bench.roofline.model import model_from_json

COMPUTE_EFFICIENCY_FROM = 2048   # prefills at least this long measure the compute efficiency


class Step(msgspec.Struct, frozen=True, kw_only=True):
    kind: str                 # "decode" or "prefill"
    batch: int                # sequences (decode) or 1 (prefill)
    tokens: int               # tokens through the layers: batch (decode) or the prompt (prefill)
    context: int              # decode: tokens each sequence attends to; prefill: the prompt
    ms: float                 # median step time
    ms_min: float
    ms_max: float
    samples: int
    gpu: str | None = None    # what plateau's GPU analysis read during it (NVML), one sentence


class DecodeSplit(msgspec.Struct, frozen=True, kw_only=True):
    """Where a batch-1 decode step's time goes: its weight products alone, and the kernels it launches."""

    batch: int
    context: int
    linears_ms: float         # only the step's weight matrix products (same shapes and order), one graph
    linear_kernels: int       # how many products that is (4 a layer, and the head)
    kernels: int | None       # GPU kernels one eager step launches (torch's profiler; None where it cannot tell)
    prefill_tokens: int = 0   # the longest prefill, split the same way:
    prefill_linears_ms: float = 0.0   # its weight products alone (the head for the last token only)


class Ceilings(msgspec.Struct, frozen=True, kw_only=True):
    copy_gbps: float          # bytes read + written per second, device to device
    matmul_tflops: float      # dense bf16 matrix product


class Measurement(msgspec.Struct, frozen=True, kw_only=True):
    gpu_name: str             # as the device reports it
    gpu_key: str | None       # the roofline catalogue's GPU, when the name is known to it
    driver: str | None
    cuda: str | None
    torch: str
    device: str               # "cuda" or "cpu"
    dtype: str
    graphs: bool              # decode timed as CUDA-graph replays
    model: dict[str, Any]     # the Hugging Face config.json fields of the shape
    ceilings: Ceilings
    steps: list[Step]
    nvml: list[str] = msgspec.field(default_factory=list)   # NVML readings summarised, or why there are none
    measured_on: str = ""
    split: DecodeSplit | None = None


class Row(msgspec.Struct, frozen=True, kw_only=True):
    step: Step
    roofline_ms: float        # the roofline's step: overhead + the binding resource
    work_ms: float            # the same without the fixed per-step overhead
    memory_ms: float
    compute_ms: float
    binding: str              # "memory" or "compute" (one GPU: no interconnect)
    efficiency: float         # the binding resource's roofline time over the measured step


def compare(m: Measurement, gpu: GpuSpec) -> list[Row]:
    """Every measured step beside the roofline of its shape on ``gpu`` (one GPU, bf16)."""
    shape = model_from_json(msgspec.json.encode(m.model), "the measured shape")
    rows = []
    for s in m.steps:
        d = Deployment(gpus=1, tp=1, dtype="bf16", kv_dtype="bf16", input_len=s.context, output_len=1)
        rf = build_roofline(shape, gpu, d, find_link(None, gpu))
        terms = decode_terms(rf, s.batch, s.context) if s.kind == "decode" else prefill_terms(rf, s.tokens)
        memory, compute = (terms.weights_s + terms.kv_s) * 1e3, terms.compute_s * 1e3
        work = max(memory, compute)
        rows.append(Row(step=s, roofline_ms=terms.step_s * 1e3, work_ms=work, memory_ms=memory, compute_ms=compute,
                        binding="memory" if memory >= compute else "compute", efficiency=work / s.ms))
    return rows


def linear_flops(config: dict[str, Any], tokens: int, head_rows: int) -> float:
    """FLOPs of a step's weight products: ``tokens`` rows through every layer, ``head_rows`` through the head."""
    c = config
    hd, h, ffn = c["head_dim"], c["hidden_size"], c["intermediate_size"]
    per_layer = h * (c["num_attention_heads"] + 2 * c["num_key_value_heads"]) * hd + c["num_attention_heads"] * hd * h
    per_layer += 3 * h * ffn
    return 2.0 * float(c["num_hidden_layers"] * per_layer * tokens + c["vocab_size"] * h * head_rows)


def derived_efficiencies(m: Measurement, rows: list[Row], gpu: GpuSpec) -> dict[str, float]:
    """Fractions of the datasheet reached, read off a measurement (see the module docstring).

    ``memory`` and ``compute``: the weight products alone (the batch-1 decode's read rate, the longest
    prefill's FLOP rate), what the twin's defaults take; ``memory_step`` and ``compute_step``: whole
    steps of this plain implementation (the medians of the memory-bound decodes and of the prefills of
    ``COMPUTE_EFFICIENCY_FROM`` tokens and more), whose unfused small kernels engines fuse away."""
    out: dict[str, float] = {}
    first = next((r for r in rows if r.step.kind == "decode" and r.step.batch == 1), None)
    if m.split is not None and first is not None and m.split.linears_ms > 0:
        out["memory"] = round(first.memory_ms / m.split.linears_ms, 2)
    if m.split is not None and m.split.prefill_linears_ms > 0:
        rate = linear_flops(m.model, m.split.prefill_tokens, 1) / (m.split.prefill_linears_ms / 1e3)
        out["compute"] = round(rate / (gpu_bf16(gpu) * 1e12), 2)
    memory = [r.efficiency for r in rows if r.step.kind == "decode" and r.binding == "memory"]
    compute = [r.efficiency for r in rows if r.step.kind == "prefill" and r.binding == "compute"
               and r.step.tokens >= COMPUTE_EFFICIENCY_FROM]
    if memory:
        out["memory_step"] = round(statistics.median(memory), 2)
    if compute:
        out["compute_step"] = round(statistics.median(compute), 2)
    return out


def gpu_bandwidth(gpu: GpuSpec) -> float:
    """The datasheet's memory bandwidth, GB/s."""
    return figure(gpu.bandwidth_gbps)


def gpu_bf16(gpu: GpuSpec) -> float:
    """The datasheet's dense bf16 peak, TFLOP/s."""
    return figure(gpu.tflops_bf16)


def load(path: Path) -> Measurement:
    """A saved measurement; ConfigError (one line) for a file that is not one."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=Measurement)
    except OSError as exc:
        raise ConfigError(f"cannot read measurement {path}: {exc.strerror or exc}") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{path}: not a bench/gpu_truth.py measurement ({exc})") from None


def render(m: Measurement, gpu: GpuSpec | None) -> str:
    """The measured table beside the roofline, the ceilings, the NVML readings, as text."""
    lines = [f"{m.gpu_name} (driver {m.driver or '-'}, CUDA {m.cuda or '-'}, torch {m.torch}), "
             f"{m.model['architectures'][0]} shape with random {m.dtype} weights, "
             + ("decode as CUDA-graph replays" if m.graphs else "eager"),
             f"measured copy {m.ceilings.copy_gbps:,.0f} GB/s (read + write), bf16 matrix product "
             f"{m.ceilings.matmul_tflops:,.0f} TFLOP/s"]
    if gpu is None:
        lines.append("no roofline: the catalogue does not know this GPU (give --gpu)")
        lines += [f"{s.kind:7} {s.batch:>5} {s.context:>6} {s.ms:>10.3f} ms" for s in m.steps]
        return "\n".join(lines)
    lines.append(f"roofline: {gpu.name}, datasheet {gpu_bandwidth(gpu):,.0f} GB/s and {gpu_bf16(gpu):,.1f} "
                 f"TFLOP/s bf16; the copy moved {m.ceilings.copy_gbps / gpu_bandwidth(gpu):.0%} of the bandwidth, "
                 f"the matrix product ran at {m.ceilings.matmul_tflops / gpu_bf16(gpu):.0%} of the peak")
    lines.append("kind     batch  tokens  context   measured ms   roofline ms (work)   binds    efficiency")
    rows = compare(m, gpu)
    for r in rows:
        s = r.step
        lines.append(f"{s.kind:7} {s.batch:>6} {s.tokens:>7} {s.context:>8} {s.ms:>13.3f} {r.roofline_ms:>13.3f} "
                     f"({r.work_ms:>7.3f})  {r.binding:8} {r.efficiency:>8.0%}")
    derived = derived_efficiencies(m, rows, gpu)
    lines.append("efficiency, weight products alone: " + _pairs(derived, ("memory", "compute"))
                 + "; whole steps: " + _pairs(derived, ("memory_step", "compute_step")))
    first = next((r for r in rows if r.step.kind == "decode" and r.step.batch == 1), None)
    if first is not None:
        gap = first.roofline_ms / first.step.ms - 1
        lines.append(f"batch-1 decode: roofline {first.roofline_ms:.3f} ms against {first.step.ms:.3f} ms measured "
                     f"({gap:+.1%}); its memory term alone {first.memory_ms:.3f} ms, the rest the roofline's "
                     f"{first.roofline_ms - first.work_ms:.3f} ms per-step overhead")
    if first is not None and m.split is not None:
        lines += split_lines(m, first, gpu)
    lines += [f"NVML: {line}" for line in m.nvml]
    lines += [f"  {s.kind} {s.tokens}x{s.context}: {s.gpu}" for s in m.steps if s.gpu]
    return "\n".join(lines)


def _pairs(derived: dict[str, float], keys: tuple[str, str]) -> str:
    return ", ".join(f"{k.split('_')[0]} {derived[k]:.2f}" for k in keys if k in derived) or "-"


def split_lines(m: Measurement, first: Row, gpu: GpuSpec) -> list[str]:
    """The batch-1 decode gap, resource by resource: the chip's copy rate, the products' own rate, the rest."""
    sp = m.split
    assert sp is not None
    read_gb = first.memory_ms / 1e3 * gpu_bandwidth(gpu)            # GB the step must read
    at_copy = read_gb / m.ceilings.copy_gbps * 1e3
    rest_ms = first.step.ms - sp.linears_ms
    out = [f"  memory at the datasheet's {gpu_bandwidth(gpu):,.0f} GB/s: {first.memory_ms:.3f} ms for "
           f"{read_gb:.2f} GB; at the measured copy rate ({m.ceilings.copy_gbps:,.0f} GB/s): {at_copy:.3f} ms",
           f"  the {sp.linear_kernels} weight products alone: {sp.linears_ms:.3f} ms, reading at "
           f"{read_gb / (sp.linears_ms / 1e3):,.0f} GB/s ({read_gb / (sp.linears_ms / 1e3) / gpu_bandwidth(gpu):.0%} "
           "of the datasheet)"]
    if sp.kernels is not None and sp.kernels > sp.linear_kernels:
        others = sp.kernels - sp.linear_kernels
        out.append(f"  the other {others} kernels of the step (norms, rotary, attention, cache writes, residuals): "
                   f"{rest_ms:.3f} ms, {rest_ms / others * 1e3:.1f} us each")
    else:
        out.append(f"  the rest of the step (norms, rotary, attention, cache writes, residuals): {rest_ms:.3f} ms")
    prefill = next((s for s in m.steps if s.kind == "prefill" and s.tokens == sp.prefill_tokens), None)
    if prefill is not None and sp.prefill_linears_ms > 0:
        rate = linear_flops(m.model, sp.prefill_tokens, 1) / (sp.prefill_linears_ms / 1e3) / 1e12
        out.append(f"prefill of {sp.prefill_tokens:,} tokens: its weight products alone {sp.prefill_linears_ms:.1f} ms "
                   f"at {rate:,.0f} TFLOP/s ({rate / gpu_bf16(gpu):.0%} of the datasheet), the rest (attention, "
                   f"norms, rotary, activations) {prefill.ms - sp.prefill_linears_ms:.1f} ms of {prefill.ms:.1f}")
    return out
