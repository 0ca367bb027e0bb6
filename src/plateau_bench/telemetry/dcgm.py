"""GPU telemetry from NVIDIA's DCGM exporter: its Prometheus ``/metrics``, local or on other nodes.

The exporter (github.com/NVIDIA/dcgm-exporter) renders one series per GPU and field::

    DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-...",pci_bus_id="...",device="nvidia0",
                            modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"} 273.5

(``hostname`` since exporter 4.5.3, ``Hostname`` before; ``uuid`` with ``--use-old-namespace``;
``GPU_I_PROFILE``/``GPU_I_ID`` on MIG instances; pod labels under Kubernetes.) The fields read, their
units as the exporter's counter files (``etc/default-counters.csv``, ``etc/dcp-metrics-included.csv``)
and DCGM's field reference state them:

    DCGM_FI_DEV_POWER_USAGE               W          power_w
    DCGM_FI_DEV_ENFORCED_POWER_LIMIT      W          power_limit_w (the limit in force, preferred)
    DCGM_FI_DEV_POWER_MGMT_LIMIT          W          power_limit_w (the configured limit, fallback)
    DCGM_FI_PROF_SM_ACTIVE                ratio 0..1 sm_active
    DCGM_FI_PROF_SM_OCCUPANCY             ratio 0..1 sm_occupancy
    DCGM_FI_PROF_PIPE_TENSOR_ACTIVE       ratio 0..1 tensor_active
    DCGM_FI_PROF_DRAM_ACTIVE              ratio 0..1 dram_active
    DCGM_FI_PROF_GR_ENGINE_ACTIVE         ratio 0..1 gr_engine_active
    DCGM_FI_DEV_GPU_UTIL                  %          util_pct
    DCGM_FI_DEV_FB_USED / _FB_FREE        MiB        fb_used_mib / fb_free_mib
    DCGM_FI_PROF_PCIE_TX_BYTES / _RX      bytes/s    pcie_tx_bytes_per_s / pcie_rx_bytes_per_s
    DCGM_FI_PROF_NVLINK_TX_BYTES / _RX    bytes/s    nvlink_tx_bytes_per_s / nvlink_rx_bytes_per_s
    DCGM_FI_DEV_SM_CLOCK                  MHz        sm_clock_mhz
    DCGM_FI_DEV_MAX_SM_CLOCK              MHz        sm_clock_max_mhz (the board's top SM clock)
    DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION  mJ         energy_j (divided by 1,000: joules since boot)
    DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL    as given   nvlink_bandwidth_total (MB/s in recent exporters)

The exporter's default counters carry power, the energy counter and the SM clock; the power limit and the
top SM clock (what power and clock are read against) are there only when the counters file (``-f``)
lists ``DCGM_FI_DEV_ENFORCED_POWER_LIMIT`` and ``DCGM_FI_DEV_MAX_SM_CLOCK``.

The ``PROF_*_BYTES`` fields are rates (DCGM averages them over its watch interval), whatever TYPE the
page declares: older counter files typed them ``counter``. The profiling ratios also go by DCGM's
newer names (``DCGM_FI_PROF_SM_UTIL_RATIO`` ...), read as aliases. A value of 2**47 or more is one
of DCGM's blank or "not supported" sentinels (``DCGM_FP64_BLANK`` = 2**47, ``DCGM_INT64_BLANK``
~ 9.2e18) and is dropped, like negative, non-finite and out-of-range values.

The exporter refreshes its values every ``--collect-interval`` (30 s by default): for per-level
figures run it with ``-c 1000``, or the poller reads the same cached value many times.

``parse_dcgm`` turns one page into ``DcgmNode`` readings (one per hostname on the page) and never
raises; ``DcgmPoller`` polls several exporters (one per node) during a level and returns
``TelemetrySample``s (source ``dcgm``): one per node and scrape, with raw keys ``gpu<i>_<quantity>``
(``gpu0i3_...`` for MIG instance 3 of GPU 0), node aggregates ``node_<quantity>`` (power, energy and bytes
summed, ratios averaged, ``node_gpus``), and ``node``, the node's index in this poller (so that series
of different nodes stay apart; ``DcgmPoller.nodes`` names them). An exporter that does not answer is
recorded (``DcgmPoller.notes``), never raised into the load loop. The official parser costs ~6 ms for
an 8-GPU page, so the poller parses in a worker thread, off the load generator's event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.records import TelemetrySample
from plateau_bench.redaction import REDACTED, redact_url, split_userinfo

SOURCE_DCGM = "dcgm"
DEFAULT_DCGM_INTERVAL_S = 1.0
DEFAULT_DCGM_TIMEOUT_S = 2.0
BLANK_FROM = float(2**47)   # DCGM_FP64_BLANK; every DCGM sentinel is at or above it
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"

# DCGM field -> quantity; where two fields give one quantity, the first listed wins.
FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_UTIL_RATIO": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": "dram_active",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": "gr_engine_active",
    "DCGM_FI_DEV_GPU_UTIL": "util_pct",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "pcie_tx_bytes_per_s",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "pcie_rx_bytes_per_s",
    "DCGM_FI_PROF_NVLINK_TX_BYTES": "nvlink_tx_bytes_per_s",
    "DCGM_FI_PROF_NVLINK_RX_BYTES": "nvlink_rx_bytes_per_s",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "sm_clock_max_mhz",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_j",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "nvlink_bandwidth_total",
}
_PRIORITY = {name: i for i, name in enumerate(FIELDS)}
# Fields whose unit is not their quantity's: the energy counter counts millijoules, the quantity is in joules
# (NVML's counter, telemetry.gpu, is converted the same way), so both sources integrate alike.
SCALE: dict[str, float] = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1e-3}
RATIOS = frozenset({"sm_active", "sm_occupancy", "tensor_active", "dram_active", "gr_engine_active"})
SUMMED = frozenset({"power_w", "power_limit_w", "energy_j", "fb_used_mib", "fb_free_mib", "nvlink_bandwidth_total",
                    "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"})
QUANTITIES = frozenset(FIELDS.values())


@dataclass(frozen=True)
class DcgmGpu:
    """One GPU (or MIG instance) as one page showed it."""

    key: str                      # "0", or "0i3" for MIG instance 3 of GPU 0
    uuid: str | None = None
    model: str | None = None
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DcgmNode:
    hostname: str | None
    gpus: tuple[DcgmGpu, ...] = ()


@dataclass(frozen=True)
class DcgmPage:
    """What one exporter page held; ``problem`` says in one line why it is unusable."""

    nodes: tuple[DcgmNode, ...] = ()
    problem: str | None = None


def _metric_name(line: str) -> str:
    if line.startswith("#"):
        parts = line.split(maxsplit=3)
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else ""
    end = len(line)
    for sep in ("{", " ", "\t"):
        pos = line.find(sep)
        if pos != -1:
            end = min(end, pos)
    return line[:end]


def prefilter(text: str) -> str:
    """Only the lines (samples, HELP, TYPE) of the fields in ``FIELDS``."""
    kept = [line for line in (raw.strip() for raw in text.splitlines()) if _metric_name(line) in FIELDS]
    return "\n".join(kept) + "\n"


def _clean(quantity: str, value: float) -> float | None:
    """The value in its unit, or None for a sentinel or an impossible reading."""
    if not math.isfinite(value) or value < 0 or value >= BLANK_FROM:
        return None
    if quantity in RATIOS:
        return min(value, 1.0) if value <= 1.05 else None
    if quantity == "util_pct":
        return min(value, 100.0) if value <= 105.0 else None
    return value


def _field_of(sample_name: str) -> str | None:
    """The DCGM field a parsed sample belongs to: prometheus_client adds ``_total`` to the samples of a
    family typed ``counter`` (the exporter types some rates and DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL so)."""
    if sample_name in FIELDS:
        return sample_name
    bare = sample_name.removesuffix("_total")
    return bare if bare in FIELDS else None


def _gpu_key(labels: Mapping[str, str]) -> str:
    gpu = "".join(ch for ch in labels.get("gpu", "") if ch.isascii() and ch.isalnum())
    instance = "".join(ch for ch in labels.get("GPU_I_ID", "") if ch.isascii() and ch.isalnum())
    return f"{gpu}i{instance}" if gpu and instance else gpu


def _sort_key(key: str) -> tuple[int, str]:
    head = key.split("i", 1)[0]
    return (int(head) if head.isdigit() else 1 << 30, key)


def parse_dcgm(text: str) -> DcgmPage:
    """Per node (hostname label) and GPU, the quantities of ``FIELDS`` on one exporter page. Never raises.

    A series without a ``gpu`` label (NVSwitch, NVLink and CPU entities) or with an ``nvlink`` label is
    skipped; a GPU shown twice for one field (per-pod series of a shared GPU) keeps the first value.
    """
    try:
        families = list(text_string_to_metric_families(prefilter(text)))
    except Exception as exc:  # the parser's errors are ValueError and friends; any is "not this format"
        reason = f"{exc.__class__.__name__}: {exc}".replace("\n", " ")[:240]
        return DcgmPage(problem=f"not Prometheus text format: {reason}")
    found: dict[str, dict[str, tuple[dict[str, str], dict[str, tuple[int, float]]]]] = {}
    for family in families:
        for sample in family.samples:
            name = _field_of(sample.name)
            labels = dict(sample.labels)
            key = _gpu_key(labels)
            if name is None or not key or "nvlink" in labels:
                continue
            quantity = FIELDS[name]
            value = _clean(quantity, float(sample.value))
            if value is None:
                continue
            value *= SCALE.get(name, 1.0)   # after the sentinel check, which is on DCGM's own unit
            host = labels.get("hostname") or labels.get("Hostname") or ""
            _, values = found.setdefault(host, {}).setdefault(key, (labels, {}))
            rank = _PRIORITY[name]
            if quantity not in values or rank < values[quantity][0]:
                values[quantity] = (rank, value)
    if not found:
        return DcgmPage(problem="no DCGM GPU metrics (DCGM_FI_*) on the page")
    nodes = tuple(
        DcgmNode(hostname=host or None, gpus=tuple(
            DcgmGpu(key=key, uuid=labels.get("UUID") or labels.get("uuid"), model=labels.get("modelName"),
                    values={q: v for q, (_, v) in values.items()})
            for key, (labels, values) in sorted(gpus.items(), key=lambda kv: _sort_key(kv[0]))))
        for host, gpus in found.items())
    return DcgmPage(nodes=nodes)


def node_raw(node: DcgmNode) -> dict[str, float]:
    """The raw keys of one node's sample: ``gpu<key>_<quantity>`` and the ``node_*`` aggregates."""
    raw: dict[str, float] = {"node_gpus": float(len(node.gpus))}
    for gpu in node.gpus:
        for quantity, value in gpu.values.items():
            raw[f"gpu{gpu.key}_{quantity}"] = value
    for quantity in sorted(QUANTITIES):
        present = [g.values[quantity] for g in node.gpus if quantity in g.values]
        if present:
            total = sum(present)
            raw[f"node_{quantity}"] = total if quantity in SUMMED else total / len(present)
    for link in ("pcie", "nvlink"):
        rates = [g.values.get(f"{link}_{d}_bytes_per_s") for g in node.gpus for d in ("tx", "rx")]
        if any(r is not None for r in rates):
            raw[f"node_{link}_bytes_per_s"] = sum(r for r in rates if r is not None)
    return raw


