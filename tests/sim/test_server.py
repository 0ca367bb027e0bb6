"""The twin's HTTP server over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import aiohttp
import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.driver.client import StreamingClient
from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import SimServerHandle, start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import TargetSpec

TINY = get_preset("tiny")


@pytest.fixture(scope="module")
def twin() -> Iterator[SimServerHandle]:
    with start_sim_server(TINY, speed=4.0, in_process=True) as handle:
        yield handle


def _events(raw: bytes) -> list[str]:
    assert raw.endswith(b"data: [DONE]\n\n")
    parts = raw.decode().split("\n\n")
    assert parts[-1] == ""
    assert all(p.startswith("data: ") for p in parts[:-1])
    return [p[len("data: "):] for p in parts[:-1]]


async def _post(url: str, path: str, body: dict[str, object]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.post(url + path, json=body) as resp:
        return resp.status, await resp.read()


async def test_streamed_completion_is_vllm_shaped_with_exact_usage(twin: SimServerHandle) -> None:
    prompt = "one two three four five six seven"
    status, raw = await _post(twin.url, "/v1/completions", {
        "model": "tiny", "prompt": prompt, "max_tokens": 40, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True}})
    assert status == 200
    events = _events(raw)
    chunks = [msgspec.json.decode(e) for e in events[:-1]]
    usage_chunk = chunks.pop()
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 7, "completion_tokens": 40, "total_tokens": 47}
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert len(text.split()) == 40
    assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    status, raw = await _post(twin.url, "/tokenize", {"model": "tiny", "prompt": prompt})
    tokenized = msgspec.json.decode(raw)
    assert tokenized["count"] == 7 == len(tokenized["tokens"])
    assert tokenized["max_model_len"] == TINY.max_model_len


async def test_streamed_chat_starts_with_the_role(twin: SimServerHandle) -> None:
    status, raw = await _post(twin.url, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5, "stream": True})
    assert status == 200
    chunks = [msgspec.json.decode(e) for e in _events(raw)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:])
    assert len(text.split()) == 5
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


@pytest.mark.parametrize("chat", [False, True])
async def test_non_streamed_answers_carry_usage(twin: SimServerHandle, chat: bool) -> None:
    if chat:
        body: dict[str, object] = {"messages": [{"role": "user", "content": "a b c"}], "max_tokens": 6}
        status, raw = await _post(twin.url, "/v1/chat/completions", body)
        text = msgspec.json.decode(raw)["choices"][0]["message"]["content"]
    else:
        status, raw = await _post(twin.url, "/v1/completions", {"prompt": "a b c", "max_tokens": 6})
        text = msgspec.json.decode(raw)["choices"][0]["text"]
    assert status == 200
    assert msgspec.json.decode(raw)["usage"]["completion_tokens"] == 6 == len(text.split())


@pytest.mark.parametrize(("body", "status"), [
    ({"prompt": "a b", "max_tokens": 0}, 400),
    ({"prompt": " ".join(["w"] * 9000), "max_tokens": 10}, 400),
    ({"prompt": "a", "max_tokens": "ten"}, 400),
    ({"prompt": 42, "max_tokens": 3}, 400),
    ({"model": "other", "prompt": "a", "max_tokens": 3}, 404),
])
async def test_bad_requests_get_openai_error_bodies(twin: SimServerHandle, body: dict[str, object],
                                                    status: int) -> None:
    got, raw = await _post(twin.url, "/v1/completions", body)
    assert got == status
    error = msgspec.json.decode(raw)["error"]
    assert set(error) == {"message", "type", "code"} and error["code"] == status and error["message"]


@pytest.mark.parametrize("config", [TINY.with_overrides(max_num_seqs=0), TINY.with_overrides(kv_tokens=64)])
async def test_requests_that_can_never_run_are_rejected_not_hung(config: EngineConfig) -> None:
    with start_sim_server(config, in_process=True) as handle:
        status, raw = await asyncio.wait_for(_post(handle.url, "/v1/completions", {
            "prompt": " ".join(["w"] * 100), "max_tokens": 10, "stream": True}), timeout=10)
    assert status == 400 and msgspec.json.decode(raw)["error"]["type"] == "BadRequestError"


@pytest.mark.slow
async def test_metrics_show_the_cap_and_parse_back() -> None:
    config = TINY.with_overrides(max_num_seqs=4)
    with start_sim_server(config, in_process=True) as handle:
        async with aiohttp.ClientSession() as session:
            async def one() -> int:
                async with session.post(handle.url + "/v1/completions",
                                        json={"prompt": "a b c", "max_tokens": 150, "stream": True}) as resp:
                    await resp.read()
                    return resp.status

            load = [asyncio.create_task(one()) for _ in range(12)]
            seen: tuple[float, float] | None = None
            for _ in range(200):
                async with session.get(handle.url + "/metrics") as resp:
                    families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
                running = families["vllm:num_requests_running"].samples[0].value
                waiting = families["vllm:num_requests_waiting"].samples[0].value
                if (running, waiting) == (4, 8):
                    seen = (running, waiting)
                    break
                await asyncio.sleep(0.005)
            assert await asyncio.gather(*load) == [200] * 12
            async with session.get(handle.url + "/metrics") as resp:
                final = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    assert seen == (4, 8)
    assert final["vllm:generation_tokens"].samples[0].value == 12 * 150
    assert final["vllm:prompt_tokens"].samples[0].value == 12 * 3
    assert final["vllm:generation_tokens"].samples[0].name == "vllm:generation_tokens_total"
    assert final["vllm:num_preemptions"].samples[0].value == 0
    assert final["vllm:kv_cache_usage_perc"].samples[0].value == 0
    info = final["vllm:cache_config_info"].samples[0].labels
    assert info["block_size"] == "16" and info["num_gpu_blocks"] == str(config.num_gpu_blocks)
    ttft = final["vllm:time_to_first_token_seconds"]
    count = next(s for s in ttft.samples if s.name.endswith("_count"))
    assert count.value == 12 and count.labels == {"model_name": "tiny", "engine": "0"}
    itl_count = next(s for s in final["vllm:inter_token_latency_seconds"].samples if s.name.endswith("_count"))
    assert itl_count.value == 12 * 149


async def test_no_metrics_answers_404() -> None:
    with start_sim_server(TINY, metrics=False, in_process=True) as handle:
        async with aiohttp.ClientSession() as session, session.get(handle.url + "/metrics") as resp:
            assert resp.status == 404


async def test_reject_when_waiting_answers_429() -> None:
    config = TINY.with_overrides(max_num_seqs=1)
    with start_sim_server(config, reject_when_waiting=1, in_process=True) as handle:
        results = await asyncio.gather(*[
            _post(handle.url, "/v1/completions", {"prompt": "a", "max_tokens": 50}) for _ in range(8)])
    statuses = sorted(s for s, _ in results)
    assert 429 in statuses and 200 in statuses
    body = next(raw for s, raw in results if s == 429)
    assert msgspec.json.decode(body)["error"]["code"] == 429


def test_port_in_use_is_a_config_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for in_process in (True, False):
            with pytest.raises(ConfigError, match=str(port)):
                start_sim_server(TINY, port=port, in_process=in_process)


async def test_project_client_against_the_twin_in_a_child_process() -> None:
    with start_sim_server(TINY, speed=2.0) as handle:
        target = TargetSpec(url=handle.url, model="tiny")
        async with StreamingClient(target, concurrency=4) as client:
            records = await asyncio.gather(*[
                client.send(index=i, prompt="alpha beta gamma", prompt_tokens=3, max_tokens=32,
                            scheduled_ns=0) for i in range(4)])
        async with aiohttp.ClientSession() as session:
            for path in ("/health", "/version", "/v1/models"):
                async with session.get(handle.url + path) as resp:
                    assert resp.status == 200
    for record in records:
        assert record.ok, record.error_detail
        assert record.output_tokens == 32 and record.prompt_tokens == 3
        assert sum(record.chunk_tokens) == 32
