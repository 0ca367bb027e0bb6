"""The scraper against real aiohttp servers on 127.0.0.1: changing values, absence, errors."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from plateau_bench.errors import ScrapeError
from plateau_bench.records import TelemetrySample
from plateau_bench.telemetry.scraper import TelemetryScraper, default_metrics_url, info_endpoints

from telemetry_support import MetricsPlan, MetricsServer, free_port, golden, golden_json

Start = Callable[[MetricsPlan], Any]


def vllm_page(i: int) -> str:
    """A vLLM page whose values change on every hit: running = i % 5, 100 tokens per hit."""
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {i % 5}.0\n'
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {100.0 * i}\n'
        "# HELP vllm:generation_tokens_created Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_created gauge\n"
        'vllm:generation_tokens_created{engine="0",model_name="m"} 1.718031425e+09\n'
    )


async def wait_for(condition: Callable[[], bool], limit_s: float = 20.0) -> None:
    """Wait until ``condition`` holds (the limit only guards against a hang; it is not a measurement)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_scrapes_changing_values(metrics_server: Start) -> None:
    server: MetricsServer = await metrics_server(MetricsPlan(metrics=vllm_page))
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={})
    await scraper.start()
    await wait_for(lambda: scraper.scrapes >= 5)
    samples = await scraper.stop()
    assert scraper.available is True and scraper.engine == "vllm" and scraper.errors == 0
    # stop() takes one last sample: every page served became a sample, in order
    assert len(samples) == server.metrics_hits()
    assert [s.values["running"] for s in samples] == [i % 5 for i in range(len(samples))]
    assert [s.values["generation_tokens"] for s in samples] == [100.0 * i for i in range(len(samples))]
    times = [s.t_ns for s in samples]
    assert times == sorted(times) and times[0] >= 0
    assert all(s.engine == "vllm" for s in samples)


async def test_samples_are_stamped_on_the_given_clock(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(metrics=vllm_page))
    ticks = itertools.count(start=10_000, step=1_000)
    # each scrape reads the clock twice (send, receive) and stamps the midpoint, relative to t0
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={},
                               clock_ns=lambda: next(ticks), t0_ns=10_000)
    await scraper.start(wait_first=True)
    samples = await scraper.stop(final_scrape=False)
    assert samples[0].t_ns == 500   # (10_000 + 11_000) / 2 - 10_000
    assert all(s.t_ns % 1_000 == 500 for s in samples)


async def test_llamacpp_cap_comes_from_props(metrics_server: Start) -> None:
    plan = MetricsPlan(metrics=lambda i: golden("llamacpp.prom"),
                       json_routes={"/props": golden_json("llamacpp_props.json"),
                                    "/slots": golden_json("llamacpp_slots.json")})
    server = await metrics_server(plan)
    async with TelemetryScraper(server.metrics_url, interval_s=0.02) as scraper:
        await wait_for(lambda: scraper.scrapes >= 2)
    samples = scraper.samples
    assert scraper.engine == "llamacpp"
    assert all(s.values["cap"] == 4 for s in samples)
    assert all(s.values["running"] == 4 and s.values["waiting"] == 12 for s in samples)
    # read once, and /slots not at all once /props gave the slot count
    assert plan.hits.count("/props") == 1 and "/slots" not in plan.hits


async def test_llamacpp_cap_from_slots_when_props_is_absent(metrics_server: Start) -> None:
    plan = MetricsPlan(metrics=lambda i: golden("llamacpp.prom"),
                       json_routes={"/slots": golden_json("llamacpp_slots.json")})
    server = await metrics_server(plan)
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02)
    await scraper.start(wait_first=True)
    await scraper.stop()
    assert scraper.static == {"cap": 3}


async def test_sglang_server_info(metrics_server: Start) -> None:
    plan = MetricsPlan(metrics=lambda i: golden("sglang.prom"),
                       json_routes={"/get_server_info": golden_json("sglang_server_info.json")})
    server = await metrics_server(plan)
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02)
    await scraper.start(wait_first=True)
    samples = await scraper.stop()
    assert samples[0].values["cap"] == 2048
    # the KV pool from /metrics wins over the info endpoint's (here they agree)
    assert samples[0].values["kv_capacity_tokens"] == 442367


async def test_trtllm_serves_json_on_metrics_and_its_prometheus_text_beside(metrics_server: Start) -> None:
    # trtllm-serve: /metrics is its JSON iteration statistics, /prometheus/metrics the Prometheus text
    stats = [{"iter": 7, "numActiveRequests": 64, "numQueuedRequests": 120, "maxNumActiveRequests": 64}]
    plan = MetricsPlan(metrics=lambda i: json.dumps(stats),
                       text_routes={"/prometheus/metrics": golden("trtllm.prom")})
    server = await metrics_server(plan)
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={})
    await scraper.start(wait_first=True)
    samples = await scraper.stop()
    assert scraper.engine == "trtllm" and scraper.errors == 0
    assert scraper.metrics_url == f"{server.base}/prometheus/metrics"
    assert samples[0].values["cap"] == 64 and samples[0].values["waiting"] == 120
    assert plan.hits.count("/metrics") == 1     # asked once, then the Prometheus route


async def test_default_url_that_does_not_answer_is_silently_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    scraper = TelemetryScraper(url, interval_s=0.02)
    await scraper.start()
    await wait_for(lambda: scraper.available is not None)
    samples = await scraper.stop()
    assert samples == [] and scraper.available is False
    assert scraper.last_error is not None and "cannot connect" in scraper.last_error
    # only a caller that was given the URL explicitly turns this into an error
    with pytest.raises(ScrapeError, match=r"--metrics-url .* is unusable: cannot connect"):
        scraper.raise_if_unavailable()


