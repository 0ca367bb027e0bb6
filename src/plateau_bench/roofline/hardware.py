"""GPU and interconnect figures: the shipped catalogue (``gpus.json``) and user spec files.

Every figure in ``gpus.json`` carries its public source (``{"value": ..., "source": "URL (what it
says)"}``); a user's ``--gpu-spec`` file has the same fields and may give bare numbers. Units are
the catalogue's ``about`` line: memory in GiB, bandwidth in GB/s (10^9 bytes/s), dense tensor peaks
in TFLOP/s (no structured sparsity), board power in W, interconnects per GPU and per direction.

A GPU without tensor cores for a dtype multiplies it at the next wider dtype's peak (FP4 at FP8,
FP8 at BF16), which is what engines do there (weights are dequantised on the fly).
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path
from typing import TypeVar

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.model import Dtype


class Sourced(msgspec.Struct, frozen=True):
    value: float
    source: str


Figure = float | Sourced


def figure(value: Figure) -> float:
    return value.value if isinstance(value, Sourced) else float(value)


def source_of(value: Figure) -> str:
    return value.source if isinstance(value, Sourced) else "given in the GPU spec file (no source)"


class GpuSpec(msgspec.Struct, frozen=True, kw_only=True):
    key: str
    name: str
    memory_gib: Figure
    bandwidth_gbps: Figure
    tflops_bf16: Figure
    tflops_fp16: Figure | None = None
    tflops_fp8: Figure | None = None
    tflops_fp4: Figure | None = None
    tdp_w: Figure | None = None
    interconnect: str = "pcie5"       # the link between GPUs unless --interconnect says otherwise
    pcie: str = "pcie5"
    aliases: list[str] = msgspec.field(default_factory=list)
    device_names: list[str] = msgspec.field(default_factory=list)   # as NVML and torch name the board
    notes: str = ""

    def peak(self, dtype: Dtype) -> tuple[float, Dtype]:
        """Dense peak FLOP/s for ``dtype`` and the dtype it runs at (a wider one when unsupported)."""
        order: tuple[tuple[Dtype, Figure | None], ...] = (
            ("fp4", self.tflops_fp4), ("fp8", self.tflops_fp8), ("bf16", self.tflops_bf16),
            ("fp16", self.tflops_fp16 or self.tflops_bf16))
        start = {"fp4": 0, "fp8": 1, "bf16": 2, "fp16": 3}[dtype]
        for name, value in order[start:]:
            if value is not None and figure(value) > 0:
                return figure(value) * 1e12, name
        return figure(self.tflops_bf16) * 1e12, "bf16"


class Interconnect(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    gbps: Figure


class Catalog(msgspec.Struct, frozen=True, kw_only=True):
    about: str
    interconnects: list[Interconnect]
    gpus: list[GpuSpec]


class Link(msgspec.Struct, frozen=True, kw_only=True):
    """The link a collective runs over: bytes/s per GPU and per direction."""

    name: str
    bytes_per_s: float
    source: str


T = TypeVar("T")


def packaged(name: str, kind: type[T]) -> T:
    """A JSON file shipped in this package (``gpus.json``, ``efficiency.json``), decoded as ``kind``."""
    data = importlib.resources.files("plateau_bench.roofline").joinpath(name).read_bytes()
    return msgspec.json.decode(data, type=kind)


@functools.cache
def catalog() -> Catalog:
    return packaged("gpus.json", Catalog)


def gpu_names() -> list[str]:
    return [g.key for g in catalog().gpus]


def find_gpu(name: str) -> GpuSpec:
    """The catalogue GPU called ``name`` (its key or an alias, any case)."""
    wanted = name.strip().lower().replace("_", "-").replace(" ", "-")
    for gpu in catalog().gpus:
        if wanted == gpu.key or wanted in gpu.aliases:
            return gpu
    raise ConfigError(f"unknown GPU {name!r}; known: {', '.join(gpu_names())} (or give --gpu-spec FILE)")


def gpu_for_device(device_name: str) -> GpuSpec | None:
    """The catalogue GPU a device reports itself as (NVML's or torch's name, ``NVIDIA H200``), or None.

    The names are matched whole (spaces and case aside): ``NVIDIA H200 NVL`` is another board than
    ``NVIDIA H200``, with the same memory and another power limit and clocks."""
    wanted = " ".join(device_name.split()).lower()
    for gpu in catalog().gpus:
        if any(" ".join(name.split()).lower() == wanted for name in gpu.device_names):
            return gpu
    return None


def read_gpu_spec(path: Path) -> GpuSpec:
    """A GPU described in a JSON file with the catalogue's fields (``key`` and ``name`` required)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read GPU spec {path}: {exc.strerror or exc}") from None
    try:
        gpu = msgspec.json.decode(data, type=GpuSpec)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"GPU spec {path}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"GPU spec {path}: not a JSON object ({exc})") from None
    for field in ("memory_gib", "bandwidth_gbps", "tflops_bf16"):
        if figure(getattr(gpu, field)) <= 0:
            raise ConfigError(f"GPU spec {path}: {field} must be > 0")
    return gpu


def find_link(text: str | None, gpu: GpuSpec) -> Link:
    """``--interconnect``: a catalogue name (pcie4, pcie5, nvlink4, ...), a number of GB/s per
    direction, or (None) the GPU's own link."""
    name = (text or gpu.interconnect).strip().lower()
    for link in catalog().interconnects:
        if link.name == name:
            return Link(name=link.name, bytes_per_s=figure(link.gbps) * 1e9, source=source_of(link.gbps))
    try:
        gbps = float(name.removesuffix("gbps").removesuffix("gb/s"))
    except ValueError:
        names = ", ".join(link.name for link in catalog().interconnects)
        raise ConfigError(f"--interconnect: unknown link {text!r}; known: {names}, or GB/s per direction "
                          "as a number") from None
    if not gbps > 0 or gbps == float("inf"):
        raise ConfigError(f"--interconnect must be a positive number of GB/s (got {text!r})")
    return Link(name=f"{gbps:g} GB/s", bytes_per_s=gbps * 1e9, source="given on the command line")
