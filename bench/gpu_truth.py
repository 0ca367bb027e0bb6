"""What one GPU really does with a real model's shape: decode and prefill steps beside the roofline.

Usage::

    python bench/gpu_truth.py                # a machine with an NVIDIA GPU: Llama-3.1-8B's shape in bf16
    python bench/gpu_truth.py --tiny         # anywhere, the CPU too: a toy shape (what the tests run)
    python bench/gpu_truth.py --render FILE  # the tables of a saved measurement (no torch needed)

A decoder with random weights and the shape of Llama-3.1-8B (32 layers, hidden 4096, 32 query and 8
KV heads of 128, gated MLP 14336, vocabulary 128256, untied head) runs in PyTorch with a static KV
cache, as an engine runs it:

* **decode**: one new token for each of ``batch`` sequences attending to ``context`` tokens of cache
  (batches 1 to 256, contexts 512 and 2048), logits for every sequence; one CUDA graph replayed (as
  engines decode), timed with CUDA events, the median of at least 20 replays, more until they fill
  1.5 s so that NVML reads the step and not the pauses.
* **prefill**: one prompt of 512 to 8,192 tokens, causal, logits for the last token; eager.
* **the split**: the batch-1 decode's and the longest prefill's weight products alone, and the kernels
  one decode step launches (torch's profiler), so a gap to the roofline is told resource by resource.
* **the chip's own ceilings**: a 4 GiB device copy (bytes read plus written) and an 8192-cubed bf16
  product.

Decode attention groups each KV head's four query heads as four queries over that head's keys (exact
for one new token, no copy of the keys); prefill repeats the KV heads. While each step is timed,
plateau's NVML sampler (``telemetry.gpu``) reads the GPU every 50 ms and plateau's GPU analysis
(``analysis.gpu``) says what a verdict would read of that window.

The tables set each step beside the roofline of the GPU found (its NVML name in the catalogue:
``NVIDIA H200`` is ``h200-sxm``), computed from the package as it is today, and the efficiencies
``roofline.measured`` derives (the twin's defaults, ``roofline/efficiency.json``). The measurement is
written as JSON (``--json``; on a GPU by default ``bench/data/gpu_truth-<gpu>.json``) with the GPU's
name, driver, CUDA and torch versions.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from plateau_bench.analysis.gpu import evidence_for, gpu_metrics
from plateau_bench.errors import ConfigError
from plateau_bench.records import TelemetrySample
from plateau_bench.roofline.hardware import GpuSpec, find_gpu, gpu_for_device
from plateau_bench.roofline.measured import (
    Ceilings,
    DecodeSplit,
    Measurement,
    Step,
    load,
    render,
)
from plateau_bench.telemetry.gpu import open_nvml

DATA = Path(__file__).resolve().parent / "data"

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 128256, "tie_word_embeddings": False, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
}
TINY = {
    "architectures": ["TinyLlamaShape"], "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "vocab_size": 512, "tie_word_embeddings": False, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
}
FULL_PLAN = {"batches": [1, 8, 32, 128, 256], "contexts": [512, 2048], "prefill": [512, 1024, 2048, 4096, 8192],
             "copy_gib": 4.0, "matmul": 8192, "replays": 20, "warmup": 3, "min_window_s": 1.5}
TINY_PLAN = {"batches": [1, 4], "contexts": [16, 32], "prefill": [16, 64], "copy_gib": 1 / 64, "matmul": 128,
             "replays": 3, "warmup": 1, "min_window_s": 0.0}


# -- the decoder ------------------------------------------------------------------------------------

class Decoder:
    """A Llama-shaped decoder with random bf16 weights and a static KV cache, decode and prefill."""

    def __init__(self, config: dict[str, Any], device: str, max_tokens: int, dtype: Any = None) -> None:
        import torch

        self.torch, self.device, self.dtype = torch, device, dtype or torch.bfloat16
        c = config
        self.layers, self.hidden, self.heads = c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"]
        self.kv_heads, self.head_dim, self.vocab = c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
        ffn, h, hd = c["intermediate_size"], self.hidden, self.head_dim
        gen = torch.Generator(device=device).manual_seed(0)

        def weight(*shape: int) -> Any:
            return (torch.randn(*shape, device=device, dtype=self.dtype, generator=gen) * 0.02)

        self.embed = weight(self.vocab, h)
        self.head = weight(self.vocab, h)
        self.blocks = [{"qkv": weight((self.heads + 2 * self.kv_heads) * hd, h), "o": weight(h, self.heads * hd),
                        "gate_up": weight(2 * ffn, h), "down": weight(h, ffn),
                        "norm1": torch.ones(h, device=device, dtype=self.dtype),
                        "norm2": torch.ones(h, device=device, dtype=self.dtype)} for _ in range(self.layers)]
        self.norm = torch.ones(h, device=device, dtype=self.dtype)
        # One flat buffer per layer for keys and values; a (batch, context) view takes its leading
        # elements, so every view is contiguous whatever its shape.
        self.per_layer = max_tokens * self.kv_heads * hd
        self.cache = torch.empty(self.layers, 2, self.per_layer, device=device, dtype=self.dtype)
        self.cache.normal_(generator=gen)
        positions = max(max_tokens, 1)
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
        angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv)
        self.cos, self.sin = angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def _kv(self, layer: int, batch: int, context: int) -> tuple[Any, Any]:
        n = batch * self.kv_heads * context * self.head_dim
        shape = (batch, self.kv_heads, context, self.head_dim)
        return self.cache[layer, 0, :n].view(shape), self.cache[layer, 1, :n].view(shape)

    def _rms(self, x: Any, w: Any) -> Any:
        t = self.torch
        return (x.float() * t.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(self.dtype) * w

    def _rope(self, x: Any, pos: Any) -> Any:
        cos, sin = self.cos[pos].unsqueeze(-2), self.sin[pos].unsqueeze(-2)   # (..., 1, hd/2)
        a, b = x[..., ::2], x[..., 1::2]
        return self.torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)

    def _mlp(self, x: Any, blk: dict[str, Any]) -> Any:
        gate, up = (self._rms(x, blk["norm2"]) @ blk["gate_up"].T).chunk(2, dim=-1)
        return (self.torch.nn.functional.silu(gate) * up) @ blk["down"].T

    def _split(self, x: Any, blk: dict[str, Any]) -> tuple[Any, Any, Any]:
        hd, q_n, kv_n = self.head_dim, self.heads * self.head_dim, self.kv_heads * self.head_dim
        qkv = self._rms(x, blk["norm1"]) @ blk["qkv"].T
        q, k, v = qkv.split((q_n, kv_n, kv_n), dim=-1)
        lead = x.shape[:-1]
        return q.view(*lead, self.heads, hd), k.view(*lead, self.kv_heads, hd), v.view(*lead, self.kv_heads, hd)

    def decode(self, tokens: Any, context: int) -> Any:
        """One decode step: ``tokens`` (batch,) at position ``context - 1``; logits (batch, vocab)."""
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        batch, group = tokens.shape[0], self.heads // self.kv_heads
        pos = self.torch.full((batch,), context - 1, device=self.device, dtype=self.torch.long)
        x = self.embed[tokens]
        for layer, blk in enumerate(self.blocks):
            q, k, v = self._split(x, blk)
            q, k = self._rope(q, pos), self._rope(k, pos)
            keys, values = self._kv(layer, batch, context)
            keys[:, :, context - 1] = k
            values[:, :, context - 1] = v
            out = sdpa(q.view(batch, self.kv_heads, group, self.head_dim), keys, values)
            x = x + out.reshape(batch, self.heads * self.head_dim) @ blk["o"].T
            x = x + self._mlp(x, blk)
        return self._rms(x, self.norm) @ self.head.T

    def linears(self, x: Any, wide: Any, head_rows: int) -> int:
        """The weight products of a step alone (``x``: (tokens, hidden), ``wide``: (tokens, ffn)), the
        head for the last ``head_rows`` rows (a decode step: all; a prefill: its last token); how many."""
        for blk in self.blocks:
            for weight, into in (("qkv", x), ("o", x), ("gate_up", x), ("down", wide)):
                into @ blk[weight].T
        x[-head_rows:] @ self.head.T
        return 4 * len(self.blocks) + 1



    def prefill(self, tokens: Any) -> Any:
        """One prompt ``tokens`` (length,) from position 0; the last token's logits (1, vocab)."""
        sdpa = self.torch.nn.functional.scaled_dot_product_attention
        n, group = tokens.shape[0], self.heads // self.kv_heads
        pos = self.torch.arange(n, device=self.device)
        x = self.embed[tokens]
        for layer, blk in enumerate(self.blocks):
            q, k, v = self._split(x, blk)
            q, k = self._rope(q, pos), self._rope(k, pos)
            keys, values = self._kv(layer, 1, n)
            keys[0].copy_(k.transpose(0, 1))
            values[0].copy_(v.transpose(0, 1))
            out = sdpa(q.transpose(0, 1).unsqueeze(0), keys.repeat_interleave(group, dim=1),
                       values.repeat_interleave(group, dim=1), is_causal=True)
            x = x + out[0].transpose(0, 1).reshape(n, self.heads * self.head_dim) @ blk["o"].T
            x = x + self._mlp(x, blk)
        return self._rms(x[-1:], self.norm) @ self.head.T


