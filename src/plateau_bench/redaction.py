"""Every secret and URL that leaves the package goes through here: one redactor.

A credential is shown as ``***`` wherever it would be printed, logged or stored:
* a header's value when the header is secret: its name contains ``auth``, ``key``, ``token``, ``secret``,
  ``cookie``, ``passw`` or ``session`` (Authorization, X-Api-Key, Cookie...), or the user named it
  (``--secret-header``);
* a URL's userinfo (``http://user:pw@host`` -> ``http://***@host``) and its secret-named query parameters;
* in free text (a server's error, an exception), every known secret string and any URL's userinfo;
* in a command line (``tune --serve``), the values of password-, token-, key- and secret-like options and of
  ``NAME=value`` environment pairs whose name is credential-like (``HF_TOKEN=...``).
"""

from __future__ import annotations

import re

REDACTED = "***"
_SECRET_NAME_PARTS = ("auth", "key", "token", "secret", "cookie", "passw", "session", "credential")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@]+@")
# A credential word as a whole segment of an option's or variable's name (--api-key, --hf-token, HF_TOKEN,
# DB_PASSWORD), so that --max-num-batched-tokens or TOKENIZERS_PARALLELISM stay readable.
_CREDENTIAL_WORDS = {"key", "apikey", "token", "password", "passwd", "pass", "pw", "secret", "auth", "credential",
                     "credentials", "cookie"}
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s\"']+)"
_OPTION = re.compile(rf"(?<![\w-])(--?([A-Za-z][\w-]*))(=|\s+)(?!-){_VALUE}")
_ENV_PAIR = re.compile(rf"(?<![\w-])([A-Za-z_]\w*)={_VALUE}")


_WHERE_WORDS = {"file", "path", "dir"}   # --key-file /etc/k: where a secret is, not the secret


def _credential_name(name: str) -> bool:
    parts = [part for part in re.split(r"[-_]", name.lower()) if part]
    return bool(parts) and parts[-1] not in _WHERE_WORDS and any(part in _CREDENTIAL_WORDS for part in parts)


def is_secret_header(name: str, named: tuple[str, ...] | list[str] = ()) -> bool:
    """A header whose value is a credential: by its name, or named secret by the user."""
    lowered = name.strip().lower()
    if any(part in lowered for part in _SECRET_NAME_PARTS):
        return True
    return any(lowered == n.strip().lower() for n in named)


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without its userinfo, the userinfo or None)``: ``http://u:p@h/x`` -> ``(http://h/x, u:p)``.

    Works on URLs without a scheme (``u:p@h:8000``) too; an ``@`` after the host is not userinfo.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    cuts = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    end = min(cuts) if cuts else len(rest)
    userinfo, at, host = rest[:end].rpartition("@")
    if not at:
        return url, None
    return f"{scheme}{sep}{host}{rest[end:]}", userinfo


def redact_url(url: str) -> str:
    """``url`` with its userinfo and the values of secret-named query parameters as ``***``.

    ``http://user:pw@h:8000/v1`` -> ``http://***@h:8000/v1``; ``http://h/?api_key=k&x=1`` ->
    ``http://h/?api_key=***&x=1``. Works on URLs without a scheme (``user:pw@h:8000``) too.
    """
    bare, userinfo = split_userinfo(url)
    scheme, sep, rest = bare.partition("://")
    if not sep:
        scheme, rest = "", bare
    cuts = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    end = min(cuts) if cuts else len(rest)
    authority, tail = rest[:end], rest[end:]
    if userinfo is not None:
        authority = f"{REDACTED}@{authority}"
    query_at = tail.find("?")
    if query_at >= 0:
        fragment_at = tail.find("#", query_at)
        stop = fragment_at if fragment_at >= 0 else len(tail)
        params = []
        for param in tail[query_at + 1 : stop].split("&"):
            name, eq, _ = param.partition("=")
            params.append(f"{name}={REDACTED}" if eq and is_secret_header(name) else param)
        tail = tail[: query_at + 1] + "&".join(params) + tail[stop:]
    return f"{scheme}{sep}{authority}{tail}"


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with every one of ``secrets``, and the userinfo of any URL in it, shown as ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if "@" in text:
        text = _URL_USERINFO.sub(rf"\1{REDACTED}@", text)
    return text


def redact_command(command: str) -> str:
    """A command line as it may be shown and saved: credential-like options and environment pairs hidden,
    and any URL's userinfo."""
    command = _OPTION.sub(lambda m: f"{m.group(1)}{m.group(3)}{REDACTED}" if _credential_name(m.group(2))
                          else m.group(0), command)
    command = _ENV_PAIR.sub(lambda m: f"{m.group(1)}={REDACTED}" if _credential_name(m.group(1)) else m.group(0),
                            command)
    return redact(command)
