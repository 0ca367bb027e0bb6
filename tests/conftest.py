"""Suite-wide fixtures and hooks: the in-process CLI (``cli``), the inner loop kept fast by naming the tests
that slow it down, and the long tests handed out first where several processes share the run.

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
DEFAULT_TIMEOUT_S = 120   # pyproject's per-test timeout, for a slow test that sets none
EXPENSIVE_MARKERS = ("slow", "real_server", "browser", "peer")

_seconds: defaultdict[str, float] = defaultdict(float)


@pytest.fixture(scope="session")  # stateless; session scope lets module fixtures (one sweep, several tests) use it
def cli() -> Cli:
    """``plateau ARGS`` in this process: ``cli("sim", "--concurrency", "4", env={"COLUMNS": "200"})`` returns
    click's Result (``exit_code``; ``output``, stdout and stderr together). See support.loading.invoke."""
    return invoke


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With pytest-xdist (``-n 2``, as scripts/test runs the package's tests), the slow tests first, the longest
    bound first: a three-minute test handed out last is the whole run's tail while the other process idles.
    A test's own timeout is the bound its author expected; the order is otherwise the collection's."""
    if not config.getoption("numprocesses", default=None):
        return

    def bound(item: pytest.Item) -> float:
        if item.get_closest_marker("slow") is None:
            return 0.0
        timeout = item.get_closest_marker("timeout")
        return float(timeout.args[0]) if timeout is not None and timeout.args else DEFAULT_TIMEOUT_S

    items.sort(key=bound, reverse=True)   # stable: equal bounds keep the collection's order


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