# -- timing -----------------------------------------------------------------------------------------

class Timer:
    """Median wall time of a callable: CUDA events on a GPU, the host clock on the CPU."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def times_ms(self, fn: Any, warmup: int, runs: int, min_window_s: float = 0.0) -> list[float]:
        """``runs`` timings at least, more until they fill ``min_window_s`` (so that NVML, which
        averages power and utilisation over up to a second, reads the step and not the pauses)."""
        for _ in range(warmup):
            fn()
        self.sync()
        if min_window_s > 0:
            once = self.times_ms(fn, 0, 1)[0] / 1e3
            runs = max(runs, min(2000, int(min_window_s / max(once, 1e-6)) + 1))
        out = []
        for _ in range(runs):
            if self.cuda:
                start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(float(start.elapsed_time(end)))
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out


def _graphed(torch: Any, fn: Any, device: str) -> Any:
    """``fn`` captured as a CUDA graph (replayed by the returned callable); ``fn`` itself on the CPU."""
    if device != "cuda":
        return fn
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):   # warm-up on a side stream, as capture requires
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def ceilings(torch: Any, device: str, plan: dict[str, Any], timer: Timer) -> Ceilings:
    elems = int(plan["copy_gib"] * (1 << 30) / 2)
    src = torch.empty(elems, device=device, dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    copy_ms = statistics.median(timer.times_ms(lambda: dst.copy_(src), 3, 10))
    n = plan["matmul"]
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    mm_ms = statistics.median(timer.times_ms(lambda: a @ b, 3, 10))
    return Ceilings(copy_gbps=2 * elems * 2 / (copy_ms / 1e3) / 1e9, matmul_tflops=2 * n**3 / (mm_ms / 1e3) / 1e12)


# -- NVML during the runs ---------------------------------------------------------------------------

class NvmlTrace:
    """plateau's NVML sampler in a thread every 50 ms; ``window`` marks one measurement's span."""

    def __init__(self) -> None:
        self.sampler, self.note = open_nvml()
        self.samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic_ns()
        if self.sampler is not None:
            self._thread.start()

    def _run(self) -> None:
        assert self.sampler is not None
        while not self._stop.is_set():
            with contextlib.suppress(Exception):   # a failed reading must not stop the measurement
                self.samples.append(self.sampler.sample(time.monotonic_ns() - self.t0))
            self._stop.wait(0.05)

    @contextlib.contextmanager
    def window(self, spans: list[tuple[int, int]]) -> Iterator[None]:
        start = time.monotonic_ns() - self.t0
        yield
        spans.append((start, time.monotonic_ns() - self.t0))

    def read(self, span: tuple[int, int], constraint: str) -> str | None:
        m = gpu_metrics(list(self.samples), *span)
        if m is None:
            return None
        said = evidence_for(m, constraint)
        memory = f", {m.fb_used_share:.0%} of memory in use" if m.fb_used_share is not None else ""
        power = f", {m.power_w_mean:,.0f} W" if m.power_w_mean is not None else ""
        return ("; ".join(said) if said else "no reading") + power + memory + f" ({m.samples} NVML samples)"

    def close(self) -> None:
        self._stop.set()
        if self.sampler is not None:
            self._thread.join(timeout=2)
            self.sampler.close()


# -- the measurement --------------------------------------------------------------------------------

def _device_info(torch: Any, device: str, trace: NvmlTrace) -> tuple[str, str | None, str | None]:
    if device != "cuda":
        return "CPU", None, None
    name = torch.cuda.get_device_name(0)
    driver = None
    if trace.sampler is not None:
        with contextlib.suppress(Exception):
            raw = trace.sampler._nvml.nvmlSystemGetDriverVersion()
            driver = raw.decode() if isinstance(raw, bytes) else str(raw)
    return name, driver, torch.version.cuda


def _spread(times: list[float]) -> dict[str, Any]:
    return {"ms": statistics.median(times), "ms_min": min(times), "ms_max": max(times), "samples": len(times)}


def measure(config: dict[str, Any], plan: dict[str, Any], device: str) -> Measurement:
    import torch

    torch.manual_seed(0)
    timer, trace = Timer(torch, device), NvmlTrace()
    name, driver, cuda = _device_info(torch, device, trace)
    try:
        found = ceilings(torch, device, plan, timer)
        print(f"{name}: copy {found.copy_gbps:,.0f} GB/s, bf16 matrix product {found.matmul_tflops:,.1f} TFLOP/s",
              flush=True)
        max_tokens = max(max(plan["batches"]) * max(plan["contexts"]), max(plan["prefill"]))
        model = Decoder(config, device, max_tokens)
        steps: list[Step] = []
        spans: list[tuple[int, int]] = []
        with torch.inference_mode():
            for context in plan["contexts"]:
                for batch in plan["batches"]:
                    tokens = torch.randint(0, model.vocab, (batch,), device=device)
                    step = _graphed(torch, lambda t=tokens, c=context: model.decode(t, c), device)
                    with trace.window(spans):
                        times = timer.times_ms(step, plan["warmup"], plan["replays"], plan["min_window_s"])
                    steps.append(Step(kind="decode", batch=batch, tokens=batch, context=context, **_spread(times),
                                      gpu=trace.read(spans[-1], "compute")))
                    print(f"decode batch {batch:>4} context {context:>5}: {steps[-1].ms:8.3f} ms", flush=True)
            for length in plan["prefill"]:
                tokens = torch.randint(0, model.vocab, (length,), device=device)
                with trace.window(spans):
                    times = timer.times_ms(lambda t=tokens: model.prefill(t), 2, 5, plan["min_window_s"])
                steps.append(Step(kind="prefill", batch=1, tokens=length, context=length, **_spread(times),
                                  gpu=trace.read(spans[-1], "prefill")))
                print(f"prefill {length:>5} tokens: {steps[-1].ms:8.3f} ms", flush=True)
            # Last: the profiler leaves instrumentation behind that slows the small kernels that follow it.
            split = decode_split(torch, model, timer, device, plan)
    finally:
        trace.close()
    key = gpu_for_device(name)
    return Measurement(
        gpu_name=name, gpu_key=key.key if key else None, driver=driver, cuda=cuda, torch=str(torch.__version__),
        device=device, dtype="bf16", graphs=device == "cuda", model=config, ceilings=found, steps=steps,
        nvml=_nvml_lines(trace), measured_on=time.strftime("%Y-%m-%d"), split=split)


def decode_split(torch: Any, model: Decoder, timer: Timer, device: str, plan: dict[str, Any]) -> DecodeSplit:
    """The batch-1 decode step at the first context, split: its weight products alone, and its kernels."""
    context = plan["contexts"][0]
    x = torch.randn(1, model.hidden, device=device, dtype=model.dtype)
    wide = torch.randn(1, model.blocks[0]["down"].shape[1], device=device, dtype=model.dtype)
    count = model.linears(x, wide, 1)
    step = _graphed(torch, lambda: model.linears(x, wide, 1), device)
    linears_ms = statistics.median(timer.times_ms(step, plan["warmup"], plan["replays"], plan["min_window_s"]))
    kernels = None
    if device == "cuda":
        with contextlib.suppress(Exception):   # a profiler that cannot read the device leaves it unknown
            tokens = torch.randint(0, model.vocab, (1,), device=device)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                model.decode(tokens, context)
                torch.cuda.synchronize()
            kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    print(f"decode batch 1 context {context}: weight products alone {linears_ms:.3f} ms ({count} of them), "
          f"{kernels if kernels is not None else '?'} kernels a step", flush=True)
    length = max(plan["prefill"])
    rows = torch.randn(length, model.hidden, device=device, dtype=model.dtype)
    wide_rows = torch.randn(length, wide.shape[1], device=device, dtype=model.dtype)
    prefill_ms = statistics.median(timer.times_ms(lambda: model.linears(rows, wide_rows, 1), 2, 5,
                                                  plan["min_window_s"]))
    print(f"prefill {length} tokens: weight products alone {prefill_ms:.3f} ms", flush=True)
    return DecodeSplit(batch=1, context=context, linears_ms=linears_ms, linear_kernels=count, kernels=kernels,
                       prefill_tokens=length, prefill_linears_ms=prefill_ms)


def _nvml_lines(trace: NvmlTrace) -> list[str]:
    if trace.sampler is None:
        return [trace.note]
    whole = gpu_metrics(trace.samples, 0, trace.samples[-1].t_ns if trace.samples else 0)
    if whole is None:
        return ["NVML answered but gave no per-GPU reading"]
    raw = whole.raw
    parts = [f"{whole.gpus} GPU(s), {len(trace.samples)} samples",
             f"power {whole.power_w_mean or 0:,.0f} W mean of a {whole.power_limit_w or 0:,.0f} W limit",
             f"utilisation {100 * (whole.gpu_util or 0):.0f} % mean",
             f"memory in use {100 * (whole.fb_used_share or 0):.0f} % mean",
             f"SM clock {whole.sm_clock_mhz or 0:,.0f} MHz mean of {whole.sm_clock_max_mhz or 0:,.0f} max",
             f"temperature {raw.get('temp_c', 0):.0f} C mean"]
    energy = [s.raw.get("gpu0_energy_j") for s in trace.samples if s.raw.get("gpu0_energy_j") is not None]
    if len(energy) >= 2:
        parts.append(f"energy counter advanced {energy[-1] - energy[0]:,.0f} J")
    return parts


def catalogue_gpu(m: Measurement, given: str | None) -> GpuSpec | None:
    from plateau_bench.roofline import find_gpu
    if given:
        return find_gpu(given)
    if m.gpu_key:
        return find_gpu(m.gpu_key)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a toy shape and plan (runs on a CPU in seconds)")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda when there is one")
    parser.add_argument("--gpu", help="the catalogue GPU to compare with (default: the one the device name matches)")
    parser.add_argument("--json", type=Path, help="write the measurement here")
    parser.add_argument("--render", type=Path, help="print the tables of a saved measurement and exit")
    args = parser.parse_args()
    try:
        gpu = find_gpu(args.gpu) if args.gpu else None
        if args.render:
            saved = load(args.render)
            print(render(saved, gpu or catalogue_gpu(saved, None)))
            return
    except ConfigError as exc:
        parser.error(str(exc))   # one line and exit 2, as plateau answers
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tiny = args.tiny or device == "cpu"
    started = time.monotonic()
    m = measure(TINY if tiny else LLAMA_8B, TINY_PLAN if tiny else FULL_PLAN, device)
    out = args.json or (DATA / f"gpu_truth-{m.gpu_key or 'unknown'}.json" if device == "cuda" and not tiny else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(msgspec.json.format(msgspec.json.encode(m), indent=1) + b"\n")
        print(f"wrote {out}")
    print(render(m, catalogue_gpu(m, args.gpu)))
    print(f"(wall time {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
