"""Target flags into a TargetSpec: empty URLs, bad headers, secret headers, one-line errors."""

from __future__ import annotations

from typing import get_args

import pytest
import typer
from typer.testing import CliRunner

from plateau_bench.commands import options as o
from plateau_bench.errors import ConfigError
from plateau_bench.spec import TargetSpec


def spec(url: str = "http://h:8000", headers: list[str] | None = None, secret: list[str] | None = None,
         timeout: str = "600s", api_key: str | None = None) -> TargetSpec:
    return o.target_spec(url, None, "completions", api_key, headers, timeout, secret)


def test_url_given() -> None:
    assert o.url_given(None) is False
    assert o.url_given("http://h:8000") is True
    for empty in ("", "   ", "\t"):
        with pytest.raises(ConfigError, match=r"^--url is empty: .* or omit --url to start the embedded"):
            o.url_given(empty)


@pytest.mark.parametrize("url", ["", " ", "\n"])
def test_an_empty_url_is_an_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^--url is empty"):
        spec(url)


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://u:pw-1@h", "--url must start with http:// or https:// (got 'ftp://***@h')"),
    ("http://u:pw-1@h:99999", "--url 'http://***@h:99999' is not a valid URL (Port out of range 0-65535)"),
    ("http://u:pw-1@:8000", "--url 'http://***@:8000' names no host"),
])
def test_bad_urls_are_shown_redacted(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        spec(url)
    assert str(caught.value) == message


def test_the_url_is_trimmed() -> None:
    assert spec("  http://h:8000/  ").url == "http://h:8000"


@pytest.mark.parametrize("timeout", ["inf", "nan", "-1s", ""])
def test_bad_timeouts(timeout: str) -> None:
    with pytest.raises(ConfigError, match=r"^--timeout "):
        spec(timeout=timeout)


@pytest.mark.parametrize("header", ["Authorization Bearer sk-leak-1", ":sk-leak-1", "Bad Name:sk-leak-1"])
def test_malformed_headers_are_refused_without_showing_them(header: str) -> None:
    with pytest.raises(ConfigError) as caught:
        spec(headers=[header])
    assert "sk-leak-1" not in str(caught.value) and str(caught.value).startswith("--header ")


def test_header_values_may_not_hold_line_breaks() -> None:
    with pytest.raises(ConfigError, match=r"^--header X-A: the value holds a line break$"):
        spec(headers=["X-A: v\r\nInjected: 1"])


def test_secret_headers_pass_through() -> None:
    target = spec(headers=["X-Org: org-7", "X-Team: blue"], secret=["x-org"])
    assert target.secret_headers == ("x-org",)
    assert target.public()["headers"] == {"X-Org": "***", "X-Team": "blue"}
    assert spec(headers=["X-Org: org-7"]).secret_headers == ()  # the default: existing callers unchanged
    assert o.target_spec("http://h", None, "chat", None, None, "10s").secret_headers == ()


def test_a_misspelt_secret_header_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"^--secret-header X-Orgg names no --header given"):
        spec(headers=["X-Org: org-7"], secret=["X-Orgg"])


def test_the_secret_header_option_is_repeatable() -> None:
    app = typer.Typer()
    seen: list[list[str] | None] = []

    @app.command()
    def main(secret_header: o.SecretHeader = None) -> None:
        seen.append(secret_header)

    result = CliRunner().invoke(app, ["--secret-header", "X-A", "--secret-header", "X-B"])
    assert result.exit_code == 0, result.output
    assert seen == [["X-A", "X-B"]]
    assert get_args(o.SecretHeader)[1].default == "--secret-header"


def test_check_load_size_counts_the_headroom(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from plateau_bench.driver import limits

    class Fake:
        RLIMIT_NOFILE, RLIM_INFINITY = 7, -1
        soft = 1000

        def getrlimit(self, which: int) -> tuple[int, int]:
            return self.soft, 4096

        def setrlimit(self, which: int, pair: tuple[int, int]) -> None:
            self.soft = pair[0]

    monkeypatch.setattr(limits, "resource", Fake())
    o.check_load_size(1000)  # 1,000 connections + headroom > the soft limit of 1,000
    assert capsys.readouterr().err == "plateau: raised the open-file limit from 1,000 to 4,096 (1,064 needed)\n"
    with pytest.raises(ConfigError, match="hard limit is 4,096"):
        o.check_load_size(5000)
    with pytest.raises(ConfigError, match="more than 1,000,000"):
        o.check_load_size(10**7)


@pytest.mark.parametrize(("api_key", "headers", "given"), [
    ("sk-9", None, "--api-key"),
    (None, ["Authorization: Bearer t"], "--header Authorization"),
])
def test_url_credentials_and_another_authorization_are_refused(
    api_key: str | None, headers: list[str] | None, given: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        spec("http://u:pw-77@h:8000", headers=headers, api_key=api_key)
    assert str(caught.value).startswith(f"--url carries credentials (user:password@) and {given} is given too")
    assert "pw-77" not in str(caught.value) and "sk-9" not in str(caught.value)


@pytest.mark.parametrize("bad", ["0", "-2", "many", "1.5", "2000"])
def test_bad_workers_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError, match="--workers"):
        o.parse_workers(bad)
    assert o.parse_workers(" Auto ") == "auto" and o.parse_workers("1") == 1 and o.parse_workers(None) is None


def test_workers_far_beyond_the_cores_are_refused_and_beyond_them_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"^--workers 1000 is more than 8 load processes per core on this "
                                          r"machine's 2 usable core\(s\): give at most 16"):
        o.parse_workers("1000", cores=2)
    assert o.parse_workers("16", cores=2) == 16
    assert "--workers 16 on 2 usable core(s): the processes share the cores" in capsys.readouterr().err
    assert o.parse_workers("2", cores=2) == 2 and capsys.readouterr().err == ""


@pytest.mark.parametrize(("args", "fragment"), [
    (("2", "auto", None), "drop --workers"),
    ((None, None, 2), "give --ray auto|ADDRESS too"),
    ((None, "auto", 0), "--workers-per-node must be between"),
    ((None, " ", None), "--ray is empty"),
])
def test_ray_flags_are_checked_together(args: tuple[str | None, str | None, int | None], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace("|", "\\|")):
        o.load_placement(*args)
    assert o.load_placement(None, " 10.0.0.1:6379 ", 4) == (None, "10.0.0.1:6379", 4)
    assert o.load_placement("auto", None, None) == ("auto", None, 1)
