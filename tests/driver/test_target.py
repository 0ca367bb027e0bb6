"""Target discovery, readiness and remote token counting against the scripted server."""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING

import aiohttp
import pytest

from plateau_bench.driver.target import (
    TargetInfo,
    base_url,
    discover,
    on_this_host,
    request_headers,
    secrets_of,
    tokenize_remote,
    wait_ready,
)
from plateau_bench.errors import TargetError
from plateau_bench.redaction import redact, redact_url
from plateau_bench.spec import TargetSpec

if TYPE_CHECKING:
    from conftest import ScriptedServer


async def test_discover_picks_the_served_model(server: ScriptedServer) -> None:
    info = await discover(TargetSpec(url=server.url))
    assert info == TargetInfo(url=server.url, model="tiny", models=["tiny"], server="vllm",
                              server_version="0.9.9", max_model_len=2048, tokenize=True)


async def test_discover_keeps_the_named_model(server: ScriptedServer) -> None:
    server.plan.models = ["a", "b"]
    info = await discover(TargetSpec(url=server.url + "/v1", model="b"))
    assert (info.model, info.models) == ("b", ["a", "b"])


async def test_discover_without_version_or_tokenize(server: ScriptedServer) -> None:
    server.plan.version, server.plan.tokenize_style = None, None
    info = await discover(TargetSpec(url=server.url))
    assert (info.server_version, info.tokenize) == (None, False)


async def test_wrong_model_lists_the_served_ones(server: ScriptedServer) -> None:
    server.plan.models = ["llama-8b", "qwen-7b"]
    with pytest.raises(TargetError, match=r"model 'gpt-4' is not served by .*: llama-8b, qwen-7b$"):
        await discover(TargetSpec(url=server.url, model="gpt-4"))


async def test_unreachable_url_names_url_and_cause(refused_url: str) -> None:
    with pytest.raises(TargetError, match=f"^cannot reach {re.escape(refused_url)}: connection refused$"):
        await discover(TargetSpec(url=refused_url))


async def test_unknown_host_is_a_dns_failure() -> None:
    # .invalid is reserved (RFC 2606): resolution fails without leaving the machine's resolver
    with pytest.raises(TargetError, match=r"^cannot reach http://no-such-host.invalid:8000: host name not found"):
        await discover(TargetSpec(url="http://no-such-host.invalid:8000"))


async def test_not_openai_compatible(server: ScriptedServer) -> None:
    server.plan.openai_models_route = False
    with pytest.raises(TargetError, match="is not an OpenAI-compatible server: GET /v1/models gave HTTP 404"):
        await discover(TargetSpec(url=server.url))


async def test_password_in_url_is_never_shown(refused_url: str) -> None:
    url = refused_url.replace("http://", "http://user:hunter22@")
    with pytest.raises(TargetError) as caught:
        await discover(TargetSpec(url=url))
    assert "hunter22" not in str(caught.value)
    assert str(caught.value).startswith(f"cannot reach {refused_url.replace('http://', 'http://***@')}: ")
    assert redact_url(url) == refused_url.replace("http://", "http://***@")


async def test_wait_ready_never_shows_url_credentials(refused_url: str) -> None:
    url = refused_url.replace("http://", "http://token-only-user@")
    with pytest.raises(TargetError) as caught:
        await wait_ready(TargetSpec(url=url), timeout_s=0.05, poll_s=0.02)
    assert "token-only-user" not in str(caught.value) and "http://***@127.0.0.1:" in str(caught.value)


async def test_wait_ready_waits_for_health(server: ScriptedServer) -> None:
    server.plan.health_failures = 3
    await wait_ready(TargetSpec(url=server.url), timeout_s=5, poll_s=0.01)
    assert server.health_calls == 4


async def test_wait_ready_gives_up_saying_what_it_waited_for(server: ScriptedServer) -> None:
    server.plan.health_failures = 10_000
    with pytest.raises(TargetError, match=r"not ready after 0.2 s: waited for /health \(last: HTTP 503\)"):
        await wait_ready(TargetSpec(url=server.url), timeout_s=0.2, poll_s=0.02)


async def test_wait_ready_on_a_dead_port(refused_url: str) -> None:
    with pytest.raises(TargetError, match=r"waited for /health \(last: connection refused\)"):
        await wait_ready(TargetSpec(url=refused_url), timeout_s=0.1, poll_s=0.02)


