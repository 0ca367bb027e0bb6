"""A warm sweep over real HTTP against the twin's server, through the CLI: the steady levels share one live
load (the server never emptied between them), and still the cap is named exactly and every request sent is
counted once, in the level where it ended, on disk as in the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_requests, load_result

from support.loading import Cli

CAP = 4
SHORT = ["--min-level-time", "0.5s", "--max-level-time", "2s", "--input-len", "32", "--output-len", "64", "--quiet"]


@pytest.mark.slow   # a real-time sweep of four levels: ~6 s on two cores
def test_a_warm_sweep_names_the_cap_and_counts_every_request_once(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny").with_overrides(max_num_seqs=CAP)) as twin:
        done = cli("sweep", "--url", twin.url, "--out", str(out), "--concurrency", "2,4,8,16", "--warm-levels",
                   *SHORT)
    assert done.exit_code == 0, done.output
    result = load_result(out)
    assert result.verdict is not None
    assert (result.verdict.constraint, result.verdict.estimated_cap) == ("admission_cap", CAP)
    saved = load_requests(out)
    indices = []
    for level in result.levels:
        records = saved[level.label]
        assert level.warm is not None, f"{level.label} was measured cold"
        assert level.num_requests == level.completed + level.failed == len(records)
        assert level.completed == sum(1 for r in records if r.error is None)
        indices += [r.index for r in records]
    # The live load numbers its requests from 0; the last level's drained requests are in its records.
    assert sorted(indices) == list(range(len(indices)))
    warm = [lv.warm for lv in result.levels[1:] if lv.warm is not None]
    assert all(info.carried_in > 0 for info in warm), "no request crossed from one level into the next"