def _scrub(message: str, url: str) -> str:
    """A message with the URL's credentials replaced, wherever the exception put them."""
    message = message.replace(url, redact_url(url))
    _, userinfo = split_userinfo(url)
    if userinfo:
        for secret in sorted({userinfo, *userinfo.split(":", 1), unquote(userinfo)}, key=len, reverse=True):
            if len(secret) >= 3:
                message = message.replace(secret, REDACTED)
    return message


def _describe(exc: BaseException, shown: str, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer from {shown} within {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {shown}: {exc.os_error.strerror or exc.os_error}"
    return f"cannot read {shown}: {exc.__class__.__name__}: {exc}"


@dataclass
class DcgmEndpoint:
    """One exporter URL and how reading it went."""

    url: str
    available: bool | None = None   # None until a scrape answered or failed; True once one was usable
    last_error: str | None = None
    scrapes: int = 0
    errors: int = 0
    hostnames: list[str] = field(default_factory=list)

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)

    def note(self) -> str | None:
        """One line for a level's notes when this exporter was unavailable or faltered."""
        if self.available is False:
            return f"DCGM exporter {self.shown_url} unavailable: {self.last_error}"
        if self.errors:
            return (f"DCGM exporter {self.shown_url}: {self.errors} of {self.errors + self.scrapes} scrapes "
                    f"failed (last: {self.last_error})")
        return None


class DcgmPoller:
    """Polls DCGM exporters (one per node) every ``interval_s`` while a level runs.

    Each URL has its own loop, so a slow or dead exporter delays only itself; a scrape that fails is
    counted on its ``DcgmEndpoint`` and the loop carries on (an exporter that comes up later is read
    from then on). Nothing here raises into the caller but a cancellation.

    Args:
        urls: the exporters' ``/metrics`` URLs; credentials in them go as Basic auth, never into messages.
        t0_ns: the level start on ``clock_ns``; samples are stamped relative to it.
        interval_s: time between scrape starts of one exporter.
        timeout_s: limit for one scrape.
        clock_ns: the monotonic clock (the driver's).
        headers: extra request headers (an Authorization header wins over URL credentials).
        on_sample: called with every new sample; its exceptions are counted, never raised.
    """

    def __init__(self, urls: Sequence[str], t0_ns: int, interval_s: float = DEFAULT_DCGM_INTERVAL_S, *,
                 timeout_s: float = DEFAULT_DCGM_TIMEOUT_S, clock_ns: Callable[[], int] = time.monotonic_ns,
                 headers: Mapping[str, str] | None = None,
                 on_sample: Callable[[TelemetrySample], None] | None = None) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self.endpoints = [DcgmEndpoint(url=u) for u in urls]
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._t0_ns = t0_ns
        self._clock_ns = clock_ns
        self._headers = {"Accept": _ACCEPT, **(headers or {})}
        self._on_sample = on_sample
        self._samples: list[TelemetrySample] = []
        self._node_ids: dict[tuple[int, str], int] = {}
        self.nodes: list[str] = []          # node index -> hostname (or the exporter's host)
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def samples(self) -> list[TelemetrySample]:
        return sorted(self._samples, key=lambda s: s.t_ns)

    def drain(self) -> list[TelemetrySample]:
        """The samples collected so far, removed from the poller."""
        out, self._samples = sorted(self._samples, key=lambda s: s.t_ns), []
        return out

    def set_t0(self, t0_ns: int) -> None:
        """Stamp later samples relative to a new level start."""
        self._t0_ns = t0_ns

    def notes(self) -> list[str]:
        """One line per exporter that was unavailable or faltered (for the level's notes)."""
        return [n for n in (e.note() for e in self.endpoints) if n]

    async def start(self) -> None:
        """Begin polling (returns at once; the first scrapes run in the background)."""
        if self._tasks or not self.endpoints:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2 * len(self.endpoints)))
        self._tasks = [asyncio.create_task(self._run(i), name=f"plateau-dcgm-{i}")
                       for i in range(len(self.endpoints))]

    async def stop(self) -> list[TelemetrySample]:
        """Stop polling (one last scrape of each exporter that answered, or never finished one);
        returns every sample in time order."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if tasks:
            final = [i for i, e in enumerate(self.endpoints) if e.available is not False]
            await asyncio.gather(*(self._scrape(i, min(self.timeout_s, 1.0)) for i in final))
        if self._session is not None:
            await self._session.close()
            self._session = None
        return self.samples

    async def _run(self, index: int) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self._scrape(index, self.timeout_s)
            next_at += self.interval_s
            now = loop.time()
            if next_at < now:   # fell behind: skip the missed ticks
                next_at = now + self.interval_s
            await asyncio.sleep(next_at - now)

    def _request(self, url: str) -> tuple[str, dict[str, str]]:
        """The URL without its userinfo, and the headers: the userinfo as a Basic ``Authorization``
        header unless one was given."""
        bare, userinfo = split_userinfo(url)
        headers = dict(self._headers)
        if userinfo is not None and not any(k.lower() == "authorization" for k in headers):
            user, _, password = userinfo.partition(":")
            basic = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
            headers["Authorization"] = f"Basic {basic}"
        return bare, headers

    async def _get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        assert self._session is not None
        bare, headers = self._request(url)
        async with self._session.get(bare, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.read()

    async def _scrape(self, index: int, timeout_s: float) -> None:
        """One scrape of one exporter. Never raises (cancellation aside)."""
        endpoint = self.endpoints[index]
        try:
            t_send = self._clock_ns()
            try:
                status, body = await self._get(endpoint.url, timeout_s)
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
                return self._fail(endpoint, _describe(exc, endpoint.shown_url, timeout_s))
            t_recv = self._clock_ns()
            if status != 200:
                return self._fail(endpoint, f"HTTP {status} from {endpoint.shown_url}")
            # ~6 ms for an 8-GPU page: in a thread, so the load loop is not held for the whole parse
            page = await asyncio.to_thread(parse_dcgm, body.decode("utf-8", errors="replace"))
            if page.problem is not None:
                return self._fail(endpoint, f"{endpoint.shown_url}: {page.problem}")
            t_ns = (t_send + t_recv) // 2 - self._t0_ns
            for node in page.nodes:
                self._add(TelemetrySample(t_ns=t_ns, engine=SOURCE_DCGM, source=SOURCE_DCGM,
                                          raw={**node_raw(node), "node": float(self._node_id(index, node))}),
                          endpoint)
            endpoint.available = True
            endpoint.scrapes += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never into the load loop: count it and carry on
            self._fail(endpoint, f"reading {endpoint.shown_url} failed: {exc.__class__.__name__}: {exc}")

    def _node_id(self, index: int, node: DcgmNode) -> int:
        key = (index, node.hostname or "")
        if key not in self._node_ids:
            self._node_ids[key] = len(self.nodes)
            url = split_userinfo(self.endpoints[index].url)[0]
            self.nodes.append(node.hostname or urlsplit(url).netloc or url)
            if node.hostname:
                self.endpoints[index].hostnames.append(node.hostname)
        return self._node_ids[key]

    def _add(self, sample: TelemetrySample, endpoint: DcgmEndpoint) -> None:
        self._samples.append(sample)
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception as exc:  # the callback is the caller's; its failure is only counted
                endpoint.errors += 1
                endpoint.last_error = f"sample callback failed: {exc.__class__.__name__}: {exc}"

    def _fail(self, endpoint: DcgmEndpoint, message: str) -> None:
        endpoint.errors += 1
        endpoint.last_error = _scrub(message, endpoint.url)
        if endpoint.available is None:
            endpoint.available = False
