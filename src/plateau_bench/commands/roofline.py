"""``plateau roofline``: the hardware's ceiling for a model, batch by batch, and what binds there.

The computation is ``plateau_bench.roofline``; this module parses the options, builds the roofline
and prints it as tables (or the JSON report with ``--json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.roofline import (
    DEFAULT_BATCHES,
    DEFAULT_PREFILL,
    Deployment,
    GpuSpec,
    Point,
    Roofline,
    RooflineReport,
    build_roofline,
    find_gpu,
    find_link,
    gpu_names,
    parse_dtype,
    read_gpu_spec,
    read_model_config,
    roofline_report,
)
from plateau_bench.spec import parse_int_list

HARDWARE = "Hardware"
LAYOUT = "Layout"

_BINDING = {"weights": "memory: weights", "kv": "memory: KV cache", "compute": "compute",
            "interconnect": "interconnect", "overhead": "step overhead"}


def _gpu(name: str | None, spec: Path | None) -> GpuSpec:
    if (name is None) == (spec is None):
        raise ConfigError(f"give one of --gpu NAME ({', '.join(gpu_names())}) or --gpu-spec FILE")
    return read_gpu_spec(spec) if spec is not None else find_gpu(name or "")


def roofline_from_options(model: Path, gpu: str | None, gpu_spec: Path | None, *, interconnect: str | None = None,
                          gpus: int | None = None, tp: int = 1, ep: int = 1, dtype: str | None = None,
                          kv_dtype: str = "bf16", input_len: int = 128, output_len: int = 128,
                          step_overhead_ms: float = 0.5, mem_fraction: float = 0.9) -> tuple[Roofline, GpuSpec]:
    """The roofline the options describe (for any command that takes ``--roofline CONFIG --gpu ...``)."""
    shape = read_model_config(model)
    spec = _gpu(gpu, gpu_spec)
    layout = Deployment(
        gpus=gpus if gpus is not None else tp, tp=tp, ep=ep,
        dtype=parse_dtype(dtype, "--dtype") if dtype else shape.config_dtype or "bf16",
        kv_dtype=parse_dtype(kv_dtype, "--kv-dtype"), input_len=input_len, output_len=output_len,
        step_overhead_s=step_overhead_ms / 1e3, mem_fraction=mem_fraction)
    return build_roofline(shape, spec, layout, find_link(interconnect, spec)), spec


def roofline_cmd(  # long: one option per line
    model: Annotated[Path, typer.Option("--model", help="The model's Hugging Face config.json (or its directory).")],
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU name: " + ", ".join(gpu_names()) + ".",
                                            rich_help_panel=HARDWARE)] = None,
    gpu_spec: Annotated[Path | None, typer.Option("--gpu-spec", help="A JSON file with the GPU's figures "
                                                  "(the fields of roofline/gpus.json).",
                                                  rich_help_panel=HARDWARE)] = None,
    interconnect: Annotated[str | None, typer.Option("--interconnect", help="pcie4 | pcie5 | nvlink3 | nvlink4 | "
                                                     "nvlink5 | xgmi | GB/s per direction (default: the GPU's).",
                                                     rich_help_panel=HARDWARE)] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs in the deployment (default: --tp).",
                                             rich_help_panel=LAYOUT)] = None,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel size.", rich_help_panel=LAYOUT)] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert-parallel size (1: experts split like the MLP).",
                                    rich_help_panel=LAYOUT)] = 1,
    dtype: Annotated[str | None, typer.Option("--dtype", help="Weight dtype: fp4 | fp8 | bf16 | fp16 (default: "
                                              "from the config's quantization, else bf16).",
                                              rich_help_panel=LAYOUT)] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV-cache dtype.", rich_help_panel=LAYOUT)] = "bf16",
    input_len: Annotated[int, typer.Option("--input-len", help="Prompt tokens per request.")] = 128,
    output_len: Annotated[int, typer.Option("--output-len", help="Output tokens per request.")] = 128,
    step_overhead_ms: Annotated[float, typer.Option("--step-overhead-ms", help="Fixed cost of one engine step in "
                                                    "ms (scheduling, sampling, launches).")] = 0.5,
    mem_fraction: Annotated[float, typer.Option("--mem-fraction", help="Share of GPU memory for weights and "
                                                "KV cache (vLLM --gpu-memory-utilization).")] = 0.9,
    batches: Annotated[str | None, typer.Option("--batches", help="Decode batches, e.g. 1,64,256 (default "
                                                "1 to 4096 by doubling).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the roofline as JSON only.")] = False,
) -> None:
    """The hardware's ceiling for a model: step time by resource, tokens/s and what binds, per batch."""
    rf, spec = roofline_from_options(
        model, gpu, gpu_spec, interconnect=interconnect, gpus=gpus, tp=tp, ep=ep, dtype=dtype, kv_dtype=kv_dtype,
        input_len=input_len, output_len=output_len, step_overhead_ms=step_overhead_ms, mem_fraction=mem_fraction)
    decode = parse_int_list(batches, "--batches") if batches else list(DEFAULT_BATCHES)
    report = roofline_report(rf, spec, decode, DEFAULT_PREFILL)
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
        return
    print_report(wide_console(), report)


def print_report(console: Console, report: RooflineReport) -> None:
    rf, d, m = report.roofline, report.roofline.deployment, report.roofline.model
    console.print(f"[bold]{m.name}[/bold] on {d.gpus}x {rf.gpu}: {report.total_params / 1e9:,.1f}B parameters, "
                  f"{report.active_params / 1e9:,.1f}B per token; {report.weights_gib_per_gpu:,.1f} GiB of weights "
                  f"and {report.kv_bytes_per_token / 1e3:,.1f} kB of KV per token on each GPU", highlight=False)
    console.print(f"KV cache: {report.kv_capacity_tokens:,} tokens = {report.max_sequences:,} sequences of "
                  f"{d.input_len}+{d.output_len} tokens; ridge {report.ridge:,.0f} FLOP/byte", highlight=False)
    console.print(points_table("Decode: ceiling per step (lower bound on step time)", report.decode, "batch"))
    console.print(points_table("Prefill: ceiling per step of prompt tokens", report.prefill, "tokens"))
    for line in report.assumptions:
        console.print(f"  {line}", highlight=False, markup=False)
    console.print("Sources:", highlight=False)
    for line in report.sources:
        console.print(f"  {line}", highlight=False, markup=False)


def points_table(title: str, points: list[Point], batch_label: str) -> Table:
    table = Table(title=title)
    columns = (batch_label, "step ms", "tok/s", "tok/s/GPU", "weights ms", "KV ms", "compute ms", "network ms",
               "binds", "experts hit", "tok/expert", "FLOP/B")
    for col in columns:
        table.add_column(col, justify="left" if col == "binds" else "right")
    for p in points:
        experts = (f"{p.active_experts:,.1f}", f"{p.tokens_per_expert:,.1f}") if p.active_experts else ("", "")
        table.add_row(f"{p.batch:,}", f"{p.step_s * 1e3:,.2f}", f"{p.tok_s:,.0f}", f"{p.tok_s_per_gpu:,.0f}",
                      f"{p.weights_s * 1e3:,.2f}", f"{p.kv_s * 1e3:,.2f}", f"{p.compute_s * 1e3:,.2f}",
                      f"{p.network_s * 1e3:,.2f}", _BINDING[p.binding], *experts, f"{p.intensity:,.1f}")
    return table


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline_cmd)