async def test_wait_ready_needs_the_model_list(server: ScriptedServer) -> None:
    server.plan.openai_models_route = False
    with pytest.raises(TargetError, match=r"waited for /v1/models \(last: HTTP 404\)"):
        await wait_ready(TargetSpec(url=server.url), timeout_s=0.1, poll_s=0.02)


@pytest.mark.parametrize("style", ["vllm", "llamacpp"])
async def test_tokenize_remote_speaks_both_dialects(server: ScriptedServer, style: str) -> None:
    server.plan.tokenize_style = style
    spec = TargetSpec(url=server.url)
    assert await tokenize_remote(spec, "tiny", "one two three") == 4  # three words + BOS
    async with aiohttp.ClientSession() as session:
        assert await tokenize_remote(spec, None, "one two", session=session) == 3


async def test_tokenize_remote_without_the_route(server: ScriptedServer) -> None:
    server.plan.tokenize_style = None
    assert await tokenize_remote(TargetSpec(url=server.url), "tiny", "x") is None


def test_base_url_forms() -> None:
    for url in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/", "h:8000"):
        assert base_url(TargetSpec(url=url)) == "http://h:8000"


def test_a_server_on_this_host_is_told_apart() -> None:
    import socket

    for url in ("http://127.0.0.1:8000", "localhost:8000", "http://[::1]:8000/v1", "http://u:p@127.0.0.2:1",
                f"http://{socket.gethostname()}:8000"):
        assert on_this_host(TargetSpec(url=url)), url
    for url in ("http://10.1.2.3:8000", "http://gpu-node-7.example:8000"):
        assert not on_this_host(TargetSpec(url=url)), url


def test_secrets_are_redacted() -> None:
    spec = TargetSpec(url="http://u:pw-123@h", api_key="sk-abc", headers={"X-Api-Key": "k-9", "X-Team": "t"})
    basic = base64.b64encode(b"u:pw-123").decode()
    assert set(secrets_of(spec)) == {"sk-abc", "pw-123", "k-9", basic}
    assert redact("sk-abc/k-9/pw-123/t", secrets_of(spec)) == "***/***/***/t"
    assert redact(f"Authorization: Basic {basic}", secrets_of(spec)) == "Authorization: Basic ***"


def test_every_kind_of_secret_is_found() -> None:
    spec = TargetSpec(
        url="http://us%40er:p%2Fss@h:8000/v1?api_key=q-secret&x=1",
        headers={"Authorization": "Bearer tok-1", "Set-Cookie": "a=b1", "X-Mine": "mine-1", "X-Plain": "plain"},
        secret_headers=("x-mine",),
    )
    secrets = secrets_of(spec)
    for secret in ("Bearer tok-1", "tok-1", "a=b1", "mine-1", "us%40er", "us@er", "p%2Fss", "p/ss", "q-secret"):
        assert secret in secrets
    assert "plain" not in secrets and "Bearer" not in secrets


def test_redact_masks_the_userinfo_of_any_url_in_a_text() -> None:
    text = "InvalidURL: http://x:y@h:99999/v1 and https://k@other/ but not a@b.c"
    assert redact(text, ()) == "InvalidURL: http://***@h:99999/v1 and https://***@other/ but not a@b.c"


def test_url_credentials_travel_as_basic_auth_and_never_in_the_url() -> None:
    spec = TargetSpec(url="http://us%40er:p%3Ass@h:8000/v1")
    assert base_url(spec) == "http://h:8000"
    basic = base64.b64encode(b"us@er:p:ss").decode()
    assert request_headers(spec)["Authorization"] == f"Basic {basic}"
    assert request_headers(TargetSpec(url="http://u:p@h", api_key="sk-1"))["Authorization"] == "Bearer sk-1"
    explicit = TargetSpec(url="http://u:p@h", api_key="sk-1", headers={"authorization": "Token t"})
    assert {k: v for k, v in request_headers(explicit).items() if k.lower() == "authorization"} == {
        "authorization": "Token t"}
    assert "Authorization" not in request_headers(TargetSpec(url="http://h"))


async def test_the_server_gets_the_url_credentials(server: ScriptedServer) -> None:
    url = server.url.replace("http://", "http://bench:pw-1@")
    info = await discover(TargetSpec(url=url))
    assert info.url == server.url.replace("http://", "http://***@")
    async with aiohttp.ClientSession() as session:  # the scripted server logs only streamed requests
        assert await tokenize_remote(TargetSpec(url=url), "tiny", "a b", session=session) == 3
