"""The streaming client against the scripted server over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import itertools
import statistics
import time
from typing import TYPE_CHECKING

import msgspec
import pytest

from plateau_bench.driver import client as client_module
from plateau_bench.driver.client import StreamingClient
from plateau_bench.errors import ErrorClass
from plateau_bench.records import (
    TOKEN_SOURCE_ESTIMATE,
    TOKEN_SOURCE_TOKENIZER,
    TOKEN_SOURCE_USAGE,
    RequestRecord,
)
from plateau_bench.spec import TargetSpec

if TYPE_CHECKING:
    from conftest import ScriptedServer

MS = 1_000_000
SECRET = "sk-test-0123456789"


@pytest.fixture(autouse=True, params=["read-hook", "readany"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs over both ways of reading the body (see client._read_stream)."""
    monkeypatch.setattr(client_module, "_USE_READ_HOOK", request.param == "read-hook")
    return str(request.param)


def target(url: str, **kw: object) -> TargetSpec:
    return TargetSpec(url=url, model="tiny", **kw)  # type: ignore[arg-type]


async def send_many(spec: TargetSpec, n: int, max_tokens: int, **client_kw: object) -> list[RequestRecord]:
    t0 = time.monotonic_ns()
    async with StreamingClient(spec, concurrency=n, t0_ns=t0, **client_kw) as client:  # type: ignore[arg-type]
        return list(await asyncio.gather(*(
            client.send(index=i, prompt=f"hello {i}", prompt_tokens=2, max_tokens=max_tokens,
                        scheduled_ns=0, worker=i)
            for i in range(n)
        )))


async def send_one(spec: TargetSpec, max_tokens: int = 8, **client_kw: object) -> RequestRecord:
    return (await send_many(spec, 1, max_tokens, **client_kw))[0]


# --- timing -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
async def test_chunk_times_match_the_servers_send_times(server: ScriptedServer, endpoint: str) -> None:
    """TTFT and ITL means within 2 ms of what the server did (its own timestamps, same clock).

    Requests go one after another, so one scheduling hiccup of this shared machine touches one
    sample rather than all of them at once.
    """
    server.plan.ttft_s, server.plan.itl_s = 0.05, 0.01
    t0 = time.monotonic_ns()
    records = []
    async with StreamingClient(target(server.url, endpoint=endpoint), concurrency=1, t0_ns=t0) as client:
        for i in range(6):
            records.append(await client.send(index=i, prompt="p", prompt_tokens=1, max_tokens=12,
                                             scheduled_ns=0))
    assert len(server.served) == 6
    ttft_client, ttft_server, itl_client, itl_server, delays = [], [], [], [], []
    for record, served in zip(records, server.served, strict=True):
        assert record.ok, record.error_detail
        sent_abs = t0 + record.sent_ns
        client_abs = [t0 + t for t in record.chunk_ns]
        assert len(client_abs) == len(served.chunk_sent_ns) == 12
        # A chunk is read after the server wrote it, never before.
        assert all(c >= s for c, s in zip(client_abs, served.chunk_sent_ns, strict=True))
        delays += [c - s for c, s in zip(client_abs, served.chunk_sent_ns, strict=True)]
        ttft_client.append(record.first_token_ns - record.sent_ns)  # type: ignore[operator]
        ttft_server.append(served.chunk_sent_ns[0] - sent_abs)
        itl_client += [b - a for a, b in itertools.pairwise(record.chunk_ns)]
        itl_server += [b - a for a, b in itertools.pairwise(served.chunk_sent_ns)]
    assert statistics.mean(ttft_client) / MS == pytest.approx(statistics.mean(ttft_server) / MS, abs=2)
    assert statistics.mean(itl_client) / MS == pytest.approx(statistics.mean(itl_server) / MS, abs=2)
    assert statistics.mean(delays) / MS < 2
    # And the server did what it was told, so the comparison means something.
    assert statistics.mean(ttft_server) / MS >= 50
    assert statistics.mean(itl_server) / MS >= 10


