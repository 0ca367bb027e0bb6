"""The roofline: how fast a model could run on given hardware, and which resource would bind.

Pure functions over a model's shape (``read_model_config``: a Hugging Face ``config.json``), a
GPU's datasheet figures (``find_gpu`` / ``read_gpu_spec``: ``gpus.json`` names a source for each)
and a layout (``Deployment``: GPUs, TP, EP, dtypes, lengths). ``build_roofline`` gives the per-GPU
constants, ``roofline_report`` the ceiling curve over decode batches and prefill chunks;
``ceiling_at_batch`` and ``step_coefficients`` are what the verdict and the twin use.
"""

from plateau_bench.roofline.bound import (
    Resource,
    Roofline,
    StepTerms,
    build_roofline,
    decode_terms,
    expected_active_experts,
    prefill_terms,
    step_terms,
)
from plateau_bench.roofline.deployment import DTYPE_BYTES, DTYPES, Deployment, parse_dtype
from plateau_bench.roofline.efficiency import Efficiency, efficiency_sources, measured_efficiency
from plateau_bench.roofline.hardware import (
    GpuSpec,
    Link,
    catalog,
    find_gpu,
    find_link,
    gpu_for_device,
    gpu_names,
    read_gpu_spec,
)
from plateau_bench.roofline.model import Dtype, ModelShape, model_from_json, read_model_config
from plateau_bench.roofline.summary import (
    DEFAULT_BATCHES,
    DEFAULT_PREFILL,
    Point,
    RooflineReport,
    decode_point,
    prefill_point,
    roofline_report,
)
from plateau_bench.roofline.twin import (
    Calibration,
    Ceiling,
    StepCoefficients,
    calibrate_efficiency,
    capped,
    ceiling_at_batch,
    fit_overhead_and_efficiency,
    read_roofline,
    share_of_ceiling,
    step_coefficients,
    step_time_bound,
)

__all__ = [
    "DEFAULT_BATCHES",
    "DEFAULT_PREFILL",
    "DTYPES",
    "DTYPE_BYTES",
    "Calibration",
    "Ceiling",
    "Deployment",
    "Dtype",
    "Efficiency",
    "GpuSpec",
    "Link",
    "ModelShape",
    "Point",
    "Resource",
    "Roofline",
    "RooflineReport",
    "StepCoefficients",
    "StepTerms",
    "build_roofline",
    "calibrate_efficiency",
    "capped",
    "catalog",
    "ceiling_at_batch",
    "decode_point",
    "decode_terms",
    "efficiency_sources",
    "expected_active_experts",
    "find_gpu",
    "find_link",
    "fit_overhead_and_efficiency",
    "gpu_for_device",
    "gpu_names",
    "measured_efficiency",
    "model_from_json",
    "parse_dtype",
    "prefill_point",
    "prefill_terms",
    "read_gpu_spec",
    "read_model_config",
    "read_roofline",
    "roofline_report",
    "share_of_ceiling",
    "step_coefficients",
    "step_terms",
    "step_time_bound",
]
