"""The per-request error classes are a contract: their values are stored in records files."""

from __future__ import annotations

from plateau_bench.errors import ErrorClass


def test_error_class_values() -> None:
    assert {e.name: e.value for e in ErrorClass} == {
        "CONNECT": "connect", "TIMEOUT": "timeout", "HTTP_429": "http_429", "HTTP_4XX": "http_4xx",
        "HTTP_5XX": "http_5xx", "PROTOCOL": "protocol", "TRUNCATED": "truncated",
        "SERVER_ERROR_EVENT": "server_error_event", "CANCELLED": "cancelled", "HUNG": "hung",
    }
