"""Suite-wide fixtures and hooks: the in-process CLI (``cli``), and the inner loop kept fast by naming the tests
that slow it down.

The inner loop (``pytest -n 2 -m "not slow and not real_server and not browser"``) should stay under a
minute on two cores. A test without any of those markers that takes SLOW_S seconds or more (set-up,
call and teardown together) is listed at the end of the run, so it can be marked ``slow`` or made
faster before the loop drifts. Nothing fails on it: a busy machine makes anything slow.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from support.loading import Cli, invoke

SLOW_S = 3.0  # the README checks take ~2 s (two CLI processes) and belong in the loop
EXPENSIVE_MARKERS = ("slow", "real_server", "browser", "peer")

_seconds: defaultdict[str, float] = defaultdict(float)


@pytest.fixture(scope="session")  # stateless; session scope lets module fixtures (one sweep, several tests) use it
def cli() -> Cli:
    """``plateau ARGS`` in this process: ``cli("sim", "--concurrency", "4", env={"COLUMNS": "200"})`` returns
    click's Result (``exit_code``; ``output``, stdout and stderr together). See support.loading.invoke."""
    return invoke


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not any(marker in report.keywords for marker in EXPENSIVE_MARKERS):
        _seconds[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    unmarked = sorted(((s, nodeid) for nodeid, s in _seconds.items() if s >= SLOW_S), reverse=True)
    if not unmarked:
        return
    terminalreporter.write_sep("-", f"unmarked tests of {SLOW_S:.0f} s or more (mark them slow, or speed them up)")
    for seconds, nodeid in unmarked:
        terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")
