"""Server and GPU telemetry taken while a load level runs.

* ``TelemetryScraper`` scrapes a server's Prometheus /metrics (vLLM, SGLang, llama.cpp, TGI) into
  ``TelemetrySample``s with canonical quantities (``engines.CANONICAL``).
* ``summarize`` reduces a level's samples to the flat dict stored on ``LevelResult.telemetry``.
* ``open_nvml`` / ``GpuPoller`` read local GPUs when NVML is available.
* ``DcgmPoller`` reads NVIDIA DCGM exporters (``/metrics``, one per node); ``parse_dcgm`` one page.
"""

from plateau_bench.records import SOURCE_GPU, SOURCE_SERVER, TelemetrySample, samples_from_lines
from plateau_bench.telemetry.dcgm import (
    DEFAULT_DCGM_INTERVAL_S,
    SOURCE_DCGM,
    DcgmEndpoint,
    DcgmGpu,
    DcgmNode,
    DcgmPage,
    DcgmPoller,
    parse_dcgm,
)
from plateau_bench.telemetry.engines import (
    CANONICAL,
    ENGINES,
    EngineMap,
    Quantity,
    detect_engine,
    extract,
    info_values,
)
from plateau_bench.telemetry.exposition import parse_exposition, prefilter
from plateau_bench.telemetry.gpu import NVML_UNAVAILABLE, GpuPoller, GpuReading, NvmlSampler, open_nvml
from plateau_bench.telemetry.scraper import (
    DEFAULT_INTERVAL_S,
    TelemetryScraper,
    default_metrics_url,
    info_endpoints,
)
from plateau_bench.telemetry.summary import (
    GaugeStats,
    TelemetrySummary,
    counter_delta,
    gauge_stats,
    summarize,
    time_weighted_mean,
)

__all__ = [
    "CANONICAL",
    "DEFAULT_DCGM_INTERVAL_S",
    "DEFAULT_INTERVAL_S",
    "ENGINES",
    "NVML_UNAVAILABLE",
    "SOURCE_DCGM",
    "SOURCE_GPU",
    "SOURCE_SERVER",
    "DcgmEndpoint",
    "DcgmGpu",
    "DcgmNode",
    "DcgmPage",
    "DcgmPoller",
    "EngineMap",
    "GaugeStats",
    "GpuPoller",
    "GpuReading",
    "NvmlSampler",
    "Quantity",
    "TelemetrySample",
    "TelemetryScraper",
    "TelemetrySummary",
    "counter_delta",
    "default_metrics_url",
    "detect_engine",
    "extract",
    "gauge_stats",
    "info_endpoints",
    "info_values",
    "open_nvml",
    "parse_dcgm",
    "parse_exposition",
    "prefilter",
    "samples_from_lines",
    "summarize",
    "time_weighted_mean",
]
