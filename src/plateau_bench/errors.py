"""The exception hierarchy, in one place.

``PlateauError`` is the root: the CLI turns any of them into one line on stderr and exit code 2.

    PlateauError
      ConfigError      bad flags, specs, files, or output directories (the user's input)
      TargetError      the endpoint: unreachable, not OpenAI-compatible, unknown model
      ScrapeError      telemetry that was asked for explicitly and cannot be read
      ResultsError     saved results that are missing, unreadable, or from a newer schema

Per-request failures during a load level are *not* exceptions: they are recorded on the
request record (see ``ErrorClass``) and counted, never fatal.
"""

from __future__ import annotations

from enum import StrEnum


class PlateauError(Exception):
    """Root of every error plateau-bench reports to the user as one line."""


class ConfigError(PlateauError):
    """The user's input (flags, spec, dataset, output directory) is invalid."""


class TargetError(PlateauError):
    """The target endpoint cannot be used (connection, protocol, model)."""


class ScrapeError(PlateauError):
    """Telemetry that was explicitly requested could not be read."""


class ResultsError(PlateauError):
    """Saved results are missing, unreadable, or from an unsupported schema."""


class ErrorClass(StrEnum):
    """How one request failed; stored on its record.

    ``TRUNCATED``: the stream ended (cleanly or with the connection closed or reset) without
    ``[DONE]``, without a ``finish_reason``, and with fewer tokens than ``max_tokens`` (requests are
    sent with ``ignore_eos``, so a complete answer has them all). ``HUNG``: still in flight when a
    level's grace period ran out (set by the load loop, never by the client). ``PROTOCOL``: a
    malformed stream (undecodable event, unusable status). Every failed record keeps the tokens
    that arrived before the failure.
    """

    CONNECT = "connect"
    TIMEOUT = "timeout"
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    PROTOCOL = "protocol"
    TRUNCATED = "truncated"
    SERVER_ERROR_EVENT = "server_error_event"
    CANCELLED = "cancelled"
    HUNG = "hung"
