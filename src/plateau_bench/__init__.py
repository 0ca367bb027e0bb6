"""plateau-bench: find where an LLM inference server stops scaling, and why.

The public API is small; most users drive it through the ``plateau`` command.
"""

from plateau_bench.errors import ConfigError, PlateauError, ScrapeError, TargetError
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency, LevelResult

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Latency",
    "LevelResult",
    "PlateauError",
    "RequestRecord",
    "ScrapeError",
    "TargetError",
    "__version__",
]
