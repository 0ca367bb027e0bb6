"""DCGM exporter pages parsed (constructed expositions in data/dcgm_*.prom, see their headers) and the
poller against fake exporters on 127.0.0.1: one up, one down, credentials, failures, recovery."""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_bench.analysis.gpu import SOURCE_DCGM as ANALYSIS_SOURCE
from plateau_bench.analysis.gpu import gpu_metrics
from plateau_bench.telemetry import DcgmPoller, parse_dcgm
from plateau_bench.telemetry.dcgm import FIELDS, SOURCE_DCGM, node_raw, prefilter

from telemetry_support import MetricsPlan, MetricsServer, free_port, golden

Start = Callable[[MetricsPlan], Any]
LABELS = 'UUID="GPU-x",pci_bus_id="00000000:01:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'


def gauge(name: str, *series: tuple[str, float | str]) -> str:
    """A page fragment: HELP, TYPE gauge, and one line per (labels, value)."""
    lines = [f"# HELP {name} test", f"# TYPE {name} gauge"]
    lines += [f"{name}{{{labels}}} {value}" for labels, value in series]
    return "\n".join(lines) + "\n"


# -- the parser --------------------------------------------------------------------------------------

def test_h100_node_per_gpu_values_and_units() -> None:
    page = parse_dcgm(golden("dcgm_h100_node_a.prom"))
    assert page.problem is None
    (node,) = page.nodes
    assert node.hostname == "gpu-node-a"
    assert [g.key for g in node.gpus] == ["0", "1", "2", "3"]
    gpu0 = node.gpus[0]
    assert gpu0.uuid == "GPU-5fd4a1b2-0c1e-4f57-9a0e-3d2b8f6c1a01"
    assert gpu0.model == "NVIDIA H100 80GB HBM3"
    assert gpu0.values.pop("energy_j") == pytest.approx(912_873_345.112)   # the page's mJ, in joules
    assert gpu0.values == {
        "sm_clock_mhz": 1980.0, "power_w": 273.5, "power_limit_w": 700.0, "util_pct": 62.0,
        "fb_free_mib": 10325.0, "fb_used_mib": 71234.0, "nvlink_bandwidth_total": 8012.0,
        "gr_engine_active": 0.35, "sm_active": 0.30, "sm_occupancy": 0.18, "tensor_active": 0.12,
        "dram_active": 0.40, "pcie_tx_bytes_per_s": 150e6, "pcie_rx_bytes_per_s": 250e6,
        "nvlink_tx_bytes_per_s": 4e9, "nvlink_rx_bytes_per_s": 4e9,
    }
    assert node.gpus[2].values["power_w"] == 281.25


def test_node_raw_keys_per_gpu_and_aggregates() -> None:
    (node,) = parse_dcgm(golden("dcgm_h100_node_a.prom")).nodes
    raw = node_raw(node)
    assert raw["gpu0_power_w"] == 273.5 and raw["gpu3_sm_active"] == 0.30
    assert raw["node_gpus"] == 4.0
    assert raw["node_power_w"] == pytest.approx(273.5 + 268.0 + 281.25 + 270.0)        # summed
    assert raw["node_power_limit_w"] == 2800.0
    assert raw["node_sm_active"] == pytest.approx(0.30)                                  # averaged
    assert raw["node_util_pct"] == pytest.approx(62.0)
    assert raw["node_pcie_bytes_per_s"] == pytest.approx(150e6 + 250e6 + 3 * (100e6 + 200e6))
    assert raw["node_nvlink_bytes_per_s"] == pytest.approx(4 * 8e9)


def test_second_node_lowercase_hostname_configured_limit_and_counter_typed_rates() -> None:
    (node,) = parse_dcgm(golden("dcgm_a100_node_b.prom")).nodes
    assert node.hostname == "gpu-node-b"
    assert [g.model for g in node.gpus] == ["NVIDIA A100-SXM4-80GB"] * 2
    gpu1 = node.gpus[1].values
    assert gpu1["power_w"] == 372.0 and gpu1["power_limit_w"] == 400.0   # DCGM_FI_DEV_POWER_MGMT_LIMIT
    # typed counter, so prometheus_client names the samples ..._total: still the rate in bytes/s
    assert gpu1["pcie_tx_bytes_per_s"] == 500e6 and gpu1["pcie_rx_bytes_per_s"] == 500e6
    assert "nvlink_tx_bytes_per_s" not in gpu1
    assert gpu1["sm_active"] == 0.99 and gpu1["tensor_active"] == 0.86 and gpu1["util_pct"] == 100.0