async def test_the_read_hook_sees_every_body_piece(
    server: ScriptedServer, read_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces: list[int] = []
    original = client_module._TimedStreamReader.feed_data

    def counting(self: client_module._TimedStreamReader, data: bytes, size: int = 0) -> bool:
        pieces.append(len(data))
        return original(self, data, size)

    monkeypatch.setattr(client_module._TimedStreamReader, "feed_data", counting)
    server.plan.itl_s = 0.005
    record = await send_one(target(server.url), max_tokens=6)
    assert record.ok and record.output_tokens == 6
    # one piece per event written apart in time (6 tokens, then usage and [DONE] may coalesce)
    assert (len(pieces) >= 7) == (read_path == "read-hook")
    assert not client_module._READ_SINKS  # nothing left behind


async def test_a_record_keeps_the_tokens_it_asked_for_when_the_server_stops_short(server: ScriptedServer) -> None:
    server.plan.stream_tokens = 5   # then finish_reason and [DONE], as a server at its context limit ends
    record = await send_one(target(server.url), max_tokens=12)
    assert (record.error, record.output_tokens, record.asked_tokens) == (None, 5, 12)


async def test_record_times_are_ordered_and_relative_to_t0(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.02, 0.002
    record = await send_one(target(server.url), max_tokens=5)
    assert record.sent_ns >= 0
    assert record.first_token_ns == record.chunk_ns[0]
    assert record.sent_ns < record.chunk_ns[0] <= record.chunk_ns[-1] <= record.end_ns
    assert record.chunk_ns == sorted(record.chunk_ns)


async def test_requests_run_concurrently_up_to_the_pool_size(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.2, 0.001
    records = await send_many(target(server.url), 16, 2)
    assert all(r.ok for r in records)
    first_done = min(r.end_ns for r in records)
    received = sorted(s.received_ns for s in server.served)
    # every request reached the server before any finished: none waited for a connection
    assert received[-1] - received[0] < first_done - min(r.sent_ns for r in records)


async def test_connect_time_is_recorded_for_new_and_pooled_connections(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.05, 0.001
    t0 = time.monotonic_ns()
    async with StreamingClient(target(server.url), concurrency=1, t0_ns=t0) as client:
        records = [await client.send(index=i, prompt="p", prompt_tokens=1, max_tokens=2, scheduled_ns=0)
                   for i in range(3)]
    for record in records:
        assert record.ok and record.connect_ns is not None
        assert 0 <= record.connect_ns < record.first_token_ns - record.sent_ns  # type: ignore[operator]
        assert record.connect_ns < 50 * MS  # on 127.0.0.1, with or without a pooled connection


async def test_waiting_for_a_pool_slot_counts_as_connect_time(server: ScriptedServer) -> None:
    """Two requests, one connection: the second gets it once the first has ended."""
    server.plan.ttft_s, server.plan.itl_s = 0.2, 0.001
    t0 = time.monotonic_ns()
    async with StreamingClient(target(server.url), concurrency=1, t0_ns=t0) as client:
        first, second = await asyncio.gather(*(
            client.send(index=i, prompt="p", prompt_tokens=1, max_tokens=2, scheduled_ns=0) for i in range(2)))
    assert first.ok and second.ok
    assert first.connect_ns is not None and first.connect_ns < 100 * MS
    assert second.connect_ns is not None
    assert second.sent_ns + second.connect_ns >= first.end_ns
    assert second.connect_ns >= 150 * MS


async def test_no_connection_no_connect_time(refused_url: str) -> None:
    record = await send_one(target(refused_url))
    assert record.error == ErrorClass.CONNECT.value and record.connect_ns is None


# --- the request ------------------------------------------------------------------------------


async def test_completions_request_body_and_headers(server: ScriptedServer) -> None:
    spec = target(server.url, api_key=SECRET, headers={"X-Team": "perf"})
    record = await send_one(spec, max_tokens=3)
    served = server.served[0]
    assert record.ok
    assert served.path == "/v1/completions"
    assert served.body == {
        "model": "tiny", "prompt": "hello 0", "max_tokens": 3, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert served.headers["Authorization"] == f"Bearer {SECRET}"
    assert served.headers["X-Team"] == "perf"


async def test_chat_request_uses_messages(server: ScriptedServer) -> None:
    await send_one(target(server.url + "/v1/", endpoint="chat"), max_tokens=3)
    served = server.served[0]
    assert served.path == "/v1/chat/completions"
    assert served.body["messages"] == [{"role": "user", "content": "hello 0"}]
    assert "prompt" not in served.body


# --- token counts -----------------------------------------------------------------------------


async def test_usage_gives_exact_counts(server: ScriptedServer) -> None:
    server.plan.itl_s = 0.001
    record = await send_one(target(server.url), max_tokens=12)
    assert (record.output_tokens, record.token_source) == (12, TOKEN_SOURCE_USAGE)
    assert record.chunk_tokens == [1] * 12
    assert record.prompt_tokens == 7  # the server's count wins over the caller's estimate


async def test_multi_token_chunks_are_attributed_by_text_length(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.tokens_per_chunk = 0.001, 4
    record = await send_one(target(server.url), max_tokens=18)
    assert record.output_tokens == 18
    assert record.chunk_tokens == server.served[0].chunk_tokens == [4, 4, 4, 4, 2]


async def test_held_back_tokens_without_continuous_usage(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.held_back_every = 0.001, 5
    record = await send_one(target(server.url), max_tokens=20)
    assert record.output_tokens == 20
    assert len(record.chunk_ns) == 17
    assert record.chunk_tokens == server.served[0].chunk_tokens


async def test_continuous_usage_deltas_give_exact_chunk_tokens(server: ScriptedServer) -> None:
    plan = server.plan
    plan.itl_s, plan.held_back_every, plan.continuous_usage, plan.tokens_per_chunk = 0.001, 3, True, 2
    record = await send_one(target(server.url), max_tokens=21)
    assert record.output_tokens == 21
    assert record.chunk_tokens == server.served[0].chunk_tokens
    assert sum(record.chunk_tokens) == 21


async def test_without_usage_the_tokenizer_counts(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.usage = 0.001, False
    record = await send_one(target(server.url), max_tokens=9, count_tokens=lambda s: len(s.split()))
    assert (record.output_tokens, record.token_source) == (9, TOKEN_SOURCE_TOKENIZER)
    assert record.prompt_tokens == 2  # no usage: the caller's count stays


async def test_without_usage_or_tokenizer_chunks_are_counted(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.usage, server.plan.tokens_per_chunk = 0.001, False, 3
    record = await send_one(target(server.url), max_tokens=9)
    assert (record.output_tokens, record.token_source) == (3, TOKEN_SOURCE_ESTIMATE)


# --- stream shapes ----------------------------------------------------------------------------


async def test_role_only_first_chunk_is_not_the_first_token(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.role_gap_s = 0.002, 0.05
    t0 = time.monotonic_ns()
    async with StreamingClient(target(server.url, endpoint="chat"), concurrency=1, t0_ns=t0) as client:
        record = await client.send(index=0, prompt="p", prompt_tokens=1, max_tokens=4, scheduled_ns=0)
    served = server.served[0]
    assert record.ok and len(record.chunk_ns) == 4
    assert served.role_sent_ns is not None
    assert record.first_token_ns == record.chunk_ns[0]
    # the first token was read after the first content chunk was written, 50 ms after the role chunk
    assert t0 + record.first_token_ns >= served.chunk_sent_ns[0] >= served.role_sent_ns + 50 * MS


async def test_reasoning_content_is_kept_apart(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.reasoning_tokens = 0.002, 3
    record = await send_one(target(server.url, endpoint="chat"), max_tokens=6)
    assert record.ok and record.output_tokens == 6
    assert record.first_reasoning_ns == record.first_token_ns == record.chunk_ns[0]
    assert len(record.chunk_ns) == 6


async def test_keepalive_comments_and_crlf(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.keepalive, server.plan.crlf = 0.001, True, True
    record = await send_one(target(server.url), max_tokens=7)
    assert record.ok
    assert (record.output_tokens, len(record.chunk_ns)) == (7, 7)


async def test_missing_done_with_usage_is_accepted(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.send_done = 0.001, False
    record = await send_one(target(server.url), max_tokens=4)
    assert record.ok and record.output_tokens == 4


async def test_no_end_marker_but_every_token_is_accepted(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.send_done, server.plan.finish_reason = 0.001, False, False
    record = await send_one(target(server.url), max_tokens=4)
    assert record.ok and record.output_tokens == 4 and not record.token_mismatch


async def test_finish_reason_without_done_is_complete_even_when_short(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.send_done, server.plan.stream_tokens = 0.001, False, 3
    record = await send_one(target(server.url), max_tokens=8)
    assert record.ok and record.output_tokens == 3


# --- truncated streams and refuted usage claims --------------------------------------------------


async def test_clean_end_short_of_max_tokens_is_truncated(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.end_after = 0.001, 3
    record = await send_one(target(server.url), max_tokens=10)
    assert record.error == ErrorClass.TRUNCATED.value and not record.ok
    assert record.http_status == 200
    assert record.error_detail == ("stream ended after 3 of 10 tokens without [DONE] or finish_reason "
                                   "(the body ended)")
    assert (record.output_tokens, record.chunk_tokens, len(record.chunk_ns)) == (3, [1, 1, 1], 3)
    assert record.first_token_ns == record.chunk_ns[0] and record.end_ns >= record.chunk_ns[-1]


async def test_connection_closed_mid_stream_is_truncated(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.cut_after = 0.001, 2
    record = await send_one(target(server.url), max_tokens=10)
    assert record.error == ErrorClass.TRUNCATED.value
    assert record.error_detail is not None and record.error_detail.endswith("(connection closed)")
    assert (record.output_tokens, len(record.chunk_ns)) == (2, 2)


async def test_connection_reset_mid_stream_is_truncated(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.reset_after = 0.001, 4
    record = await send_one(target(server.url), max_tokens=10)
    assert record.error == ErrorClass.TRUNCATED.value
    assert record.error_detail is not None and "after 4 of 10 tokens" in record.error_detail
    assert "reset" in record.error_detail
    assert (record.output_tokens, len(record.chunk_ns)) == (4, 4)


async def test_malformed_event_mid_stream_keeps_the_tokens(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.garbage_after = 0.001, 3
    record = await send_one(target(server.url), max_tokens=10)
    assert record.error == ErrorClass.PROTOCOL.value
    assert record.error_detail is not None and record.error_detail.startswith("undecodable event")
    assert (record.output_tokens, len(record.chunk_ns)) == (3, 3)


async def test_a_usage_claim_the_stream_did_not_deliver_is_flagged(server: ScriptedServer) -> None:
    """No [DONE], no finish_reason, 3 tokens streamed of 8 asked, usage claims 8: truncated, 3 kept."""
    plan = server.plan
    plan.itl_s, plan.send_done, plan.finish_reason, plan.stream_tokens, plan.usage_claim = 0.001, False, False, 3, 8
    record = await send_one(target(server.url), max_tokens=8)
    assert record.error == ErrorClass.TRUNCATED.value
    assert (record.output_tokens, record.usage_tokens, record.token_mismatch) == (3, 8, True)
    assert sum(record.chunk_tokens) == 3


async def test_a_claim_above_the_running_count_is_flagged(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.continuous_usage, server.plan.usage_claim = 0.001, True, 9
    record = await send_one(target(server.url), max_tokens=5)
    assert record.ok  # complete: [DONE] and finish_reason, all 5 tokens streamed
    assert (record.output_tokens, record.usage_tokens, record.token_mismatch) == (5, 9, True)
    assert record.chunk_tokens == [1] * 5
    encoded = msgspec.json.decode(msgspec.json.encode(record), type=RequestRecord)
    assert encoded.token_mismatch and encoded == record


async def test_usage_that_agrees_is_not_flagged(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.tokens_per_chunk = 0.001, 3
    record = await send_one(target(server.url), max_tokens=9)
    assert record.ok and record.output_tokens == 9 and len(record.chunk_ns) == 3
    assert record.usage_tokens is None and not record.token_mismatch


# --- every error class ------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "kind"), [(429, ErrorClass.HTTP_429), (400, ErrorClass.HTTP_4XX),
                                              (500, ErrorClass.HTTP_5XX), (503, ErrorClass.HTTP_5XX)])
async def test_http_errors(server: ScriptedServer, status: int, kind: ErrorClass) -> None:
    server.plan.status = status
    record = await send_one(target(server.url))
    assert (record.error, record.http_status) == (kind.value, status)
    assert record.error_detail is not None and record.error_detail.startswith(f"HTTP {status}: ")


async def test_rejected_key_is_never_echoed(server: ScriptedServer) -> None:
    server.plan.api_key, server.plan.error_echo_auth = "the-right-key", True
    record = await send_one(target(server.url, api_key=SECRET, headers={"X-Api-Key": "hdr-secret-42"}))
    assert record.error == ErrorClass.HTTP_4XX.value
    assert record.error_detail == "HTTP 401: bad key in Bearer ***"
    encoded = msgspec.json.encode(record).decode()
    assert SECRET not in encoded and "hdr-secret-42" not in encoded


@pytest.mark.parametrize(("name", "value", "named"), [
    ("Authorization", "Token tok-abc-123", ()),       # echoed whole, and the credential alone
    ("X-Org-Pass", "org-pass-777", ("x-org-pass",)),  # secret because the user said so
    ("Cookie", "sid=cookie-999", ()),
])
async def test_echoed_secret_headers_are_redacted(
    server: ScriptedServer, name: str, value: str, named: tuple[str, ...]
) -> None:
    server.plan.status, server.plan.echo_header = 500, name
    spec = target(server.url, headers={name: value}, secret_headers=named)
    record = await send_one(spec)
    assert record.error == ErrorClass.HTTP_5XX.value
    assert record.error_detail == "HTTP 500: engine failed for ***"
    credential = value.split()[-1]
    assert credential not in msgspec.json.encode(record).decode()


async def test_url_credentials_go_as_basic_auth_and_an_api_key_wins(server: ScriptedServer) -> None:
    url = server.url.replace("http://", "http://bench:pw-1@")
    assert (await send_one(target(url))).ok
    assert server.served[-1].headers["Authorization"] == "Basic " + base64.b64encode(b"bench:pw-1").decode()
    assert (await send_one(target(url, api_key=SECRET))).ok  # aiohttp refuses both: no crash here
    assert server.served[-1].headers["Authorization"] == f"Bearer {SECRET}"


async def test_url_credentials_never_reach_the_record(server: ScriptedServer) -> None:
    """aiohttp turns URL userinfo into Basic auth; a server echoing it is redacted too."""
    server.plan.status, server.plan.echo_header = 503, "Authorization"
    url = server.url.replace("http://", "http://bench-user:url-pass-55@")
    record = await send_one(target(url))
    assert record.error_detail == "HTTP 503: engine failed for Basic ***"
    assert "url-pass-55" not in msgspec.json.encode(record).decode()


async def test_connection_refused(refused_url: str) -> None:
    record = await send_one(target(refused_url, api_key=SECRET))
    assert record.error == ErrorClass.CONNECT.value
    assert record.error_detail == "connection refused"
    assert record.http_status is None and record.first_token_ns is None


@pytest.mark.slow
async def test_timeout_before_the_first_token(server: ScriptedServer) -> None:
    server.plan.ttft_s = 1.0
    record = await send_one(target(server.url, timeout_s=0.2))
    assert record.error == ErrorClass.TIMEOUT.value
    assert record.error_detail is not None and "0.2 s" in record.error_detail


async def test_timeout_while_streaming_keeps_the_tokens(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.01, 0.1
    record = await send_one(target(server.url, timeout_s=0.35), max_tokens=20)
    assert record.error == ErrorClass.TIMEOUT.value
    assert 1 <= len(record.chunk_ns) < 20
    assert record.output_tokens == len(record.chunk_ns)


async def test_error_event_mid_stream(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.error_after = 0.001, 3
    record = await send_one(target(server.url), max_tokens=10)
    assert record.error == ErrorClass.SERVER_ERROR_EVENT.value
    assert record.error_detail == "out of KV cache"
    assert record.http_status == 200
    assert len(record.chunk_ns) == 3


async def test_empty_stream_is_a_protocol_error(server: ScriptedServer) -> None:
    server.plan.no_events = True
    record = await send_one(target(server.url))
    assert record.error == ErrorClass.PROTOCOL.value
    assert record.error_detail == "stream ended without [DONE], usage or tokens (no event; text/event-stream)"


async def test_a_stopped_stream_does_not_poison_the_pool(server: ScriptedServer) -> None:
    server.plan.itl_s, server.plan.error_after, server.plan.stream_on_after_error = 0.002, 2, True
    async with StreamingClient(target(server.url), concurrency=1) as client:
        first = await client.send(index=0, prompt="p", prompt_tokens=1, max_tokens=30, scheduled_ns=0)
        second = await client.send(index=1, prompt="p", prompt_tokens=1, max_tokens=5, scheduled_ns=0)
    assert first.error == ErrorClass.SERVER_ERROR_EVENT.value and len(first.chunk_ns) == 2
    assert second.ok and second.output_tokens == 5 and len(second.chunk_ns) == 5


async def test_a_hung_request_keeps_what_it_streamed(server: ScriptedServer) -> None:
    """The load loop's hung record, taken while the request is still in flight, then cancelled."""
    server.plan.ttft_s, server.plan.itl_s = 0.01, 0.05
    t0 = time.monotonic_ns()
    async with StreamingClient(target(server.url, api_key=SECRET), concurrency=2, t0_ns=t0) as client:
        assert client.partial_record(7, error=ErrorClass.HUNG, detail="x") is None
        task = asyncio.create_task(client.send(index=7, prompt="p", prompt_tokens=3, max_tokens=100,
                                               scheduled_ns=5, worker=2))
        await asyncio.sleep(0.2)
        record = client.partial_record(7, error=ErrorClass.HUNG, detail=f"still in flight ({SECRET})")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.partial_record(7, error=ErrorClass.HUNG, detail="x") is None
    assert record is not None
    assert (record.index, record.worker, record.scheduled_ns, record.http_status) == (7, 2, 5, 200)
    assert record.error == "hung" and record.error_detail == "still in flight (***)"
    assert 1 <= record.output_tokens == len(record.chunk_ns) < 100
    assert record.first_token_ns == record.chunk_ns[0] and record.end_ns >= record.chunk_ns[-1]
    assert record.connect_ns is not None and record.prompt_tokens == 3


async def test_cancellation_propagates_and_leaves_nothing_behind(server: ScriptedServer) -> None:
    server.plan.ttft_s, server.plan.itl_s = 0.01, 0.05
    async with StreamingClient(target(server.url), concurrency=1) as client:
        task = asyncio.create_task(
            client.send(index=0, prompt="p", prompt_tokens=1, max_tokens=50, scheduled_ns=0))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not client_module._READ_SINKS
    assert not client._in_flight
