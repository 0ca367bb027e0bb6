"""Fault injection: the ``--faults`` parser, the seeded draws, and each fault over real HTTP."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator

import aiohttp
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.errors import ConfigError
from plateau_bench.sim.embed import SimServerHandle, start_sim_server
from plateau_bench.sim.faults import FAULT_NAMES, FaultPicker, FaultSpec, parse_faults
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.server import SimServer

from support.loading import plateau

TINY = get_preset("tiny")
MAX_TOKENS = 40


# -- the spec ----------------------------------------------------------------------------------
def test_the_documented_spec_parses() -> None:
    spec = parse_faults("hang=0.1,truncate=0.05,reset=0.02,malformed=0.02,http_500=0.05,http_429=0.05,"
                        "slow_headers=0.02")
    assert spec == FaultSpec(hang=0.1, truncate=0.05, reset=0.02, malformed=0.02, http_500=0.05, http_429=0.05,
                             slow_headers=0.02)
    assert parse_faults(" slow_headers = 1 , slow_headers_s=0.5, retry_after_s=7 ") == FaultSpec(
        slow_headers=1.0, slow_headers_s=0.5, retry_after_s=7)
    assert not parse_faults("").any


@pytest.mark.parametrize(("text", "message"), [
    ("hang=0.1,explode=0.2", "unknown fault 'explode'"),
    ("hang=1.5", "hang=1.5 is not a probability in [0, 1]"),
    ("reset=-0.1", "reset=-0.1 is not a probability"),
    ("truncate=nan", "truncate=nan is not a probability"),
    ("hang=0.6,reset=0.5", "the probabilities sum to 1.1, more than 1"),
    ("hang", "'hang' is not NAME=VALUE"),
    ("hang=", "'hang=' is not NAME=VALUE"),
    ("hang=lots", "hang='lots' is not a number"),
    ("hang=0.1,hang=0.2", "hang is given twice"),
    ("retry_after_s=1.5", "retry_after_s='1.5' is not a whole number"),
    ("slow_headers_s=-1", "slow_headers_s=-1 must be in [0, 3600]"),
])
def test_bad_specs_are_one_line_config_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_faults(text)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("--faults: ")


@given(st.lists(st.floats(0, 1), min_size=len(FAULT_NAMES), max_size=len(FAULT_NAMES)))
def test_valid_specs_round_trip_through_their_text(ps: list[float]) -> None:
    total = sum(ps)
    ps = [p / total for p in ps] if total > 1 else ps
    spec = FaultSpec(**dict(zip(FAULT_NAMES, ps, strict=True)))  # type: ignore[arg-type]
    spec.validate()
    again = parse_faults(spec.spec())
    assert again == spec


def test_draws_follow_the_probabilities_and_repeat_per_seed() -> None:
    spec = parse_faults("hang=0.1,truncate=0.2,http_429=0.3")
    first = FaultPicker(spec, seed=3)
    seq = [first.draw(100) for _ in range(4000)]
    again = FaultPicker(spec, seed=3)
    assert [again.draw(100) for _ in range(4000)] == seq
    other = FaultPicker(spec, seed=4)
    assert [other.draw(100) for _ in range(4000)] != seq
    counts = Counter(f.name if f is not None else None for f in seq)
    for name, p in (("hang", 0.1), ("truncate", 0.2), ("http_429", 0.3), (None, 0.4)):
        assert counts[name] / len(seq) == pytest.approx(p, abs=0.03)
    assert all(0 <= f.at < 100 for f in seq if f is not None)


# -- over HTTP ---------------------------------------------------------------------------------
def _server(handle: SimServerHandle) -> SimServer:
    server = handle._stopper.server  # type: ignore[attr-defined]
    assert isinstance(server, SimServer)
    return server


@pytest.fixture
def faulty(request: pytest.FixtureRequest) -> Iterator[SimServerHandle]:
    spec: FaultSpec = request.param
    with start_sim_server(TINY, speed=4.0, in_process=True, faults=spec) as handle:
        yield handle


def _only(name: str, **params: float) -> FaultSpec:
    return FaultSpec(**{name: 1.0}, **params)  # type: ignore[arg-type]


async def _post(session: aiohttp.ClientSession, url: str, *, stream: bool = True,
                max_tokens: int = MAX_TOKENS) -> aiohttp.ClientResponse:
    return await session.post(url + "/v1/completions", json={
        "prompt": "a b c", "max_tokens": max_tokens, "stream": stream, "stream_options": {"include_usage": True}})


def _events(raw: bytes) -> list[bytes]:
    return [e[len(b"data: "):] for e in raw.split(b"\n\n") if e]


def _tokens(events: list[bytes]) -> int:
    chunks = [msgspec.json.decode(e) for e in events if e != b"[DONE]"]
    return sum(len(c["choices"][0]["text"].split()) for c in chunks if c["choices"])


async def _settled(server: SimServer) -> None:
    """Wait until the server holds no stream and the engine is empty."""
    for _ in range(200):
        state = server.engine.state()
        if not server._streams and state.running == 0 and state.waiting == 0:
            break
        await asyncio.sleep(0.01)
    state = server.engine.state()
    assert (len(server._streams), state.running, state.waiting, state.kv_blocks_used) == (0, 0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("faulty", [_only("hang")], indirect=True)
async def test_hang_sends_headers_then_nothing_until_the_client_leaves(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        resp = await _post(session, faulty.url)
        assert resp.status == 200
        got = b""
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(1.0):
                async for chunk in resp.content.iter_any():
                    got += chunk
        assert b"[DONE]" not in got and _tokens(_events(got)) < MAX_TOKENS
        # The hung request gave its engine slot back at once, though its client still waits.
        assert _server(faulty).engine.state().running == 0
        assert len(_server(faulty)._streams) == 1
        resp.close()
    await _settled(_server(faulty))


@pytest.mark.parametrize("faulty", [_only("truncate")], indirect=True)
async def test_truncate_ends_cleanly_without_done_or_finish_reason(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        async with await _post(session, faulty.url) as resp:
            assert resp.status == 200
            events = _events(await resp.read())   # a clean end: no error reading it
        assert b"[DONE]" not in events
        chunks = [msgspec.json.decode(e) for e in events]
        assert all(c["choices"] and c["choices"][0]["finish_reason"] is None for c in chunks)
        assert _tokens(events) < MAX_TOKENS
        async with await _post(session, faulty.url, stream=False) as resp:
            body = msgspec.json.decode(await resp.read())
        assert body["choices"][0]["finish_reason"] is None
        assert body["usage"]["completion_tokens"] < MAX_TOKENS
    await _settled(_server(faulty))


@pytest.mark.parametrize("faulty", [_only("reset")], indirect=True)
async def test_reset_drops_the_connection_mid_stream(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        for stream in (True, False):
            got = b""
            with pytest.raises(aiohttp.ClientError) as info:
                async with await _post(session, faulty.url, stream=stream) as resp:
                    async for chunk in resp.content.iter_any():
                        got += chunk
            assert "reset" in repr(info.value).lower()
            assert b"[DONE]" not in got
    await _settled(_server(faulty))


@pytest.mark.parametrize("faulty", [_only("malformed")], indirect=True)
async def test_malformed_sends_one_event_that_is_not_json(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        async with await _post(session, faulty.url) as resp:
            events = _events(await resp.read())
        bad = []
        for e in events[:-1]:
            try:
                msgspec.json.decode(e)
            except msgspec.DecodeError:
                bad.append(e)
        assert len(bad) == 1 and events[-1] == b"[DONE]"
        assert _tokens([e for e in events if e not in bad]) == MAX_TOKENS   # nothing else is lost
        async with await _post(session, faulty.url, stream=False) as resp:
            with pytest.raises(msgspec.DecodeError):
                msgspec.json.decode(await resp.read())
    await _settled(_server(faulty))


@pytest.mark.parametrize("faulty", [_only("http_500"), _only("http_429", retry_after_s=7)], indirect=True)
async def test_http_errors_never_reach_the_engine(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session, await _post(session, faulty.url) as resp:
        error = msgspec.json.decode(await resp.read())["error"]
        assert resp.status == error["code"] in (429, 500)
        if resp.status == 429:
            assert resp.headers["Retry-After"] == "7"
            assert error["type"] == "RateLimitError"
        else:
            assert "Retry-After" not in resp.headers
    assert _server(faulty).engine.state().prompt_tokens_total == 0


@pytest.mark.parametrize("faulty", [_only("slow_headers", slow_headers_s=0.6)], indirect=True)
async def test_slow_headers_delay_the_response_then_serve_it(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        async with await _post(session, faulty.url) as resp:
            headers_s = time.monotonic() - start
            events = _events(await resp.read())
    assert headers_s >= 0.6
    assert events[-1] == b"[DONE]" and _tokens(events) == MAX_TOKENS


MIXED = parse_faults("hang=0.1,truncate=0.1,reset=0.1,malformed=0.1,http_500=0.1,http_429=0.1,"
                     "slow_headers=0.1,slow_headers_s=0.05")


async def _outcome(session: aiohttp.ClientSession, url: str, max_tokens: int) -> str:
    try:
        async with asyncio.timeout(1.5):
            async with await _post(session, url, max_tokens=max_tokens) as resp:
                raw = await resp.read()
    except TimeoutError:
        return "hung"
    except aiohttp.ClientError:
        return "reset"
    if resp.status != 200:
        return f"http_{resp.status}"
    return "done" if raw.endswith(b"data: [DONE]\n\n") else "truncated"


@pytest.mark.slow
@pytest.mark.parametrize("faulty", [MIXED], indirect=True)
async def test_faulty_requests_leave_the_engine_accounting_clean(faulty: SimServerHandle) -> None:
    async with aiohttp.ClientSession() as session:
        outcomes = await asyncio.gather(*[_outcome(session, faulty.url, 20 + i % 30) for i in range(60)])
        async with session.get(faulty.url + "/metrics") as resp:
            families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    assert {"hung", "reset", "http_500", "http_429", "truncated", "done"} <= set(outcomes)
    await _settled(_server(faulty))
    assert families["vllm:num_requests_running"].samples[0].value == 0


async def test_the_same_seed_gives_the_same_faults_in_order() -> None:
    runs = []
    for _ in range(2):
        with start_sim_server(TINY, speed=8.0, in_process=True, faults=MIXED, faults_seed=11) as handle:
            async with aiohttp.ClientSession() as session:
                runs.append([await _outcome(session, handle.url, 8) for _ in range(12)])
    assert runs[0] == runs[1] and len(set(runs[0])) > 2


async def test_faults_reach_the_child_process() -> None:
    with start_sim_server(TINY, faults=_only("http_429", retry_after_s=3)) as handle:
        async with aiohttp.ClientSession() as session, await _post(session, handle.url) as resp:
            assert resp.status == 429 and resp.headers["Retry-After"] == "3"


@pytest.mark.parametrize(("faults", "message"), [
    ("explode=1", "--faults: unknown fault 'explode'"),
    ("hang=0.7,reset=0.7", "--faults: the probabilities sum to 1.4"),
])
def test_serve_sim_refuses_a_bad_spec_in_one_line(faults: str, message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["serve-sim", "--faults", faults], capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1
