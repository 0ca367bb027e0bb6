"""Fixtures for the peer tools' tests: each test runs a real peer (AIPerf, GuideLLM, inference-perf, vLLM's
bench) against serve-sim with an admission cap drawn at random, imports exactly what the tool wrote, and
requires the verdict to name that cap.

Every test collected here gets the ``peer`` and ``slow`` markers (``scripts/test`` runs them; the inner
loop, which leaves slow tests out, leaves them out too) and a timeout of PEER_TIMEOUT_S unless it sets its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.peers import write_tokenizer_dir

PEER_TIMEOUT_S = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.peer)
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(PEER_TIMEOUT_S))


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local Hugging Face tokenizer, for the peer tool and for serve-sim (so both count the same)."""
    return write_tokenizer_dir(tmp_path_factory.mktemp("tokenizer"))
