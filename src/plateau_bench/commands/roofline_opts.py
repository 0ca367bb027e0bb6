"""``--roofline CONFIG --gpu ... --tp ...`` on sweep, diagnose and report: the flags and the roofline they name.

``--roofline`` takes either a model's Hugging Face ``config.json`` (or its directory), with the
hardware flags beside it, or a roofline saved by ``plateau roofline --json`` (which names its
hardware already, so the hardware flags are refused with it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from plateau_bench.commands.groups import OptionGroup
from plateau_bench.errors import ConfigError
from plateau_bench.roofline import Roofline, gpu_names, read_roofline

PANEL = "Roofline (where the plateau sits against the hardware)"

RooflinePath = Annotated[Path | None, typer.Option(
    "--roofline", help="The model's Hugging Face config.json (or its directory) with --gpu/--tp..., or a file "
                       "saved by plateau roofline --json.", rich_help_panel=PANEL)]
Gpu = Annotated[str | None, typer.Option("--gpu", help="GPU name for the roofline: " + ", ".join(gpu_names()) + ".",
                                         rich_help_panel=PANEL)]
GpuSpecFile = Annotated[Path | None, typer.Option("--gpu-spec", help="Roofline: a JSON file with the GPU's "
                                                  "figures (the fields of roofline/gpus.json).",
                                                  rich_help_panel=PANEL)]
Gpus = Annotated[int | None, typer.Option("--gpus", help="Roofline: GPUs in the deployment (default: --tp).",
                                          rich_help_panel=PANEL)]
Tp = Annotated[int | None, typer.Option("--tp", help="Roofline: tensor-parallel size (default 1).",
                                        rich_help_panel=PANEL)]
Ep = Annotated[int | None, typer.Option("--ep", help="Roofline: expert-parallel size (default 1: experts split "
                                        "like the MLP).", rich_help_panel=PANEL)]
Dtype = Annotated[str | None, typer.Option("--dtype", help="Roofline: weight dtype, fp4 | fp8 | bf16 | fp16 "
                                           "(default: the config's quantization, else bf16).",
                                           rich_help_panel=PANEL)]
KvDtype = Annotated[str | None, typer.Option("--kv-dtype", help="Roofline: KV-cache dtype (default bf16).",
                                             rich_help_panel=PANEL)]
Interconnect = Annotated[str | None, typer.Option("--interconnect", help="Roofline: pcie4 | pcie5 | nvlink3 | "
                                                  "nvlink4 | nvlink5 | xgmi | GB/s per direction (default: the "
                                                  "GPU's).", rich_help_panel=PANEL)]

TWIN_PANEL = "Twin from first principles (instead of --preset)"
ModelConfig = Annotated[Path | None, typer.Option(
    "--model", help="Derive the engine from this model's Hugging Face config.json (or its directory) on the "
                    "hardware --gpu/--gpus/--tp... name: step times from the roofline, KV cache from the memory "
                    "left after the weights.", rich_help_panel=TWIN_PANEL)]
Efficiency = Annotated[float | None, typer.Option(
    "--efficiency", help="--model: the fraction of the roofline the engine reaches, one factor for every resource "
                         "(default: one per resource, measured on a GPU; the first line of the output says them).",
    rich_help_panel=TWIN_PANEL)]
EfficiencyFrom = Annotated[Path | None, typer.Option(
    "--efficiency-from", help="--model: read the efficiencies off a measured sweep of this deployment (its "
                              "levels' decode steps calibrate the resources they exercise; the rest keep the "
                              "defaults).", rich_help_panel=TWIN_PANEL)]
TpotAt1 = Annotated[str | None, typer.Option(
    "--tpot-at-1", help="--model: calibrate on one figure, a single stream's TPOT (e.g. 18.6ms): the memory "
                        "bandwidth's efficiency; compute and interconnect keep the defaults.",
    rich_help_panel=TWIN_PANEL)]


def _saved(path: Path) -> bool:
    """A roofline saved by ``plateau roofline --json`` (or a bare one), not a model config."""
    if path.is_dir():
        return False
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False   # the model-config reader gives the error
    return isinstance(data, dict) and ("roofline" in data or "deployment" in data)


def roofline_given(path: Path | None, gpu: str | None, gpu_spec: Path | None, gpus: int | None, tp: int | None,
                   ep: int | None, dtype: str | None, kv_dtype: str | None, interconnect: str | None, *,
                   input_len: int = 128, output_len: int = 128, flag: str = "--roofline") -> Roofline | None:
    """The roofline the flags name, or None without ``flag`` (a ConfigError naming the flag)."""
    hardware = {"--gpu": gpu, "--gpu-spec": gpu_spec, "--gpus": gpus, "--tp": tp, "--ep": ep, "--dtype": dtype,
                "--kv-dtype": kv_dtype, "--interconnect": interconnect}
    given = [flag for flag, value in hardware.items() if value is not None]
    if path is None:
        if given:
            raise ConfigError(f"{given[0]} describes the hardware for {flag}: give {flag} CONFIG too")
        return None
    if _saved(path):
        if given:
            raise ConfigError(f"{flag} {path} is a saved roofline that names its hardware: drop {given[0]}")
        return read_roofline(path)
    from plateau_bench.commands.roofline import roofline_from_options

    rf, _spec = roofline_from_options(path, gpu, gpu_spec, interconnect=interconnect, gpus=gpus, tp=tp or 1,
                                      ep=ep or 1, dtype=dtype, kv_dtype=kv_dtype or "bf16", input_len=input_len,
                                      output_len=output_len)
    return rf


class HardwareFlags(OptionGroup, frozen=True, kw_only=True):
    """The hardware a roofline or a twin from first principles is for: GPU, layout, dtypes, link."""

    gpu: Gpu = None
    gpu_spec: GpuSpecFile = None
    gpus: Gpus = None
    tp: Tp = None
    ep: Ep = None
    dtype: Dtype = None
    kv_dtype: KvDtype = None
    interconnect: Interconnect = None


class RooflineFlags(HardwareFlags, frozen=True, kw_only=True):
    """``--roofline CONFIG`` with its hardware (sweep, diagnose, report)."""

    roofline: RooflinePath = None

    def ceiling(self, *, input_len: int = 128, output_len: int = 128) -> Roofline | None:
        """The roofline the flags name, or None without ``--roofline``."""
        return roofline_given(self.roofline, self.gpu, self.gpu_spec, self.gpus, self.tp, self.ep, self.dtype,
                              self.kv_dtype, self.interconnect, input_len=input_len, output_len=output_len)


NO_ROOFLINE = RooflineFlags()   # a grouped command's default for the group (``groups.grouped`` fills it)
