from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from plateau_bench.analysis.timeseries import level_series
from plateau_bench.errors import ConfigError
from plateau_bench.report import plots
from plateau_bench.result import Plateau
from plateau_bench.store import load_requests, load_runs, load_telemetry

SweepFactory = Callable[..., Path]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_png_export_writes_the_three_main_plots(make_sweep: SweepFactory, tmp_path: Path) -> None:
    runs = load_runs([make_sweep("tp8ep", [1, 4, 16, 64, 128])])
    written = plots.write_pngs(runs, tmp_path / "plots")
    assert [p.name for p in written] == ["throughput.png", "latency.png", "frontier.png"]
    for p in written:
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert b"Software" not in data  # no creator metadata


def test_png_export_to_an_unusable_directory_is_a_config_error(make_sweep: SweepFactory, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create"):
        plots.write_pngs(load_runs([make_sweep("a", [1])]), blocker / "plots")


def test_svg_is_inline_ready_and_deterministic(make_sweep: SweepFactory) -> None:
    runs = load_runs([make_sweep("tp8ep", [1, 4, 16, 64, 128])])
    svg = plots.to_svg(plots.build("throughput", runs), "t")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    head = svg[:svg.index(">")]
    assert "viewBox=" in head and ' width="' not in head and ' height="' not in head
    assert "<?xml" not in svg and "<!DOCTYPE" not in svg and "<metadata>" not in svg
    # text stays text: the annotations can be read (and searched) on the page
    assert ">knee C=64</text>" in svg
    assert "plateau " in svg and " tok/s</text>" in svg
    assert plots.to_svg(plots.build("throughput", runs), "t") == svg


def test_plateau_not_reached_is_said_so(make_sweep: SweepFactory) -> None:
    run = load_runs([make_sweep("a", [1, 4, 16])])[0]
    run.result.plateau = Plateau(run.levels[-1].output_throughput, 16, False)
    run.result.knee = None
    svg = plots.to_svg(plots.build("throughput", [run]))
    assert "(not reached: highest so far)</text>" in svg
    assert "knee" not in svg


def test_frontier_labels_share_one_label_where_points_coincide(make_sweep: SweepFactory) -> None:
    runs = load_runs([make_sweep("a", [1, 16, 64, 128, 256])])
    svg = plots.to_svg(plots.build("frontier", runs))
    # past the cap of 64 the levels sit on one point: one label names the range
    assert ">C=64…256</text>" in svg
    assert ">C=128</text>" not in svg


def test_timeseries_figure_has_a_server_panel_only_with_telemetry(make_sweep: SweepFactory) -> None:
    d = make_sweep("a", [64])
    records = load_requests(d)["c64"]
    with_server = plots.to_svg(plots.timeseries_figure(level_series(records, load_telemetry(d)["c64"])))
    without = plots.to_svg(plots.timeseries_figure(level_series(records, [])))
    assert ">server</text>" in with_server and ">waiting</text>" in with_server
    assert ">server</text>" not in without
    assert ">in-flight requests</text>" in without