def test_default_counters_page_without_hostname_drops_blank_values() -> None:
    (node,) = parse_dcgm(golden("dcgm_default_counters.prom")).nodes
    assert node.hostname is None
    (gpu,) = node.gpus
    # the power limit is DCGM_FP64_BLANK on this board; no profiling fields in the default counters
    assert gpu.values == {"sm_clock_mhz": 2040.0, "power_w": 35.12, "util_pct": 3.0, "fb_free_mib": 22008.0,
                          "fb_used_mib": 563.0, "nvlink_bandwidth_total": 0.0,
                          "energy_j": pytest.approx(81_234.567)}


def test_one_page_with_two_hosts_gives_two_nodes() -> None:
    page = parse_dcgm(golden("dcgm_h100_node_a.prom") + golden("dcgm_a100_node_b.prom"))
    assert [(n.hostname, len(n.gpus)) for n in page.nodes] == [("gpu-node-a", 4), ("gpu-node-b", 2)]


def test_enforced_limit_wins_and_newer_field_names_are_aliases() -> None:
    text = (gauge("DCGM_FI_DEV_POWER_MGMT_LIMIT", (f'gpu="0",{LABELS}', 700))
            + gauge("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", (f'gpu="0",{LABELS}', 650))
            + gauge("DCGM_FI_PROF_SM_UTIL_RATIO", (f'gpu="0",{LABELS}', 0.5))
            + gauge("DCGM_FI_PROF_TENSOR_UTIL_RATIO", (f'gpu="0",{LABELS}', 0.25))
            + gauge("DCGM_FI_PROF_DRAM_UTIL_RATIO", (f'gpu="0",{LABELS}', 0.125))
            + gauge("DCGM_FI_PROF_SM_ACTIVE", (f'gpu="0",{LABELS}', 0.75)))
    (gpu,) = parse_dcgm(text).nodes[0].gpus
    assert gpu.values == {"power_limit_w": 650.0, "sm_active": 0.75, "tensor_active": 0.25, "dram_active": 0.125}


def energy_page(energy_mj: int, power_w: float, clock_mhz: float) -> str:
    """One GPU as the exporter renders it with DCGM_FI_DEV_MAX_SM_CLOCK added to its counters file: the energy
    counter typed ``counter`` in mJ (etc/default-counters.csv), power and clocks gauges."""
    labels = f'gpu="0",{LABELS},Hostname="node-e"'
    return ("# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {energy_mj}\n"
            + gauge("DCGM_FI_DEV_POWER_USAGE", (labels, power_w))
            + gauge("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", (labels, 700))
            + gauge("DCGM_FI_DEV_SM_CLOCK", (labels, clock_mhz))
            + gauge("DCGM_FI_DEV_MAX_SM_CLOCK", (labels, 1980)))


def test_energy_counter_and_top_clock_give_the_levels_energy_and_clock_share() -> None:
    """Two scrapes 10 s apart: the counter grew by 6,300,000 mJ = 6,300 J (630 W on average), while the two
    power readings (600 W, 660 W) would integrate to the same; the counter is what is used."""
    from plateau_bench.records import TelemetrySample

    pages = [energy_page(1_000_000_000, 600.0, 1980), energy_page(1_006_300_000, 660.0, 1800)]
    samples = [TelemetrySample(t_ns=t * 10**9, engine=SOURCE_DCGM, source=SOURCE_DCGM,
                               raw={**node_raw(parse_dcgm(page).nodes[0]), "node": 0.0})
               for t, page in zip((0, 10), pages, strict=True)]
    assert samples[0].raw["gpu0_energy_j"] == 1_000_000.0 and samples[0].raw["gpu0_sm_clock_max_mhz"] == 1980.0
    assert samples[0].raw["node_energy_j"] == 1_000_000.0
    m = gpu_metrics(samples, 0, 10 * 10**9)
    assert m is not None and m.energy_source == "counter"
    assert m.energy_j == pytest.approx(6300.0)
    # gauges are steps: the first scrape's clock holds until the second, at the window's end
    assert (m.sm_clock_mhz, m.sm_clock_max_mhz, m.sm_clock_share) == (1980.0, 1980.0, 1.0)
    assert gpu_metrics(samples, 0, 20 * 10**9).sm_clock_share == pytest.approx((1980 + 1800) / 2 / 1980, abs=1e-4)  # type: ignore[union-attr]


