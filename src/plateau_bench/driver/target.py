"""The target endpoint before the load: discovery, readiness, remote token counting, secrets.

``discover`` reads ``GET /v1/models`` (the one route every OpenAI-compatible server has), picks
the model (the only one served, or the one asked for), reads ``GET /version`` when the server has
it (vLLM, SGLang; llama.cpp's ``/props`` gives its build), and probes ``POST /tokenize``.
The server family is read from ``owned_by`` in ``/v1/models`` ("vllm", "sglang", "llamacpp").

Every user-facing failure is a ``TargetError`` with one sentence that names the URL (userinfo
shown as ``***``) and the cause. Secrets (API key, values of secret headers, URL user and
password, the Basic credentials aiohttp derives from them, secret query parameters) are replaced
by ``***`` in any text that leaves this package through ``redact``, which also masks the userinfo
of any URL in the text.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import aiohttp
import msgspec

from plateau_bench.errors import TargetError
from plateau_bench.redaction import is_secret_header, redact, redact_url, split_userinfo
from plateau_bench.spec import TargetSpec

_PROBE_TIMEOUT_S = 10.0
_DNS_ERROR: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(aiohttp, "ClientConnectorDNSError", None),) if t is not None
)


class TargetInfo(msgspec.Struct, frozen=True, kw_only=True):
    url: str                        # base URL, no trailing /v1, userinfo shown as ***
    model: str                      # the model requests will name
    models: list[str]               # every model the server lists
    server: str | None = None       # "vllm" | "sglang" | "llamacpp" | other owned_by value
    server_version: str | None = None
    max_model_len: int | None = None
    tokenize: bool = False          # POST /tokenize answers


# --- URLs and secrets -------------------------------------------------------------------------


def _root(target: TargetSpec) -> str:
    url = target.url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[:-3]
    return url


def base_url(target: TargetSpec) -> str:
    """The server root: ``http://h:8000/v1/`` and ``http://h:8000`` both give ``http://h:8000``.

    Without userinfo: credentials in the URL travel as a Basic ``Authorization`` header
    (``request_headers``), so no URL the client builds or shows carries them.
    """
    return split_userinfo(_root(target))[0]


def url_credentials(target: TargetSpec) -> tuple[str, str] | None:
    """``(user, password)`` from the URL's userinfo, percent-decoded; None without userinfo."""
    userinfo = split_userinfo(_root(target))[1]
    if userinfo is None:
        return None
    user, _, password = userinfo.partition(":")
    return unquote(user), unquote(password)


def on_this_host(target: TargetSpec) -> bool:
    """Whether the server listens on this machine: a loopback address, ``localhost`` or this host's
    own name. Then this machine's GPUs (NVML) are the server's, and the verdict may read them."""
    host = (urlsplit(base_url(target)).hostname or "").lower()
    if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127."):
        return True
    return host == socket.gethostname().lower()   # not getfqdn: a reverse DNS lookup can hang offline


_AUTH_SCHEME = re.compile(r"^\s*[A-Za-z][\w.-]*\s+(\S.*?)\s*$")  # "Bearer <credential>"


def secrets_of(target: TargetSpec) -> tuple[str, ...]:
    """Every secret string of the target that must never be shown, longest first."""
    found = [target.api_key] if target.api_key else []
    for name, value in target.headers.items():
        if target.is_secret(name) and value:
            found.append(value)
            credential = _AUTH_SCHEME.match(value)  # a server may echo the credential alone
            if credential:
                found.append(credential.group(1))
    userinfo = split_userinfo(_root(target))[1]
    if userinfo is not None:
        user, _, password = userinfo.partition(":")
        found += [user, unquote(user), password, unquote(password), _basic(target) or ""]
    query = urlsplit(base_url(target)).query
    if query:
        found += [v for k, v in parse_qsl(query) if is_secret_header(k) and v]
    # Longest first, so a secret that contains another is removed whole.
    return tuple(sorted({s for s in found if len(s) >= 3}, key=len, reverse=True))


def _basic(target: TargetSpec) -> str | None:
    credentials = url_credentials(target)
    if credentials is None:
        return None
    return base64.b64encode(":".join(credentials).encode()).decode()


def request_headers(target: TargetSpec) -> dict[str, str]:
    """Every header a request carries. ``Authorization``: a ``--header`` one, else the API key
    (Bearer), else the URL's userinfo (Basic)."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if not any(name.lower() == "authorization" for name in target.headers):
        if target.api_key:
            headers["Authorization"] = f"Bearer {target.api_key}"
        elif (basic := _basic(target)) is not None:
            headers["Authorization"] = f"Basic {basic}"
    headers.update(target.headers)
    return headers


def _session(target: TargetSpec, timeout_s: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        headers=request_headers(target), timeout=aiohttp.ClientTimeout(total=timeout_s)
    )


def describe_failure(exc: BaseException) -> str:
    """A short cause for a failed connection: refused, DNS, timeout, reset."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, _DNS_ERROR) or isinstance(getattr(exc, "os_error", None), socket.gaierror):
        return "host name not found (DNS)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# --- discovery --------------------------------------------------------------------------------


class _Model(msgspec.Struct):
    id: str
    owned_by: str | None = None
    max_model_len: int | None = None


class _ModelList(msgspec.Struct):
    data: list[_Model]


