"""Plain tables (CSV, Markdown): flexible headers and units, and the two reference runs of seed-runs.md."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources
from plateau_bench.importers.common import MISSING_PREFIX, Where
from plateau_bench.importers.headers import classify
from plateau_bench.importers.table import parse_cell
from plateau_bench.report.tables import to_csv
from plateau_bench.result import LevelResult, ResultFile
from plateau_bench.run_view import ReportRun

from conftest import DATA, load

RUN_A = {256: (33.1, 3962.8, 32.88, 32.88, 32.97), 512: (65.7, 3988.1, 49.13, 65.23, 65.48),
         768: (98.5, 3991.2, 65.47, 65.50, 98.09), 1024: (131.2, 3997.0, 81.66, None, None)}


def _by_c(levels: list[LevelResult]) -> dict[int, LevelResult]:
    return {lv.concurrency or 0: lv for lv in levels}


def _missing(level: LevelResult) -> str:
    return next(n for n in level.notes if n.startswith(MISSING_PREFIX))


@pytest.mark.parametrize("name", ["run_a.md", "run_a.csv"])
def test_run_a_table_keeps_every_figure_and_no_other(name: str) -> None:
    levels = _by_c([lv.level for lv in load(name, output_len=512).levels])
    assert sorted(levels) == [256, 512, 768, 1024]
    for c, (wall, tok_s, avg, p50, p99) in RUN_A.items():
        lv = levels[c]
        assert (lv.mode, lv.num_requests, lv.completed, lv.failed) == ("burst", c, c, 0)
        assert lv.wall_s == lv.duration_s == pytest.approx(wall)
        assert lv.output_throughput == pytest.approx(tok_s)
        assert lv.e2e_ms.mean == pytest.approx(avg * 1000)
        assert lv.e2e_ms.p50 == (pytest.approx(p50 * 1000) if p50 else None)
        assert lv.e2e_ms.p99 == (pytest.approx(p99 * 1000) if p99 else None)
        assert lv.output_tokens == c * 512
        # Little's law over the whole burst: every request's flight lies inside the window.
        assert lv.achieved_concurrency == pytest.approx(c * avg / wall)
        assert lv.peak_decoding == 0 and lv.decoding_concurrency == 0.0 and lv.ttft_ms.mean is None
        assert "peak decoding" in _missing(lv) and "TTFT" in _missing(lv)
    # In a burst of C over a cap N (n = C/N waves of equal length) the sum of latencies is N*T*(1+..+n), so
    # achieved = N(n+1)/2 and N = 2 * achieved - C: the table carries the cap, though not as peak_decoding.
    for c in (512, 768, 1024):
        assert 2 * levels[c].achieved_concurrency - c == pytest.approx(256, rel=0.03)


def test_run_b_table_fills_only_the_2048_row_fully() -> None:
    imported = load("run_b.md", input_len=128, output_len=128)
    levels = _by_c([lv.level for lv in imported.levels])
    assert sorted(levels) == [1, 256, 512, 1024, 2048]
    top = levels[2048]
    assert top.output_throughput == pytest.approx(1639.69)
    assert top.peak_output_throughput == pytest.approx(3593.00)
    assert top.total_throughput == pytest.approx(3249.48)
    assert top.achieved_concurrency == pytest.approx(1254.38)
    assert top.tpot_ms.mean == pytest.approx(527.24)
    assert top.num_requests == 2048 and top.completed == 2048
    # The duration follows from the tokens the user says each request had, and says so.
    assert top.duration_s == pytest.approx(2048 * 128 / 1639.69)
    assert any("duration derived" in n for n in top.notes)
    assert any("failures not reported" in n for n in top.notes)
    assert levels[1024].tpot_ms.mean == pytest.approx(300.0)
    assert any("approximate" in n and "~300" in n for n in levels[1024].notes)
    for c in (1, 256, 512):
        lv = levels[c]
        assert lv.achieved_concurrency == 0.0 and lv.tpot_ms.mean is None and lv.peak_output_throughput == 0.0
        assert "achieved concurrency" in _missing(lv)
    # Not derived from TPOT: output tok/s x TPOT is a batch size only when every request has one length.
    assert top.decoding_concurrency == 0.0 and "decoding concurrency" in _missing(top)
    assert (imported.input_len, imported.output_len) == (128, 128)


@pytest.mark.parametrize(("header", "kind", "stat", "unit"), [
    ("C", "concurrency", None, None), ("num_prompts", "num_prompts", None, None),
    ("lat avg (s)", "e2e", "mean", "s"), ("lat p50 (s)", "e2e", "p50", "s"), ("TTFT [ms]", "ttft", "mean", "ms"),
    ("e2e_p99_ms", "e2e", "p99", "ms"), ("mean TPOT (ms)", "tpot", "mean", "ms"), ("ITL median", "itl", "p50", None),
    ("wall (s)", "wall", None, "s"), ("wall_s", "wall", None, "s"), ("duration", "wall", None, None),
    ("tok/s", "output_throughput", None, "tok/s"), ("output_tok_s", "output_throughput", None, "tok/s"),
    ("Total tok/s", "total_throughput", None, "tok/s"), ("peak output tok/s", "peak_output_throughput", None, "tok/s"),
    ("Request throughput (req/s)", "request_throughput", None, "req/s"),
    ("achieved concurrency", "achieved_concurrency", None, None), ("ok", "ok", None, None),
    ("qps", "rate", None, None), ("TTFT p95 (ms)", "unsupported", None, "ms"), ("colour", "", None, None),
])
def test_headers_are_matched_flexibly(header: str, kind: str, stat: str | None, unit: str | None) -> None:
    col = classify(0, header)
    assert (col.kind, col.unit) == (kind, unit)
    if stat is not None:
        assert col.stat == stat


def test_a_table_written_by_plateau_report_reads_back(tmp_path: Path) -> None:
    levels = [lv.level for lv in load("run_a.md", output_len=512).levels]
    csv_file = tmp_path / "levels.csv"
    csv_file.write_text(to_csv([ReportRun("a", tmp_path, ResultFile(kind="import", levels=levels))]))
    imported = import_sources([csv_file])
    assert imported.warnings == []   # the columns an import does not keep (time split, energy) are expected
    again = {lv.level.concurrency: lv.level for lv in imported.levels}
    for lv in levels:
        back = again[lv.concurrency]
        assert back.label == lv.label and back.mode == "burst"
        assert back.output_throughput == pytest.approx(lv.output_throughput)
        assert back.achieved_concurrency == pytest.approx(lv.achieved_concurrency)
        assert back.e2e_ms.p50 == (pytest.approx(lv.e2e_ms.p50) if lv.e2e_ms.p50 else None)
        assert back.wall_s == pytest.approx(lv.wall_s)


def test_mode_from_the_option_and_otherwise_said(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("concurrency,output tok/s,wall (s)\n8,100,10\n")
    (assumed,) = import_sources([f]).levels
    assert assumed.level.mode == "burst" and any("burst assumed" in n for n in assumed.level.notes)
    (steady,) = load("run_a.md", mode="steady").levels[:1]
    assert steady.level.mode == "steady" and not any("burst assumed" in n for n in steady.level.notes)


@pytest.mark.parametrize(("text", "message"), [
    ("model,tok/s\nx,100\n", "t.csv:1: missing field 'concurrency'"),
    ("C,tok/s\n8,100\n16,fast\n", "t.csv:3: field 'tok/s' is not a number ('fast')"),
    ("C,wall (s)\n8,10\n", "t.csv:2: missing field 'output tok/s'"),
    ("C,mode,tok/s\n8,sprint,100\n", "t.csv:2: field 'mode' is 'sprint'"),
    ("C,tok/s\n,100\n", "t.csv:2: missing field 'concurrency'"),
    ("| C | tok/s |\n|---|---|\n", "t.csv:1: the table has a header but no rows"),
])
def test_malformed_tables_say_file_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        import_sources([f])
    assert message in str(err.value) and "\n" not in str(err.value)


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0, max_value=1e7, allow_nan=False), st.sampled_from(["", "~", "≈ "]),
       st.sampled_from(["", " s", " ms", " tok/s"]))
def test_cells_read_back_the_number_written(value: float, prefix: str, unit: str) -> None:
    cell = parse_cell(f"{prefix}{value:,.3f}{unit}", Where("t.md", 3), "x")
    assert cell is not None and cell.value == pytest.approx(round(value, 3), abs=1e-9)
    assert cell.approx == bool(prefix) and cell.unit == (unit.strip() or None)


@settings(max_examples=25, deadline=None)
@given(st.permutations(range(7)))
def test_column_order_does_not_matter(order: list[int]) -> None:
    lines = (DATA / "run_a.md").read_text().splitlines()
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines if ln.startswith("|")]
    rows = [rows[0], *rows[2:]]
    shuffled = "\n".join(",".join(row[i] for i in order) for row in rows)
    reference = [lv.level for lv in load("run_a.md").levels]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shuffled.csv"
        path.write_text(shuffled)
        again = [lv.level for lv in import_sources([path]).levels]
    assert [(lv.concurrency, lv.output_throughput, lv.e2e_ms.mean, lv.wall_s) for lv in again] == [
        (lv.concurrency, lv.output_throughput, lv.e2e_ms.mean, lv.wall_s) for lv in reference]
