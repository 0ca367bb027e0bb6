"""``--repeat`` end to end over HTTP on the embedded twin: run, saved records, table, report and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import kept_attempts, load_requests, load_result

from support.loading import Cli


@pytest.mark.parametrize(("args", "fragment"), [
    (["run", "--concurrency", "2", "--repeat", "0"], "--repeat must be between 1 and 100"),
    (["sweep", "--repeat", "-1"], "--repeat must be between 1 and 100"),
    (["sim", "--repeat", "101"], "--repeat must be between 1 and 100"),
])
def test_bad_repeat_is_one_line(cli: Cli, args: list[str], fragment: str) -> None:
    done = cli(*args)
    assert done.exit_code == 2 and fragment in done.output and "Traceback" not in done.output
    assert done.output.strip().count("\n") == 0


def _run(cli: Cli, url: str, out: Path, concurrency: int, repeat: int) -> str:
    done = cli("run", "--url", url, "--concurrency", str(concurrency), "--num-requests", str(2 * concurrency),
               "--input-len", "32", "--output-len", "16", "--range-ratio", "0.5", "--repeat", str(repeat), "--quiet",
               "--out", str(out))
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_run_repeats_over_http_and_compare_tells_real_from_noise(cli: Cli, tmp_path: Path) -> None:
    with start_sim_server(get_preset("tiny"), speed=4.0) as twin:
        output = _run(cli, twin.url, tmp_path / "a", 4, 3)
        _run(cli, twin.url, tmp_path / "b", 4, 3)
        _run(cli, twin.url, tmp_path / "single", 4, 1)
    assert "between-run 95 % intervals" in output
    result = load_result(tmp_path / "a")
    assert result.spec.repeat == 3
    (level,) = result.levels
    assert [f.repeat for f in level.repeats] == [1, 2, 3]
    assert all(f.completed == f.num_requests == 8 for f in level.repeats)
    assert level.repeat_stats is not None and level.repeat_stats.n == 3
    # Every repeat's requests are saved under its own number; the readers count the first by default.
    assert len(load_requests(tmp_path / "a", attempts=kept_attempts(result))["C=4"]) == 8
    assert len(load_requests(tmp_path / "a", repeat=None)["C=4"]) == 24

    done = cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert done.exit_code == 0, done.output
    (pair,) = json.loads(done.output)["repeats"]
    assert pair["runs"] == ["a", "b"] and pair["cannot_tell"] is None
    (row,) = pair["levels"]
    assert row["level"] == "C=4" and row["repeats"] == [3, 3]
    assert {m["metric"] for m in row["metrics"]} >= {"output_throughput", "ttft_p99_ms", "e2e_p50_ms"}
    assert all(m["verdict"] in ("real", "within noise") for m in row["metrics"] if m["a"] and m["b"])
    assert set(row["metrics"][0]) == {"metric", "a", "b", "verdict", "welch"}

    done = cli("compare", str(tmp_path / "a"), str(tmp_path / "single"))
    assert done.exit_code == 0, done.output
    assert "cannot tell: single has no repeats" in " ".join(done.output.split())

    html = tmp_path / "r.html"
    done = cli("report", str(tmp_path / "a"), "--html", str(html))
    assert done.exit_code == 0, done.output
    assert "Between-run 95 % intervals" in html.read_text()
