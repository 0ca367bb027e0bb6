"""The between-run interval table (``report.repeats``), rendered to a fixed-width console."""

from __future__ import annotations

from rich.console import Console

from plateau_bench.analysis.repeats import repeat_stats
from plateau_bench.report.repeats import interval_text, repeat_table, repeat_table_html
from plateau_bench.result import Interval, LevelResult, RepeatFigures

from support.builders import level_result


def _level() -> LevelResult:
    level = level_result(8, 1000.0)
    level.repeats = [RepeatFigures(repeat=1, output_throughput=1000.0, ttft_p99_ms=40.0),
                     RepeatFigures(repeat=2, output_throughput=1020.0, ttft_p99_ms=44.0),
                     RepeatFigures(repeat=3, output_throughput=980.0, ttft_p99_ms=42.0),
                     RepeatFigures(repeat=4, level_failed=True)]
    level.repeat_stats = repeat_stats(level.repeats)
    return level


def test_interval_text() -> None:
    assert interval_text(None) == "-"
    assert interval_text(Interval(mean=3.5, n=1), "ms") == "3.50ms"
    # half-width 4.303 * 20 / sqrt(3) = 49.7
    assert interval_text(Interval(mean=1000.0, low=950.3, high=1049.7, stdev=20.0, n=3)) == "1,000 ±49.7"
    assert interval_text(Interval(mean=2.2, low=2.196, high=2.204, stdev=0.002, n=3), "ms") == "2.20ms ±0.004"


def test_table_rows_count_only_the_repeats_that_stood() -> None:
    console = Console(width=200, record=True, color_system=None)
    console.print(repeat_table([_level(), level_result(1)]))
    lines = [line.strip() for line in console.export_text().splitlines() if line.strip()]
    row = next(line for line in lines if line.startswith("C=8"))
    # tok/s: mean 1000, s 20 -> ±49.7; TTFT p99: mean 42, s 2 -> ±4.97 (two digits shown);
    # the failed repeat 4 is not counted.
    assert row.split() == ["C=8", "3/4", "1,000", "±49.7", "-", "42.0ms", "±5", "-", "-", "-", "-", "-", "-"]
    assert not any(line.startswith("C=1") for line in lines)
    assert "C=8" in repeat_table_html([_level()]) and repeat_table_html([]) == ""