async def discover(target: TargetSpec) -> TargetInfo:
    """Check the target and fill in what the run needs. Raises TargetError."""
    root = base_url(target)
    shown = redact_url(_root(target))
    secrets = secrets_of(target)
    async with _session(target, min(target.timeout_s, _PROBE_TIMEOUT_S)) as session:
        try:
            async with session.get(f"{root}/v1/models") as resp:
                status = resp.status
                body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TargetError(
                f"cannot reach {shown}: {redact(describe_failure(exc), secrets)}"
            ) from None
        if status in (401, 403):
            raise TargetError(f"{shown}/v1/models answered HTTP {status}: check --api-key")
        try:
            listing = msgspec.json.decode(body, type=_ModelList) if status == 200 else None
        except msgspec.DecodeError:
            listing = None
        if listing is None:
            raise TargetError(
                f"{shown} is not an OpenAI-compatible server: GET /v1/models gave HTTP {status} "
                "without a JSON model list (data[])"
            )
        models = [m.id for m in listing.data]
        if not models:
            raise TargetError(f"{shown} serves no model (GET /v1/models lists none)")
        if target.model is None:
            chosen = listing.data[0]
        else:
            matches = [m for m in listing.data if m.id == target.model]
            if not matches:
                raise TargetError(
                    f"model {target.model!r} is not served by {shown}; it serves: {', '.join(models)}"
                )
            chosen = matches[0]
        version = await _server_version(session, root)
        can_tokenize = await _count_remote(session, root, chosen.id, "hello") is not None
    return TargetInfo(
        url=shown, model=chosen.id, models=models, server=chosen.owned_by,
        server_version=version, max_model_len=chosen.max_model_len, tokenize=can_tokenize,
    )


class _Version(msgspec.Struct):
    version: str | None = None


class _Props(msgspec.Struct):
    build_info: str | None = None


async def _server_version(session: aiohttp.ClientSession, root: str) -> str | None:
    for path in ("/version", "/props"):
        try:
            async with session.get(root + path) as resp:
                if resp.status != 200:
                    continue
                body = await resp.read()
            value = (msgspec.json.decode(body, type=_Version).version if path == "/version"
                     else msgspec.json.decode(body, type=_Props).build_info)
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            continue
        if value:
            return value
    return None


# --- readiness --------------------------------------------------------------------------------


async def wait_ready(target: TargetSpec, timeout_s: float, *, poll_s: float = 0.5) -> None:
    """Poll ``/health`` (when the server has it), then ``/v1/models``, until both answer 200.

    Raises TargetError after ``timeout_s`` saying what it waited for and the last answer.
    """
    root = base_url(target)
    shown = redact_url(_root(target))
    secrets = secrets_of(target)
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    waiting_for = "/health"
    async with _session(target, max(min(poll_s * 4, timeout_s), 0.1)) as session:
        while True:
            for path in ("/health", "/v1/models"):
                waiting_for = path
                try:
                    async with session.get(root + path) as resp:
                        status = resp.status
                        body = await resp.read()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last = redact(describe_failure(exc), secrets)
                    break
                if path == "/health" and status == 404:
                    continue  # no health route: /v1/models decides
                if status != 200:
                    last = f"HTTP {status}"
                    break
                if path == "/v1/models":
                    try:
                        msgspec.json.decode(body, type=_ModelList)
                    except msgspec.DecodeError:
                        last = "HTTP 200 without a JSON model list"
                        break
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TargetError(
                    f"{shown} was not ready after {timeout_s:g} s: waited for {waiting_for} "
                    f"(last: {last})"
                )
            await asyncio.sleep(min(poll_s, remaining))


# --- remote token counting --------------------------------------------------------------------


class _TokenizeAnswer(msgspec.Struct):
    count: int | None = None
    tokens: list[int] | None = None


async def tokenize_remote(
    target: TargetSpec,
    model: str | None,
    text: str,
    *,
    session: aiohttp.ClientSession | None = None,
) -> int | None:
    """Tokens in ``text`` by the server's own ``POST /tokenize``; None when it has none.

    vLLM and SGLang take ``{"model", "prompt"}`` and answer ``{"count", "tokens"}``; llama.cpp
    takes ``{"content"}`` and answers ``{"tokens": [...]}``. Special tokens (BOS) are included,
    as the server includes them in a completion's ``usage.prompt_tokens``.
    """
    root = base_url(target)
    if session is not None:
        return await _count_remote(session, root, model, text)
    async with _session(target, min(target.timeout_s, _PROBE_TIMEOUT_S)) as own:
        return await _count_remote(own, root, model, text)


async def _count_remote(
    session: aiohttp.ClientSession, root: str, model: str | None, text: str
) -> int | None:
    # vLLM/SGLang shape first; llama.cpp answers it with an empty token list (it reads only
    # "content"), which sends us on to its own shape.
    bodies: list[dict[str, object]] = [
        {"prompt": text, "add_special_tokens": True} | ({"model": model} if model else {}),
        {"content": text, "add_special": True},
    ]
    for body in bodies:
        try:
            async with session.post(f"{root}/tokenize", data=msgspec.json.encode(body)) as resp:
                if resp.status == 404:
                    return None
                if resp.status != 200:
                    continue
                answer = msgspec.json.decode(await resp.read(), type=_TokenizeAnswer)
        except (aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
            continue
        if answer.count is not None:
            return answer.count
        if answer.tokens or (answer.tokens is not None and not text):
            return len(answer.tokens)
    return None