def test_a_blank_energy_counter_is_dropped_not_zero() -> None:
    labels = f'gpu="0",{LABELS}'
    text = ("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
            f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} 9223372036854775794\n"   # DCGM_INT64_NOT_SUPPORTED
            + gauge("DCGM_FI_DEV_POWER_USAGE", (labels, 80)))
    (gpu,) = parse_dcgm(text).nodes[0].gpus
    assert gpu.values == {"power_w": 80.0}


def test_mig_instances_link_series_and_duplicates() -> None:
    text = gauge("DCGM_FI_PROF_SM_ACTIVE",
                 (f'gpu="0",{LABELS},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"', 0.4),
                 (f'gpu="0",{LABELS},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"', 0.6),
                 (f'gpu="1",{LABELS},pod="a"', 0.2),
                 (f'gpu="1",{LABELS},pod="b"', 0.9),      # a shared GPU shown per pod: the first counts
                 ('nvlink="0",gpu="1"', 0.99),            # a link entity, not a GPU
                 ('nvswitch="0"', 0.5))                   # no gpu label
    gpus = {g.key: g.values["sm_active"] for g in parse_dcgm(text).nodes[0].gpus}
    assert gpus == {"0i1": 0.4, "0i2": 0.6, "1": 0.2}


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-0.5", "1.5", "140737488355328", "9223372036854775794"])
def test_impossible_values_and_sentinels_are_dropped(value: str) -> None:
    text = gauge("DCGM_FI_PROF_SM_ACTIVE", (f'gpu="0",{LABELS}', value)) + gauge(
        "DCGM_FI_DEV_POWER_USAGE", (f'gpu="0",{LABELS}', 100))
    (gpu,) = parse_dcgm(text).nodes[0].gpus
    assert gpu.values == {"power_w": 100.0}


def test_utilisation_above_100_percent_is_dropped_and_a_ratio_a_hair_over_one_is_one() -> None:
    text = (gauge("DCGM_FI_DEV_GPU_UTIL", (f'gpu="0",{LABELS}', 250))
            + gauge("DCGM_FI_PROF_SM_ACTIVE", (f'gpu="0",{LABELS}', 1.01)))
    assert parse_dcgm(text).nodes[0].gpus[0].values == {"sm_active": 1.0}


@pytest.mark.parametrize(("text", "problem"), [
    ("", "no DCGM GPU metrics"),
    (golden("vllm_v1.prom"), "no DCGM GPU metrics"),
    ('DCGM_FI_DEV_POWER_USAGE{gpu="0" 12\n', "not Prometheus text format"),
    ("<html>502 Bad Gateway</html>", "no DCGM GPU metrics"),
])
def test_unusable_pages_say_why_in_one_line(text: str, problem: str) -> None:
    page = parse_dcgm(text)
    assert page.nodes == () and page.problem is not None
    assert page.problem.startswith(problem) and "\n" not in page.problem