async def test_an_unreachable_url_with_a_password_is_reported_without_it() -> None:
    scraper = TelemetryScraper(f"http://scraper:hunter22@127.0.0.1:{free_port()}/metrics", interval_s=0.02)
    await scraper.start()
    await wait_for(lambda: scraper.available is not None)
    await scraper.stop()
    assert scraper.last_error is not None and "cannot connect to http://***@127.0.0.1" in scraper.last_error
    with pytest.raises(ScrapeError) as refused:
        scraper.raise_if_unavailable()
    assert "hunter22" not in str(refused.value) and "scraper:" not in str(refused.value)


async def test_404_is_unavailable(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(status=lambda i: 404))
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02)
    await scraper.start(wait_first=True)
    assert scraper.available is False and scraper.last_error == f"HTTP 404 from {server.metrics_url}"
    assert await scraper.stop() == []
    assert server.metrics_hits() == 1   # it gave up after the first answer


@pytest.mark.slow
async def test_a_server_that_hangs_is_unavailable_after_the_timeout(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(hang_s=2.0))
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, timeout_s=0.2)
    await scraper.start(wait_first=True)
    await scraper.stop()
    assert scraper.available is False
    assert scraper.last_error == f"no answer from {server.metrics_url} within 0.2 s"


@pytest.mark.parametrize(("page", "message"), [
    ('vllm:num_requests_running{engine="0" 4\n', "is not Prometheus text format"),
    ("<html><body>dashboard</body></html>", "shows no vLLM"),
    ("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.5\n", "shows no vLLM"),
])
async def test_a_page_that_is_not_engine_metrics_is_unavailable(metrics_server: Start, page: str,
                                                               message: str) -> None:
    server = await metrics_server(MetricsPlan(metrics=lambda i: page))
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02)
    await scraper.start(wait_first=True)
    await scraper.stop()
    assert scraper.available is False
    assert scraper.last_error is not None and message in scraper.last_error


async def test_later_failures_are_counted_and_scraping_goes_on(metrics_server: Start) -> None:
    # answers 500 on hits 2 and 3, then recovers
    server = await metrics_server(MetricsPlan(metrics=vllm_page, status=lambda i: 500 if i in (2, 3) else 200))
    errors_seen: list[str] = []
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={})
    await scraper.start()
    await wait_for(lambda: scraper.scrapes >= 4)
    errors_seen.append(scraper.last_error or "")
    samples = await scraper.stop()
    assert scraper.available is True and scraper.errors == 2
    assert errors_seen[0] == f"HTTP 500 from {server.metrics_url}"
    assert [s.values["generation_tokens"] for s in samples[:4]] == [0.0, 100.0, 400.0, 500.0]


async def test_a_failing_callback_never_reaches_the_caller(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(metrics=vllm_page))
    seen: list[TelemetrySample] = []

    def on_sample(sample: TelemetrySample) -> None:
        seen.append(sample)
        raise RuntimeError("disk full")

    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={}, on_sample=on_sample)
    await scraper.start()
    await wait_for(lambda: scraper.scrapes >= 3)
    samples = await scraper.stop()
    assert seen == samples
    assert scraper.errors == len(samples)
    assert scraper.last_error == "telemetry callback failed: RuntimeError: disk full"


async def test_a_passed_session_is_left_open(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(metrics=vllm_page))
    async with aiohttp.ClientSession() as session:
        scraper = TelemetryScraper(server.metrics_url, session=session, extra_endpoints={})
        await scraper.start(wait_first=True)
        await scraper.stop()
        assert not session.closed
        assert len(scraper.samples) == 2


async def test_drain_and_set_t0_for_a_scraper_kept_across_levels(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(metrics=vllm_page))
    clock = itertools.count(start=0, step=10)
    scraper = TelemetryScraper(server.metrics_url, interval_s=0.02, extra_endpoints={},
                               clock_ns=lambda: next(clock), t0_ns=0)
    await scraper.start()
    await wait_for(lambda: scraper.scrapes >= 2)
    first = scraper.drain()
    scraper.set_t0(1_000_000)
    await wait_for(lambda: len(scraper.samples) >= 1)
    second = await scraper.stop()
    assert len(first) >= 2 and scraper.samples == second
    assert all(s.t_ns >= 0 for s in first) and all(s.t_ns < 0 for s in second)


def test_default_metrics_url() -> None:
    assert default_metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert default_metrics_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/metrics"
    assert default_metrics_url("http://h:8000/v1") == "http://h:8000/metrics"
    assert default_metrics_url("https://h/proxy/v1/") == "https://h/proxy/metrics"
    assert default_metrics_url("http://h:8000/v1/chat/completions") == "http://h:8000/metrics"
    assert default_metrics_url("http://h:8000/v10") == "http://h:8000/v10/metrics"
    assert info_endpoints("http://h:8000/")["props"] == "http://h:8000/props"


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError):
        TelemetryScraper("http://127.0.0.1:1/metrics", interval_s=0)


async def test_stopping_before_the_first_scrape_still_takes_one(metrics_server: Start) -> None:
    server = await metrics_server(MetricsPlan(metrics=vllm_page))
    scraper = TelemetryScraper(server.metrics_url, extra_endpoints={})
    await scraper.start()
    samples = await scraper.stop()   # no await point in between: the loop never ran
    assert scraper.available is True and len(samples) == 1
