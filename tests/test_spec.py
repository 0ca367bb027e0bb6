"""Specs: bad numbers are one-line ConfigErrors; secrets never show in public(), repr or messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.errors import ConfigError
from plateau_bench.redaction import is_secret_header, redact_url
from plateau_bench.spec import (
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    LevelSpec,
    TargetSpec,
    parse_duration,
    parse_float_list,
    parse_int_list,
)

# --- numbers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "infs", "nanms", "1e400", "1e308h"])
def test_durations_must_be_finite(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^duration must be a finite number of seconds \(got '.*'\)$"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_duration_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--duration is empty \(examples: 60s, 1.5m, 250ms\)$"):
        parse_duration(text, "--duration")


@pytest.mark.parametrize("text", ["-1", "-5s", "0", "0ms", "-0"])
def test_durations_must_be_positive(text: str) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        parse_duration(text)


@pytest.mark.parametrize(("flag", "text"), [("--duration", "nan"), ("--max-level-time", "nan"),
                                            ("--timeout", "inf"), ("--timeout", "nan")])
def test_the_flag_is_named_in_one_line(flag: str, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_duration(text, flag)
    message = str(caught.value)
    assert message == f"{flag} must be a finite number of seconds (got {text!r})"
    assert "\n" not in message


@pytest.mark.parametrize("text", ["1e300s", "1e300", "9000h", "600000m"])
def test_durations_beyond_a_year_are_refused(text: str) -> None:
    """1e300 s once reached a nanosecond conversion and overflowed with a traceback."""
    with pytest.raises(ConfigError, match=r"^--duration '.*' is more than a year"):
        parse_duration(text, "--duration")


def test_good_durations() -> None:
    assert parse_duration("90") == 90.0
    assert parse_duration(" 1.5m ") == 90.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2h") == 7200.0
    with pytest.raises(ConfigError, match=r"^cannot read --wait-ready 'soon'"):
        parse_duration("soon", "--wait-ready")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_parse_duration_returns_a_positive_finite_number_or_refuses(value: float) -> None:
    try:
        got = parse_duration(repr(value))
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert 0 < got == value <= MAX_DURATION_S


@pytest.mark.parametrize("text", ["1,nan", "inf", "2,-inf,3", "1e400"])
def test_number_lists_must_be_finite(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^--rate: '.*' is not a finite number$"):
        parse_float_list(text, "--rate")


def test_integer_lists() -> None:
    assert parse_int_list("1, 16,64", "--concurrency") == [1, 16, 64]
    with pytest.raises(ConfigError, match="is not an integer"):
        parse_int_list("1,nan", "--concurrency")


_RATE = r"--rate must be > 0 requests/s and finite \(got (nan|inf)\)$"
_DURATION = r"--duration must be > 0 and finite \(got (nan|inf)\)$"


@pytest.mark.parametrize(("level", "message"), [
    (LevelSpec(mode="rate", rate=float("nan"), duration_s=1), _RATE),
    (LevelSpec(mode="rate", rate=float("inf"), duration_s=1), _RATE),
    (LevelSpec(mode="steady", concurrency=2, duration_s=float("nan")), _DURATION),
    (LevelSpec(mode="steady", concurrency=2, duration_s=float("inf")), _DURATION),
    (LevelSpec(mode="rate", rate=1, burstiness=float("nan"), duration_s=1),
     r"--burstiness must be > 0 and finite \(got nan\)$"),
])
def test_levels_refuse_nan_and_inf(level: LevelSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        level.validate()


def test_absurd_concurrency_is_refused_before_anything_is_sized() -> None:
    LevelSpec(mode="burst", concurrency=MAX_CONCURRENCY).validate()
    with pytest.raises(ConfigError, match=r"^--concurrency 1000001 is more than 1,000,000 simultaneous"):
        LevelSpec(mode="burst", concurrency=MAX_CONCURRENCY + 1).validate()
    with pytest.raises(ConfigError, match=r"^--max-concurrency 10000000000 is more than"):
        LevelSpec(mode="rate", rate=1.0, duration_s=1, max_concurrency=10**10).validate()


# --- secrets --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Authorization", "proxy-authorization", "X-Api-Key", "api-key", "X-Auth-Token",
                                  "Cookie", "set-cookie", "X-Client-Secret", "X-Password"])
def test_credential_header_names_are_secret(name: str) -> None:
    assert is_secret_header(name)
    assert is_secret_header(name.upper())


def test_other_headers_are_not_unless_named() -> None:
    assert not is_secret_header("X-Team")
    assert not is_secret_header("Accept")
    assert is_secret_header("X-Team", ("x-team",))
    assert is_secret_header(" x-team ", ["X-TEAM"])


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:secret@host", "http://***@host"),
    ("http://user:secret@host:8000/v1/", "http://***@host:8000/v1/"),
    ("https://only-token@h", "https://***@h"),
    ("http://u:p@[::1]:80/x", "http://***@[::1]:80/x"),
    ("u:p@h:8000", "***@h:8000"),
    ("http://h/v1?api_key=k1&model=m&token=t2#frag", "http://h/v1?api_key=***&model=m&token=***#frag"),
    ("http://h:8000/v1", "http://h:8000/v1"),
    ("http://h/path@not-userinfo", "http://h/path@not-userinfo"),
])
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


_SAFE = "abcdefgijkmnoqrsuwxyzABCDEFGIJK-_~!$()*+,;=%"  # none of the characters of the rest of the URL


@given(user=st.text(_SAFE, min_size=1, max_size=12), password=st.text(_SAFE + ":", max_size=12))
def test_userinfo_never_survives_redaction(user: str, password: str) -> None:
    userinfo = f"{user}:{password}" if password else user
    assert redact_url(f"http://{userinfo}@h:8000/v1") == "http://***@h:8000/v1"


def test_public_and_repr_show_no_secret() -> None:
    spec = TargetSpec(
        url="http://bench:hunter22@h:8000",
        api_key="sk-live-123",
        headers={"Authorization": "Bearer tok-9", "set-cookie": "s=1", "X-Org": "org-7", "X-Team": "blue"},
        secret_headers=("X-Org",),
    )
    public = spec.public()
    assert public == {
        "url": "http://***@h:8000", "model": None, "endpoint": "completions", "api_key": "***",
        "headers": {"Authorization": "***", "set-cookie": "***", "X-Org": "***", "X-Team": "blue"},
        "timeout_s": 600.0,
    }
    for shown in (repr(spec), str(spec), f"{[spec]}", repr(public)):
        for secret in ("hunter22", "bench", "sk-live-123", "tok-9", "s=1", "org-7"):
            assert secret not in shown
    assert "X-Team': 'blue'" in repr(spec)
    assert TargetSpec(url="http://h").public()["api_key"] is None
