"""The open-file limit: raised when the load needs it, refused in one line when it cannot be."""

from __future__ import annotations

import resource
from typing import Any

import pytest

from plateau_bench.driver import limits
from plateau_bench.driver.limits import FILE_HEADROOM, ensure_open_files, files_needed
from plateau_bench.errors import ConfigError

INF = resource.RLIM_INFINITY


class FakeResource:
    RLIMIT_NOFILE = resource.RLIMIT_NOFILE
    RLIM_INFINITY = INF

    def __init__(self, soft: int, hard: int, *, refuse_above: int | None = None) -> None:
        self.soft, self.hard, self.refuse_above = soft, hard, refuse_above
        self.calls: list[tuple[int, int]] = []

    def getrlimit(self, which: int) -> tuple[int, int]:
        assert which == self.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which: int, limits: tuple[int, int]) -> None:
        self.calls.append(limits)
        if self.refuse_above is not None and limits[0] > self.refuse_above:
            raise ValueError("not allowed to raise maximum limit")
        self.soft = limits[0]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(soft: int, hard: int, **kw: Any) -> FakeResource:
        res = FakeResource(soft, hard, **kw)
        monkeypatch.setattr(limits, "resource", res)
        return res
    return install


def test_enough_already(fake: Any) -> None:
    res = fake(1024, 4096)
    assert ensure_open_files(1000) is None
    assert ensure_open_files(1024) is None
    assert res.calls == []


def test_the_soft_limit_is_raised_to_the_hard_limit(fake: Any) -> None:
    res = fake(1024, 524288)
    assert ensure_open_files(5000) == "raised the open-file limit from 1,024 to 524,288 (5,000 needed)"
    assert res.calls == [(524288, 524288)] and res.soft == 524288


def test_an_unlimited_hard_limit_raises_the_soft_one_to_what_is_needed(fake: Any) -> None:
    res = fake(256, INF)
    assert ensure_open_files(3000) == "raised the open-file limit from 256 to 3,000 (3,000 needed)"
    assert res.calls == [(3000, INF)]
    fake(INF, INF)
    assert ensure_open_files(10**6) is None


def test_a_refused_raise_to_the_hard_limit_falls_back_to_what_is_needed(fake: Any) -> None:
    res = fake(256, 100_000, refuse_above=10_240)  # macOS: kern.maxfilesperproc below the hard limit
    assert ensure_open_files(2000) == "raised the open-file limit from 256 to 2,000 (2,000 needed)"
    assert res.calls == [(100_000, 100_000), (2000, 100_000)]


def test_a_refused_raise_is_one_line(fake: Any) -> None:
    fake(256, 100_000, refuse_above=1000)
    with pytest.raises(ConfigError) as caught:
        ensure_open_files(2000)
    message = str(caught.value)
    assert message.startswith("this load needs 2,000 open files but the limit is 256 and could not be raised")
    assert "ulimit -n 2000" in message and "\n" not in message


def test_a_hard_limit_below_the_need_is_refused(fake: Any) -> None:
    res = fake(1024, 4096)
    with pytest.raises(ConfigError) as caught:
        ensure_open_files(files_needed(10_000))
    message = str(caught.value)
    assert message.startswith(f"this load needs {10_000 + FILE_HEADROOM:,} open files")
    assert "hard limit is 4,096 (ulimit -Hn)" in message and "lower the concurrency" in message
    assert "\n" not in message and res.calls == []


def test_absurd_loads_are_refused_before_the_limits_are_read(fake: Any) -> None:
    res = fake(1024, INF)
    with pytest.raises(ConfigError, match=r"^--concurrency 2000000 is more than 1,000,000"):
        files_needed(2_000_000)
    with pytest.raises(ConfigError, match=r"^10,000,000,000 open files asked for"):
        ensure_open_files(10**10)
    assert res.calls == []


def test_files_needed_adds_the_headroom() -> None:
    assert files_needed(0) == FILE_HEADROOM
    assert files_needed(512) == 512 + FILE_HEADROOM


def test_the_real_limit() -> None:
    """On this machine: what is allowed needs nothing; more than the hard limit is refused."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert ensure_open_files(min(soft, 64)) is None
    if hard != INF and hard < 1_000_000:
        with pytest.raises(ConfigError, match="hard limit"):
            ensure_open_files(hard + 1)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)


def test_more_connections_than_local_ports_are_refused_in_one_line(tmp_path: Any) -> None:
    from plateau_bench.driver.limits import check_local_ports, local_ports

    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("32768\t60999\n")
    assert local_ports(port_range) == 28232
    check_local_ports(28232, port_range)   # exactly as many: allowed
    with pytest.raises(ConfigError) as caught:
        check_local_ports(40000, port_range)
    message = str(caught.value)
    assert "40,000 simultaneous connections" in message and "28,232" in message and "\n" not in message
    assert "ip_local_port_range" in message
    check_local_ports(40000, tmp_path / "missing")   # not Linux: nothing known, nothing refused
