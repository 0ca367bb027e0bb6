"""The shipped GPU catalogue: the GPUs asked for, a public source for every figure, the lookups."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.roofline import catalog, find_gpu, find_link, gpu_for_device, read_gpu_spec
from plateau_bench.roofline.hardware import Sourced

RAW = json.loads(files("plateau_bench.roofline").joinpath("gpus.json").read_text())
FIGURES = ("memory_gib", "bandwidth_gbps", "tflops_bf16", "tflops_fp16", "tflops_fp8", "tflops_fp4", "tdp_w")


def test_the_gpus_asked_for_are_there() -> None:
    keys = {g.key for g in catalog().gpus}
    assert {"a100-sxm", "h100-sxm", "h200-sxm", "b200", "rtx-pro-6000", "l40s", "mi300x"} <= keys
    assert {"pcie4", "pcie5", "nvlink4", "nvlink5"} <= {link.name for link in catalog().interconnects}


@pytest.mark.parametrize("gpu", RAW["gpus"], ids=lambda g: g["key"])
def test_every_figure_names_a_public_source(gpu: dict[str, object]) -> None:
    for field in FIGURES:
        value = gpu.get(field)
        if value is None:
            continue
        assert isinstance(value, dict) and set(value) == {"value", "source"}, field
        assert str(value["source"]).startswith("https://") and float(value["value"]) > 0, field
    spec = find_gpu(str(gpu["key"]))
    assert all(isinstance(getattr(spec, f), Sourced) for f in FIGURES if getattr(spec, f) is not None)
    find_link(None, spec)                          # its default link is in the catalogue


def test_every_interconnect_names_a_public_source() -> None:
    for link in catalog().interconnects:
        assert isinstance(link.gbps, Sourced) and link.gbps.source.startswith("https://")


def test_names_and_aliases() -> None:
    assert find_gpu("H100").key == "h100-sxm"
    assert find_gpu("RTX PRO 6000 Blackwell").key == "rtx-pro-6000"
    with pytest.raises(ConfigError, match=r"unknown GPU 'v100'.*h100-sxm"):
        find_gpu("v100")


def test_missing_tensor_cores_fall_back_to_a_wider_dtype() -> None:
    assert find_gpu("h100").peak("fp4") == (1979e12, "fp8")
    assert find_gpu("a100").peak("fp8") == (312e12, "bf16")
    assert find_gpu("b200").peak("fp4") == (9000e12, "fp4")


def test_links() -> None:
    gpu = find_gpu("h200")
    assert find_link(None, gpu).bytes_per_s == 450e9
    assert find_link("PCIe5", gpu).bytes_per_s == 64e9
    assert find_link("25", gpu).bytes_per_s == 25e9
    for bad in ("-3", "0", "warp"):
        with pytest.raises(ConfigError, match="--interconnect"):
            find_link(bad, gpu)


def test_a_user_spec_file(tmp_path: Path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"key": "x", "name": "X", "memory_gib": 24, "bandwidth_gbps": 1000,
                                "tflops_bf16": {"value": 200, "source": "my lab"}}))
    spec = read_gpu_spec(path)
    assert spec.peak("fp8") == (200e12, "bf16")
    path.write_text(json.dumps({"key": "x", "name": "X", "memory_gib": 24}))
    with pytest.raises(ConfigError, match="bandwidth_gbps"):
        read_gpu_spec(path)


def test_a_device_name_finds_its_catalogue_gpu() -> None:
    """NVML and torch name the board (``NVIDIA H200``); the whole name decides (the NVL is another board)."""
    assert gpu_for_device("NVIDIA H200").key == "h200-sxm"              # type: ignore[union-attr]
    assert gpu_for_device("NVIDIA H200 NVL").key == "h200-nvl"          # type: ignore[union-attr]
    assert gpu_for_device("  nvidia  H100 80GB HBM3 ").key == "h100-sxm"   # type: ignore[union-attr]
    assert gpu_for_device("NVIDIA GeForce RTX 4090") is None
    assert gpu_for_device("CPU") is None
    names = [name.lower() for gpu in catalog().gpus for name in gpu.device_names]
    assert len(names) == len(set(names)) and all(gpu.device_names for gpu in catalog().gpus)
