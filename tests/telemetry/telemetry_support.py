"""Golden exposition samples and the plan of the scripted /metrics server (see conftest.py).

The golden files under ``data/`` are written in each engine's real exposition format: vLLM and
SGLang as prometheus_client renders them (HELP/TYPE lines, ``_total`` counters, separate
``_created`` gauges, histogram buckets), llama.cpp as its server prints them (``n_busy_slots_per_decode``
typed as a counter), TGI as the Rust metrics exporter does (no ``_total`` suffix on counters).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"


def golden(name: str) -> str:
    return (DATA / name).read_text()


def golden_json(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@dataclass
class MetricsPlan:
    """What the server answers; ``metrics`` is called with the 0-based index of each /metrics hit."""

    metrics: Callable[[int], str] = lambda i: golden("vllm_v1.prom")
    status: Callable[[int], int] = lambda i: 200
    hang_s: float = 0.0                      # sleep this long before answering /metrics
    json_routes: dict[str, Any] = field(default_factory=dict)   # e.g. {"/props": {...}}
    text_routes: dict[str, str] = field(default_factory=dict)   # e.g. {"/prometheus/metrics": "..."}
    hits: list[str] = field(default_factory=list)


@dataclass
class MetricsServer:
    plan: MetricsPlan
    port: int

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base}/metrics"

    def metrics_hits(self) -> int:
        return self.plan.hits.count("/metrics")


def free_port() -> int:
    """A port nothing listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
