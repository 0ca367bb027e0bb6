"""bench/scale_out.py's own parts: the cores it splits between serve-sim and the load, and its saved table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.loading import script

ROOT = Path(__file__).resolve().parents[2]
scale_out = script("bench/scale_out.py")


def test_the_server_takes_the_first_cores_and_the_load_the_rest() -> None:
    cores = sorted(os.sched_getaffinity(0))
    assert scale_out._split_cores(None) == (None, None)
    if len(cores) >= 2:
        assert scale_out._split_cores(1) == (cores[:1], cores[1:])
    with pytest.raises(SystemExit, match="none left for the load"):
        scale_out._split_cores(len(cores))


def test_configurations_are_read_as_the_table_names_them() -> None:
    assert [scale_out._config_of(w) for w in ("-", "None", "1", "8", "auto")] == [None, None, 1, 8, "auto"]


def test_the_saved_16_core_run_renders_every_level_and_loses_nothing() -> None:
    saved = json.loads((ROOT / "bench" / "data" / "scale_out-16core.json").read_text())
    assert saved["machine"]["cores"] == 16 and saved["machine"]["server_cores"] == 2
    text = scale_out.render(saved)
    assert "2 of 16 cores for serve-sim, 14 for the load" in text
    rows = [line for line in text.split("\n") if " streams " in line]
    assert len(rows) == sum(len(r) for r in saved["configs"].values()) == 16
    assert all(line.endswith(" 0") for line in rows)   # no request failed
    assert all(f"workers {w}: requests lost 0" in text for w in saved["configs"])
