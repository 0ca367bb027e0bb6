"""Operating-system limits the load needs, checked before anything is allocated.

Every request in flight holds one TCP connection, and a connection is an open file. The process
limit (``RLIMIT_NOFILE``) is often 1,024 soft, while the hard limit is much higher (systemd gives
524,288; macOS 10,240 or unlimited): past the soft limit ``connect`` fails with ``EMFILE`` ("Too
many open files") and the level fills with connect errors that say nothing about the server.
So the soft limit is raised to what the load needs, up to the hard limit, as ``ulimit -n`` would
(an unprivileged process may raise its soft limit up to the hard one); when even the hard limit
is too low, the run is refused with a one-line ``ConfigError`` saying what to change.

Local ports: every connection to one server address (host and port) takes a local port of its own,
from ``net.ipv4.ip_local_port_range`` (Linux: 32768-60999, 28,232 ports). Past that ``connect`` fails
with ``EADDRNOTAVAIL`` for every further request, whatever the server does, and ``--workers`` does not
help: the processes share the machine's ports. ``check_local_ports`` refuses such a load in one line.

``files_needed`` adds a fixed headroom to the connections for what else is open at the same
time: standard streams, the event loop's selector and wake-up pipe, the telemetry scraper's and
the health sampler's connections, result and log files, a tokenizer, NVML, and a second
connection for a request resent once on a fresh connection.
"""

from __future__ import annotations

import sys
from pathlib import Path

from plateau_bench.errors import ConfigError
from plateau_bench.spec import MAX_CONCURRENCY, check_concurrency

if sys.platform != "win32":
    import resource
else:  # pragma: no cover - no RLIMIT_NOFILE on Windows
    resource = None

FILE_HEADROOM = 64
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

__all__ = ["FILE_HEADROOM", "MAX_CONCURRENCY", "check_local_ports", "ensure_open_files", "files_needed", "local_ports"]


def files_needed(connections: int) -> int:
    """Open files a load of ``connections`` simultaneous requests needs. Refuses absurd counts."""
    check_concurrency(connections)
    return max(connections, 0) + FILE_HEADROOM


def ensure_open_files(needed: int) -> str | None:
    """Make sure this process may open ``needed`` files (connections + headroom).

    Returns None when the soft limit already allows it, or a one-line note when the soft limit
    was raised. Raises ``ConfigError`` (one line) when ``needed`` is absurd (more than
    ``MAX_CONCURRENCY`` plus headroom: refused before anything is sized by it), when the hard
    limit is below ``needed``, or when the system refuses to raise the soft limit.
    """
    if needed > MAX_CONCURRENCY + FILE_HEADROOM:
        raise ConfigError(
            f"{needed:,} open files asked for: more than {MAX_CONCURRENCY:,} simultaneous requests is "
            "refused (each holds a connection, an open file)"
        )
    if resource is None:  # pragma: no cover
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or needed <= soft:
        return None
    if hard != unlimited and needed > hard:
        raise ConfigError(
            f"this load needs {needed:,} open files (one per connection, plus {FILE_HEADROOM}) but the "
            f"hard limit is {hard:,} (ulimit -Hn); raise it (limits.conf, LimitNOFILE=, or "
            f"ulimit -n {needed} as root) or lower the concurrency"
        )
    # Up to the hard limit when it is finite, so later levels of a sweep need no second raise;
    # exactly ``needed`` when the hard limit is unlimited (macOS refuses an unlimited soft limit).
    wanted = hard if hard != unlimited else needed
    error: Exception | None = None
    for target in dict.fromkeys((wanted, needed)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            error = exc
            continue
        return f"raised the open-file limit from {soft:,} to {target:,} ({needed:,} needed)"
    raise ConfigError(
        f"this load needs {needed:,} open files but the limit is {soft:,} and could not be raised "
        f"({error}); run ulimit -n {needed} first or lower the concurrency"
    )


def local_ports(port_range: Path = PORT_RANGE) -> int | None:
    """Local ports one destination can be connected from (Linux), or None where unknown."""
    try:
        low, high = (int(x) for x in port_range.read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return max(0, high - low + 1)


def check_local_ports(connections: int, port_range: Path = PORT_RANGE) -> None:
    """Refuse, in one line, more simultaneous connections to one server than there are local ports."""
    ports = local_ports(port_range)
    if ports is None or connections <= ports:
        return
    raise ConfigError(
        f"{connections:,} simultaneous connections to one server need as many local ports, but this machine has "
        f"{ports:,} (net.ipv4.ip_local_port_range); widen the range (sysctl -w net.ipv4.ip_local_port_range="
        f"\"1024 65535\"), lower the concurrency, or spread the load over several machines"
    )
