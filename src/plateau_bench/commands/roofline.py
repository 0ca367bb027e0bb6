"""``plateau roofline``: the hardware's ceiling for a model, batch by batch, and what binds there.

The computation is ``plateau_bench.roofline``, the tables ``report.roofline``; this module parses the
options (the hardware's as ``roofline_opts.HardwareFlags``), builds the roofline and prints it (or the JSON
report with ``--json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.commands import options as o
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.groups import grouped
from plateau_bench.errors import ConfigError
from plateau_bench.report.roofline import roofline_view
from plateau_bench.roofline import (
    DEFAULT_BATCHES,
    DEFAULT_PREFILL,
    Deployment,
    GpuSpec,
    Roofline,
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


ModelFile = Annotated[Path, typer.Option("--model", help="The model's Hugging Face config.json (or its directory).")]
NO_HARDWARE = r.HardwareFlags()


def _roofline(model: Path, hw: r.HardwareFlags, input_len: str, output_len: str, step_overhead_ms: float,
              mem_fraction: float) -> tuple[Roofline, GpuSpec]:
    """The roofline the command's flags describe: a layout flag not given is tp and ep 1, a KV cache in bf16;
    lengths are their nominal value (a distribution's mean, as a sweep's ``--roofline`` takes them)."""
    prompt, output = o.length_option(input_len, "--input-len")[0], o.length_option(output_len, "--output-len")[0]
    return roofline_from_options(
        model, hw.gpu, hw.gpu_spec, interconnect=hw.interconnect, gpus=hw.gpus, tp=1 if hw.tp is None else hw.tp,
        ep=1 if hw.ep is None else hw.ep, dtype=hw.dtype, kv_dtype=hw.kv_dtype or "bf16", input_len=prompt,
        output_len=output, step_overhead_ms=step_overhead_ms, mem_fraction=mem_fraction)


@grouped
def roofline_cmd(
    model: ModelFile,
    hardware: r.HardwareFlags = NO_HARDWARE,
    input_len: o.InputLen = "128",
    output_len: o.OutputLen = "128",
    step_overhead_ms: Annotated[float, typer.Option("--step-overhead-ms", help="Fixed cost of one engine step in "
                                                    "ms (scheduling, sampling, launches).")] = 0.5,
    mem_fraction: Annotated[float, typer.Option("--mem-fraction", help="Share of GPU memory for weights and "
                                                "KV cache (vLLM --gpu-memory-utilization).")] = 0.9,
    batches: Annotated[str | None, typer.Option("--batches", help="Decode batches, e.g. 1,64,256 (default "
                                                "1 to 4096 by doubling).")] = None,
    as_json: o.Json = False,
) -> None:
    """The hardware's ceiling for a model: step time by resource, tokens/s and what binds, per batch."""
    rf, spec = _roofline(model, hardware, input_len, output_len, step_overhead_ms, mem_fraction)
    decode = parse_int_list(batches, "--batches") if batches else list(DEFAULT_BATCHES)
    report = roofline_report(rf, spec, decode, DEFAULT_PREFILL)
    if as_json:
        typer.echo(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
        return
    o.wide_console().print(roofline_view(report))


def register(app: typer.Typer) -> None:
    app.command("roofline")(roofline_cmd)
