"""The server's own time split (``report.time_split``), rendered to a fixed-width console and as HTML."""

from __future__ import annotations

from rich.console import Console

from plateau_bench.report.terminal import levels_view
from plateau_bench.report.time_split import phase_text, time_split_html, time_split_table
from plateau_bench.result import LevelResult, ServerPhase, ServerTimeSplit

from support.builders import level_result


def _split_level(concurrency: int, queue_ms: float) -> LevelResult:
    level = level_result(concurrency, 1000.0)
    level.time_split = ServerTimeSplit(
        engine="vllm", queue_ms=ServerPhase(observations=40, mean=queue_ms, p99=2 * queue_ms),
        prefill_ms=ServerPhase(observations=40, mean=100.0, p99=250.0),
        decode_ms=ServerPhase(observations=40, mean=5000.0, p99=7680.0, p99_above=True),
        step_tokens=ServerPhase(observations=900, mean=9.6, p99=16.0),
        client_ttft_mean_ms=queue_ms + 200.0, outside_engine_ms=100.0)
    return level


def _rows(*levels: LevelResult) -> list[list[str]]:
    table = time_split_table(levels)
    assert table is not None
    console = Console(width=220, record=True, color_system=None)
    console.print(table)
    return [line.split() for line in console.export_text().splitlines() if line.strip().startswith("C=")]


def test_phase_text() -> None:
    assert phase_text(None) == "-"
    assert phase_text(ServerPhase(observations=2)) == "?/?"
    assert phase_text(ServerPhase(observations=9, mean=1234.0, p99=7680_000.0, p99_above=True)) == "1.23s/>7680.0s"
    assert phase_text(ServerPhase(observations=9, mean=9.64, p99=213.4), tokens=True) == "9.6/213"


def test_one_row_per_level_with_a_split_in_concurrency_order() -> None:
    rows = _rows(_split_level(64, 2000.0), level_result(1), _split_level(8, 5.0))
    assert [r[0] for r in rows] == ["C=8", "C=64"]
    assert rows[1] == ["C=64", "40", "2.00s/4.00s", "100ms/250ms", "5.00s/>7.68s", "2.20s", "100ms", "9.6/16"]


def test_no_split_no_table() -> None:
    assert time_split_table([level_result(4)]) is None
    assert time_split_html([level_result(4)]) == ""
    console = Console(width=200, record=True, color_system=None)
    console.print(levels_view([level_result(4)]))
    assert "time split" not in console.export_text()


def test_html_and_the_levels_view_carry_it() -> None:
    page = time_split_html([_split_level(64, 2000.0)])
    assert "<td>2.00s/4.00s</td>" in page and "&gt;7.68s" in page
    console = Console(width=220, record=True, color_system=None)
    console.print(levels_view([_split_level(64, 2000.0)]))
    assert "server's own time split" in console.export_text()