def test_prefilter_keeps_only_the_fields_read() -> None:
    kept = prefilter(golden("dcgm_h100_node_a.prom")).splitlines()
    assert kept and all(any(name in line for name in FIELDS) for line in kept)
    assert not any("DCGM_FI_DEV_GPU_TEMP" in line for line in kept)
    assert any(line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") for line in kept)


_DCGM_LINE = st.builds(
    lambda name, gpu, value, junk: f'{name}{{gpu="{gpu}",Hostname="h"}} {value}{junk}',
    st.sampled_from([*FIELDS, "DCGM_FI_DEV_GPU_TEMP"]), st.text(max_size=4),
    st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), st.text(max_size=6)),
    st.sampled_from(["", " 1718031425000", "}", "\\", " # {x=1} 2"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), _DCGM_LINE, st.sampled_from(
    ["# TYPE DCGM_FI_DEV_POWER_USAGE counter", "# HELP DCGM_FI_DEV_POWER_USAGE \\", "# TYPE x",
     "# EOF", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_USAGE{"])), max_size=12))
def test_the_parser_never_raises(lines: list[str]) -> None:
    page = parse_dcgm("\n".join(lines))
    assert (page.problem is None) == bool(page.nodes)
    for node in page.nodes:
        for gpu in node.gpus:
            assert gpu.key.isalnum() and all(0.0 <= v < 2.0**47 for v in gpu.values.values())


# -- the poller ----------------------------------------------------------------------------------------

def exporter(name: str) -> MetricsPlan:
    return MetricsPlan(metrics=lambda i: golden(name))


async def wait_for(condition: Callable[[], bool], limit_s: float = 20.0) -> None:
    """Wait until ``condition`` holds (the limit only guards against a hang)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_poller_one_exporter_up_one_down(metrics_server: Start) -> None:
    up: MetricsServer = await metrics_server(exporter("dcgm_h100_node_a.prom"))
    down = f"http://127.0.0.1:{free_port()}/metrics"
    poller = DcgmPoller([up.metrics_url, down], t0_ns=0, interval_s=0.02)
    await poller.start()
    await wait_for(lambda: len(poller.samples) >= 3 and poller.endpoints[1].errors >= 2)
    samples = await poller.stop()
    assert all(s.source == SOURCE_DCGM == ANALYSIS_SOURCE and s.raw["node"] == 0.0 for s in samples)
    assert samples[0].raw["gpu0_power_w"] == 273.5 and samples[0].raw["node_gpus"] == 4.0
    assert [s.t_ns for s in samples] == sorted(s.t_ns for s in samples)
    assert poller.nodes == ["gpu-node-a"]
    ok, dead = poller.endpoints
    assert ok.available is True and ok.errors == 0 and ok.hostnames == ["gpu-node-a"]
    assert dead.available is False and dead.last_error is not None
    (note,) = poller.notes()
    assert note.startswith(f"DCGM exporter {down} unavailable: cannot connect to {down}") and "\n" not in note


async def test_poller_two_nodes_give_one_gpu_metrics(metrics_server: Start) -> None:
    a = await metrics_server(exporter("dcgm_h100_node_a.prom"))
    b = await metrics_server(exporter("dcgm_a100_node_b.prom"))
    poller = DcgmPoller([a.metrics_url, b.metrics_url], t0_ns=0, interval_s=0.02)
    await poller.start()
    await wait_for(lambda: {s.raw["node"] for s in poller.samples} == {0.0, 1.0})
    samples = await poller.stop()
    assert poller.notes() == [] and sorted(poller.nodes) == ["gpu-node-a", "gpu-node-b"]
    m = gpu_metrics(samples, 0, max(s.t_ns for s in samples))
    assert m is not None and (m.gpus, m.nodes) == (6, 2)


async def test_poller_without_urls_is_a_no_op() -> None:
    poller = DcgmPoller([], t0_ns=0)
    await poller.start()
    assert await poller.stop() == [] and poller.notes() == []


async def test_poller_stamps_midpoints_on_the_given_clock(metrics_server: Start) -> None:
    server = await metrics_server(exporter("dcgm_default_counters.prom"))
    ticks = itertools.count(start=10_000, step=1_000)
    poller = DcgmPoller([server.metrics_url], t0_ns=10_000, interval_s=0.02, clock_ns=lambda: next(ticks))
    await poller.start()
    await wait_for(lambda: len(poller.samples) >= 2)
    samples = await poller.stop()
    assert samples[0].t_ns == 500 and all(s.t_ns % 1_000 == 500 for s in samples)
    # no hostname label: the node is named by the exporter's address
    assert poller.nodes == [f"127.0.0.1:{server.port}"]


async def test_stop_right_after_start_still_reads_once(metrics_server: Start) -> None:
    server = await metrics_server(exporter("dcgm_a100_node_b.prom"))
    poller = DcgmPoller([server.metrics_url], t0_ns=0, interval_s=10.0)
    await poller.start()
    samples = await poller.stop()
    assert len(samples) >= 1 and poller.endpoints[0].available is True


@pytest.mark.parametrize(("plan", "reason"), [
    (MetricsPlan(status=lambda i: 500), "HTTP 500 from"),
    (MetricsPlan(metrics=lambda i: golden("vllm_v1.prom")), "no DCGM GPU metrics"),
    (MetricsPlan(metrics=lambda i: golden("dcgm_h100_node_a.prom"), hang_s=2.0), "no answer from"),
])
@pytest.mark.slow
async def test_unusable_exporters_are_notes_not_exceptions(metrics_server: Start, plan: MetricsPlan,
                                                           reason: str) -> None:
    server = await metrics_server(plan)
    poller = DcgmPoller([server.metrics_url], t0_ns=0, interval_s=0.02, timeout_s=0.2)
    await poller.start()
    await wait_for(lambda: poller.endpoints[0].errors >= 1)
    assert await poller.stop() == []
    (note,) = poller.notes()
    assert "unavailable" in note and reason in note


async def test_an_exporter_that_comes_up_later_is_read_and_its_failures_counted(metrics_server: Start) -> None:
    plan = MetricsPlan(metrics=lambda i: golden("dcgm_h100_node_a.prom"), status=lambda i: 503 if i < 2 else 200)
    server = await metrics_server(plan)
    poller = DcgmPoller([server.metrics_url], t0_ns=0, interval_s=0.02)
    await poller.start()
    await wait_for(lambda: len(poller.samples) >= 2)
    await poller.stop()
    endpoint = poller.endpoints[0]
    assert endpoint.available is True and endpoint.errors == 2
    (note,) = poller.notes()
    assert "2 of" in note and "HTTP 503" in note


async def test_a_failing_sample_callback_is_counted(metrics_server: Start) -> None:
    server = await metrics_server(exporter("dcgm_default_counters.prom"))

    def boom(sample: object) -> None:
        raise RuntimeError("disk full")

    poller = DcgmPoller([server.metrics_url], t0_ns=0, interval_s=0.02, on_sample=boom)
    await poller.start()
    await wait_for(lambda: len(poller.samples) >= 2)
    assert len(await poller.stop()) >= 2
    assert "disk full" in (poller.endpoints[0].last_error or "")


@pytest.fixture
async def auth_exporter() -> AsyncIterator[int]:
    """An exporter behind Basic auth (user ``ops``, password ``s3cret-pw``)."""
    expected = "Basic " + base64.b64encode(b"ops:s3cret-pw").decode()

    async def metrics(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401, text="unauthorized")
        return web.Response(text=golden("dcgm_default_counters.prom"), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield int(runner.addresses[0][1])
    await runner.cleanup()


async def test_url_credentials_go_as_basic_auth_and_never_into_notes(auth_exporter: int) -> None:
    good = f"http://ops:s3cret-pw@127.0.0.1:{auth_exporter}/metrics"
    wrong = f"http://ops:wrong-pw@127.0.0.1:{auth_exporter}/metrics"
    down = f"http://ops:s3cret-pw@127.0.0.1:{free_port()}/metrics"
    poller = DcgmPoller([good, wrong, down], t0_ns=0, interval_s=0.02)
    await poller.start()
    await wait_for(lambda: len(poller.samples) >= 1 and all(e.errors for e in poller.endpoints[1:]))
    await poller.stop()
    assert poller.endpoints[0].available is True
    notes = poller.notes()
    assert len(notes) == 2 and "HTTP 401" in notes[0] and "cannot connect" in notes[1]
    assert all("***@127.0.0.1" in n and "s3cret" not in n and "wrong-pw" not in n for n in notes)
    assert "s3cret" not in repr([e.last_error for e in poller.endpoints])


def test_poller_refuses_a_nonpositive_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        DcgmPoller(["http://127.0.0.1:9400/metrics"], t0_ns=0, interval_s=0)
