"""The live view's line for the level being measured."""

from __future__ import annotations

from rich.console import Console

from plateau_bench.report.live import LiveView
from plateau_bench.spec import LevelSpec


def _line(view: LiveView, level: LevelSpec) -> str:
    view.level_started(level, "grow")
    console = Console(width=200, record=True)
    console.print(view._render())
    return console.export_text()


def test_an_auto_level_shows_its_minute_and_how_far_it_may_stretch() -> None:
    level = LevelSpec(mode="steady", concurrency=8, duration_s=600.0, max_wall_s=600.0)
    line = _line(LiveView(Console(), level_s=60.0), level)
    assert "/60s max (up to 600s for long requests)" in line


def test_a_hard_level_time_shows_its_bound_alone() -> None:
    level = LevelSpec(mode="steady", concurrency=8, duration_s=90.0, max_wall_s=90.0)
    line = _line(LiveView(Console()), level)
    assert "/90s max" in line and "up to" not in line
    rate = LevelSpec(mode="rate", rate=2.0, duration_s=60.0, max_wall_s=60.0)
    assert "up to" not in _line(LiveView(Console(), level_s=60.0), rate)
