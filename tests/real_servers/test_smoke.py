"""Smoke checks that both real servers behave as the load tester assumes: they list the served model,
stream a completion of exactly max_tokens tokens (with ignore_eos) and report it in usage, and expose
the Prometheus metrics the scraper reads."""

from __future__ import annotations

import json

import aiohttp
import pytest

from support.real_servers import ServerHandle

pytestmark = pytest.mark.real_server

SERVERS = ["vllm_server", "llamacpp_server"]
EXPECTED_METRICS = {
    "vllm_server": [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ],
    "llamacpp_server": [
        "llamacpp:requests_processing",
        "llamacpp:requests_deferred",
        "llamacpp:tokens_predicted_total",
        "llamacpp:prompt_tokens_total",
        "llamacpp:n_decode_total",
    ],
}
MAX_TOKENS = 24
TIMEOUT = aiohttp.ClientTimeout(total=120)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> ServerHandle:
    handle: ServerHandle = request.getfixturevalue(request.param)
    return handle


async def test_lists_the_served_model(server: ServerHandle) -> None:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.get(f"{server.url}/v1/models") as response:
        assert response.status == 200
        body = await response.json()
    assert server.model in [entry["id"] for entry in body["data"]]


async def test_streams_exactly_max_tokens(server: ServerHandle) -> None:
    payload = {
        "model": server.model,
        "prompt": "The quick brown fox jumps over the lazy dog",
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "temperature": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    texts: list[str] = []
    usages: list[dict[str, int]] = []
    saw_done = False
    url = f"{server.url}/v1/completions"
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.post(url, json=payload) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for raw_line in response.content:
            line = raw_line.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                saw_done = True
                continue
            event = json.loads(data)
            texts += [choice.get("text", "") for choice in event.get("choices", [])]
            if event.get("usage"):
                usages.append(event["usage"])
    assert saw_done, server.log_tail()
    assert usages, "no usage reported in the stream"
    assert usages[-1]["completion_tokens"] == MAX_TOKENS
    assert usages[-1]["prompt_tokens"] > 0
    assert "".join(texts), "streamed no text"


@pytest.mark.parametrize("server_name", SERVERS)
async def test_exposes_scheduler_metrics(server_name: str, request: pytest.FixtureRequest) -> None:
    handle: ServerHandle = request.getfixturevalue(server_name)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session, session.get(f"{handle.url}/metrics") as response:
        assert response.status == 200
        exposition = await response.text()
    names = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if not line.startswith("#")}
    missing = [name for name in EXPECTED_METRICS[server_name] if name not in names]
    assert not missing, f"missing metrics {missing}; got {sorted(names)}"
