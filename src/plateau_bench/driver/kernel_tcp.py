"""This host's TCP counters around a level (Linux ``/proc/net/netstat``): evidence, not inference.

A slow connection's ~1 s looks like a SYN retransmission after a full listen backlog, but the same wait
comes from a client event loop that was busy. The kernel counts both causes of the first: the client's
SYN retransmissions (``TcpExt: TCPSynRetrans``) and, for a server on this host, its listen queue
overflows and drops (``ListenOverflows``, ``ListenDrops``). Read before and after a level, the
difference says whether they happened; elsewhere (no ``/proc``, another OS) nothing is claimed.
"""

from __future__ import annotations

from pathlib import Path

from plateau_bench.result import KernelTcp

NETSTAT = Path("/proc/net/netstat")
_WANTED = {"TCPSynRetrans": "syn_retransmits", "ListenOverflows": "listen_overflows", "ListenDrops": "listen_drops"}


def read_counters(path: Path = NETSTAT) -> dict[str, int] | None:
    """The counters this module reads, or None where the file is missing or unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    out: dict[str, int] = {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        prefix, _, head = names.partition(":")
        if prefix != "TcpExt":
            continue
        for name, value in zip(head.split(), values.partition(":")[2].split(), strict=False):
            if name in _WANTED and value.lstrip("-").isdigit():
                out[_WANTED[name]] = int(value)
    return out if len(out) == len(_WANTED) else None


def delta(before: dict[str, int] | None, after: dict[str, int] | None, *, server_here: bool) -> KernelTcp | None:
    """What rose between the two readings (None unless both were read). ``server_here``: the server
    runs on this host, so its listen queue is counted here too."""
    if before is None or after is None:
        return None
    return KernelTcp(syn_retransmits=max(0, after["syn_retransmits"] - before["syn_retransmits"]),
                     listen_overflows=max(0, after["listen_overflows"] - before["listen_overflows"]),
                     listen_drops=max(0, after["listen_drops"] - before["listen_drops"]), server_here=server_here)
