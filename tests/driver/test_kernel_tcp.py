"""This host's TCP counters, read from /proc/net/netstat's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.driver.kernel_tcp import delta, read_counters
from plateau_bench.result import KernelTcp

NETSTAT = ("TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPSynRetrans\n"
           "TcpExt: 0 {over} {drops} {syn}\n"
           "IpExt: InNoRoutes ListenOverflows\n"
           "IpExt: 7 999\n")


def test_the_counters_are_read_by_name_and_their_rise_is_the_levels(tmp_path: Path) -> None:
    path = tmp_path / "netstat"
    path.write_text(NETSTAT.format(over=5, drops=6, syn=100))
    before = read_counters(path)
    assert before == {"listen_overflows": 5, "listen_drops": 6, "syn_retransmits": 100}
    path.write_text(NETSTAT.format(over=8, drops=9, syn=112))
    assert delta(before, read_counters(path), server_here=True) == KernelTcp(
        syn_retransmits=12, listen_overflows=3, listen_drops=3, server_here=True)


def test_no_file_or_missing_counters_claim_nothing(tmp_path: Path) -> None:
    assert read_counters(tmp_path / "absent") is None
    (tmp_path / "netstat").write_text("TcpExt: ListenOverflows\nTcpExt: 4\n")
    assert read_counters(tmp_path / "netstat") is None
    assert delta(None, {"syn_retransmits": 1, "listen_overflows": 0, "listen_drops": 0}, server_here=False) is None


def test_this_machines_counters_read_where_linux_has_them() -> None:
    if not Path("/proc/net/netstat").exists():
        pytest.skip("no /proc/net/netstat (not Linux): nothing is read there, as the test above checks")
    counters = read_counters()
    assert counters is not None and all(v >= 0 for v in counters.values())
