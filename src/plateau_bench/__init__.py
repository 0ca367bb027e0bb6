"""plateau-bench: find where an LLM inference server stops scaling, and why.

The public API is small; most users drive it through the ``plateau`` command. Scripts read results
with ``load_result(dir) -> ResultFile`` (the typed tree whose JSON Schema is ``plateau schema``).
"""

from plateau_bench._version import __version__
from plateau_bench.errors import ConfigError, PlateauError, ScrapeError, TargetError
from plateau_bench.records import RequestRecord
from plateau_bench.result import Latency, LevelResult, ResultFile
from plateau_bench.store import load_result

__all__ = [
    "ConfigError",
    "Latency",
    "LevelResult",
    "PlateauError",
    "RequestRecord",
    "ResultFile",
    "ScrapeError",
    "TargetError",
    "__version__",
    "load_result",
]
