"""The samples taken beside one level over HTTP: the server's ``/metrics``, this host's GPUs (NVML) and the
DCGM exporters, all stamped on the same clock origin as the level's records (a cold level's own start, or
the live load's for warm levels)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from plateau_bench.records import TelemetrySample
from plateau_bench.telemetry.dcgm import DcgmPoller
from plateau_bench.telemetry.gpu import GpuPoller
from plateau_bench.telemetry.scraper import TelemetryScraper


@dataclass
class Samples:
    server: list[TelemetrySample] = field(default_factory=list)
    gpu: list[TelemetrySample] = field(default_factory=list)
    dcgm: list[TelemetrySample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # exporters that were unavailable or faltered


class LevelTelemetry:
    """Starts the pollers a level has and stops them into ``Samples``."""

    def __init__(self, metrics_url: str | None, nvml: Any, dcgm_urls: Sequence[str], *, t0_ns: int) -> None:
        self.scraper = TelemetryScraper(metrics_url, t0_ns=t0_ns) if metrics_url else None
        self.gpu = GpuPoller(nvml, t0_ns=t0_ns) if nvml is not None else None
        self.dcgm = DcgmPoller(list(dcgm_urls), t0_ns=t0_ns) if dcgm_urls else None

    async def start(self, *, metrics_required: bool) -> str | None:
        """Start every poller (the first scrape done, so a required ``/metrics`` that does not answer raises
        here); the engine ``/metrics`` identified, if it did."""
        if self.scraper is not None:
            await self.scraper.start(wait_first=True)
            if metrics_required:
                self.scraper.raise_if_unavailable()
        if self.gpu is not None:
            await self.gpu.start()
        if self.dcgm is not None:
            await self.dcgm.start()
        return self.scraper.engine if self.scraper is not None else None

    async def stop(self) -> Samples:
        return Samples(server=await self.scraper.stop() if self.scraper is not None else [],
                       gpu=await self.gpu.stop() if self.gpu is not None else [],
                       dcgm=await self.dcgm.stop() if self.dcgm is not None else [],
                       notes=self.dcgm.notes() if self.dcgm is not None else [])
