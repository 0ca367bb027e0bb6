from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.report.html import render_html, workload_differences, write_html
from plateau_bench.store import load_runs

SweepFactory = Callable[..., Path]
MAIN_PLOTS = 3


@pytest.mark.slow
def test_one_svg_per_plot_and_level(make_sweep: SweepFactory, tmp_path: Path) -> None:
    out = write_html(load_runs([make_sweep("tp8ep", [1, 4, 16, 64, 128])]), tmp_path / "report.html")
    page = out.read_text()
    assert page.count("<svg") == MAIN_PLOTS + 5
    assert "plateau-bench report: tp8ep" in page
    assert "Admission cap: the server runs at most 64 requests at a time" in page
    assert "decoding concurrency pinned at 64 while C grows" in page
    assert "raise --max-num-seqs" in page
    assert "throughput stopped rising" in page
    # the levels table shows the saved figure of each level
    for level in load_runs([tmp_path / "tp8ep"])[0].levels:
        assert f"<td>{level.output_throughput:,.1f}</td>" in page


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_page_is_self_contained(make_sweep: SweepFactory, tmp_path: Path) -> None:
    page = write_html(load_runs([make_sweep("a", [1, 8])]), tmp_path / "r.html").read_text()
    assert "<script" not in page and "<link" not in page and "@import" not in page
    # every reference stays inside the page (the target URL only appears as text in the spec)
    assert re.findall(r'(?:src|href)="(?!#)[^"]*"', page) == []
    assert "url(http" not in page
    assert "<metadata>" not in page and "Matplotlib v" not in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "several SVGs on one page must not share ids"


@pytest.mark.slow
def test_several_runs_are_overlaid_and_workload_differences_stated(make_sweep: SweepFactory,
                                                                    tmp_path: Path) -> None:
    a = make_sweep("tp4", [1, 4, 16], output_len=128, telemetry=False, verdict=False)
    b = make_sweep("tp8ep", [1, 4, 16, 64], output_len=64)
    page = write_html(load_runs([a, b]), tmp_path / "both.html").read_text()
    assert page.count("<svg") == MAIN_PLOTS + 3 + 4
    assert "2 runs overlaid" in page
    assert "The runs used different workloads." in page
    assert "output_len differs (tp4: 128; tp8ep: 64)" in page
    # legend entries of the overlaid plots are the run names (text stays text in the SVG)
    throughput_svg = page[page.index("<h2>Throughput</h2>"):page.index("<h2>Latency</h2>")]
    assert ">tp4</text>" in throughput_svg and ">tp8ep</text>" in throughput_svg


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_same_workload_states_no_difference(make_sweep: SweepFactory) -> None:
    runs = load_runs([make_sweep("x", [1]), make_sweep("y", [2])])
    assert workload_differences(runs) == []
    assert "different workloads" not in render_html(runs)


@pytest.mark.slow
def test_burst_levels_are_labelled(make_sweep: SweepFactory) -> None:
    page = render_html(load_runs([make_sweep("b", [1, 16, 128], mode="burst")]))
    assert page.count('<span class="tag">burst</span>') == 3
    assert "C=128 · burst" in page
    assert ">burst</text>" in page  # legend entry for the hollow markers


def test_results_without_sweep_keys_or_records_still_render(make_sweep: SweepFactory) -> None:
    d = make_sweep("run", [8], verdict=False, telemetry=False)
    (d / "requests.jsonl").unlink()
    page = render_html(load_runs([d]))
    assert page.count("<svg") == MAIN_PLOTS
    assert "No request records saved for this run." in page
    assert "<h2>Summary</h2>" in page


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_server_telemetry_is_drawn_when_present(make_sweep: SweepFactory) -> None:
    with_server = render_html(load_runs([make_sweep("s", [64])]))
    without = render_html(load_runs([make_sweep("n", [64], telemetry=False)]))
    assert ">KV usage %</text>" in with_server and ">running</text>" in with_server
    assert ">KV usage %</text>" not in without


@pytest.mark.slow
def test_ten_level_report_stays_small(make_sweep: SweepFactory, tmp_path: Path) -> None:
    d = make_sweep("big", [2 ** k for k in range(10)], per_worker=8)
    assert len((d / "requests.jsonl").read_bytes().splitlines()) == 8 * (2 ** 10 - 1)
    out = write_html(load_runs([d]), tmp_path / "big.html")
    assert out.stat().st_size < 5_000_000
    assert out.read_text().count("<svg") == MAIN_PLOTS + 10


def test_bad_input(tmp_path: Path, make_sweep: SweepFactory) -> None:
    with pytest.raises(ResultsError, match="no results in"):
        write_html(load_runs([tmp_path / "nothing"]), tmp_path / "r.html")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        write_html(load_runs([make_sweep("a", [1])]), blocker / "r.html")
    with pytest.raises(ConfigError, match="it is a directory"):
        write_html(load_runs([tmp_path / "a"]), tmp_path)
