"""Sweeps over real HTTP against the twin's server, through the CLI, with and without /metrics.

Each scenario runs a short fixed grid (or the adaptive search on the tiny preset) and checks the
verdict saved in result.json, so the whole path (client, load loop, scraper, health sampler,
analysis, result files) is exercised as a user runs it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from plateau_bench.records import RequestRecord
from plateau_bench.result import ResultFile
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import (
    ResultWriter,
    kept_attempts,
    load_requests,
    load_result,
    load_summary,
    load_telemetry,
)

from support.loading import Cli

pytestmark = pytest.mark.slow  # real-time sweeps over HTTP: 6-20 s each on two cores

FAST = ["--min-level-time", "1s", "--max-level-time", "3s", "--input-len", "32", "--output-len", "64",
        "--quiet"]


def sweep(cli: Cli, tmp_path: Path, config: EngineConfig, *args: str, metrics: bool = True, speed: float = 1.0,
          reject_when_waiting: int | None = None) -> dict[str, object]:
    out = tmp_path / "run"
    with start_sim_server(config, speed=speed, metrics=metrics, reject_when_waiting=reject_when_waiting) as twin:
        flags = ["sweep", "--url", twin.url, "--out", str(out), *FAST, *args]
        if not metrics:
            flags.append("--no-metrics")
        result = cli(*flags)
    assert result.exit_code == 0, result.output
    return load_summary(out)


@pytest.fixture(params=[True, False], ids=["metrics", "client-only"])
def metrics(request: pytest.FixtureRequest) -> Iterator[bool]:
    yield request.param


def test_tiny_adaptive_sweep_finds_the_cap(cli: Cli, tmp_path: Path, metrics: bool) -> None:
    config = get_preset("tiny").with_overrides(max_num_seqs=16)
    summary = sweep(cli, tmp_path, config, metrics=metrics)
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["constraint"] == "admission_cap"
    assert verdict["estimated_cap"] == 16
    knee = summary["knee"]
    assert isinstance(knee, dict) and 8 <= knee["concurrency"] <= 16
    if metrics:
        assert summary["target"]["engine"] == "vllm"  # type: ignore[index]
        assert any("(/metrics)" in e for e in verdict["evidence"])
        assert any("running" in line for lines in load_telemetry(tmp_path / "run").values() for line in lines)
    else:
        assert not any("(/metrics)" in e for e in verdict["evidence"])
    # Every finished request is on disk, one line each, and the summary counts match.
    levels = summary["levels"]
    assert isinstance(levels, list)
    saved = load_requests(tmp_path / "run")
    assert sum(lv["completed"] + lv["failed"] for lv in levels) == sum(
        1 for recs in saved.values() for r in recs if not r.warmup)
    assert all(lv["num_requests"] == lv["completed"] + lv["failed"] for lv in levels)


def test_kv_capacity_with_preemptions_as_evidence(cli: Cli, tmp_path: Path, metrics: bool) -> None:
    config = get_preset("tiny").with_overrides(max_num_seqs=64, kv_tokens=3000)
    summary = sweep(cli, tmp_path, config, "--concurrency", "4,8,16,32,64", "--output-len", "256", metrics=metrics)
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["constraint"] == "kv_capacity", verdict
    if metrics:
        assert any("preemptions" in e for e in verdict["evidence"])


def test_compute_saturation(cli: Cli, tmp_path: Path, metrics: bool) -> None:
    config = get_preset("compute-bound").with_overrides(t0_ms=1.0, a_ms=0.2)
    summary = sweep(cli, tmp_path, config, "--concurrency", "2,4,8,16,32,64,128", metrics=metrics, speed=2.0)
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["constraint"] == "compute", verdict


def test_rate_limiting_is_named(cli: Cli, tmp_path: Path) -> None:
    config = get_preset("tiny").with_overrides(max_num_seqs=8)
    summary = sweep(cli, tmp_path, config, "--concurrency", "2,4,8,16,32", "--max-error-rate", "0.9",
                    reject_when_waiting=4)
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["constraint"] == "errors"
    assert "429" in verdict["headline"]


def test_starved_load_generator_is_named_first(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A load generator that cannot keep up: 8 ms of CPU on its event loop for every finished request.
    original = ResultWriter.add_request

    def slow_add_request(self: ResultWriter, level: str, record: RequestRecord, attempt: int = 1,
                         repeat: int = 1) -> None:
        until = time.perf_counter() + 0.008
        while time.perf_counter() < until:
            pass
        original(self, level, record, attempt, repeat)

    monkeypatch.setattr(ResultWriter, "add_request", slow_add_request)
    config = get_preset("tiny").with_overrides(max_num_seqs=256)
    summary = sweep(cli, tmp_path, config, "--concurrency", "8,32,128", metrics=True)
    verdict = summary["verdict"]
    assert isinstance(verdict, dict)
    assert verdict["constraint"] == "load_generator", verdict


@pytest.mark.timeout(300)  # up to 60 s to reach two levels, 30 s to stop, then the resumed sweep
def test_ctrl_c_keeps_finished_levels_and_resume_continues(cli: Cli, tmp_path: Path) -> None:
    config = get_preset("tiny").with_overrides(max_num_seqs=8)
    out = tmp_path / "run"
    grid = ["--concurrency", "2,4,8,16,32"]
    with start_sim_server(config, speed=4.0) as twin:
        args = [sys.executable, "-m", "plateau_bench", "sweep", "--url", twin.url, "--out", str(out), *FAST, *grid]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (out / "result.json").exists() and len(load_summary(out)["levels"]) >= 2:  # type: ignore[arg-type]
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert b"--resume" in err
        kept = load_summary(out)["levels"]
        assert isinstance(kept, list) and 2 <= len(kept) < 5
        assert sum(len(v) for v in load_requests(out).values()) >= sum(lv["completed"] for lv in kept)

        differs = cli("sweep", "--url", twin.url, "--resume", str(out), *FAST, *grid, "--output-len", "65")
        assert differs.exit_code == 2
        assert "made with another spec" in differs.output and "output_len" in differs.output

        resumed = cli("sweep", "--url", twin.url, "--resume", str(out), *FAST, *grid)
        assert resumed.exit_code == 0, resumed.output
    summary = load_summary(out)
    levels = summary["levels"]
    assert isinstance(levels, list)
    assert sorted(lv["concurrency"] for lv in levels) == [2, 4, 8, 16, 32]
    # The levels measured before the interruption are kept as they were; the one the Ctrl-C ended at once is
    # kept too when requests had finished in it, and measured again (the next attempt) when none had.
    for before, after in zip(kept, levels, strict=False):
        assert after == before or (before["completed"] == 0 and after["attempt"] == before["attempt"] + 1), before
    # Only the kept attempt's records count: the interrupted level's records stay on disk, apart.
    kept_records = load_requests(out, attempts=kept_attempts(load_result(out)))
    for lv in levels:
        assert len(kept_records[lv["label"]]) == lv["num_requests"]
    assert summary["verdict"]["constraint"] == "admission_cap"  # type: ignore[index]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_the_sweep_and_its_twin_within_2_s(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    import psutil

    out = tmp_path / "run"
    args = [sys.executable, "-m", "plateau_bench", "sweep", "--out", str(out), *FAST,
            "--concurrency", "2,4,8,16,32,64"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
            (out / "result.json").exists() and len(load_summary(out)["levels"]) >= 2):  # type: ignore[arg-type]
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the embedded twin runs as a child process"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert proc.returncode == code, err
    assert b"--resume" in err
    gone_by = time.monotonic() + 2.0
    while time.monotonic() < gone_by and any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                                             for c in children):
        time.sleep(0.05)
    assert not [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert len(load_summary(out)["levels"]) >= 2  # type: ignore[arg-type]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_load_processes_and_keeps_their_records(tmp_path: Path, sig: signal.Signals,
                                                                    code: int) -> None:
    import psutil

    out = tmp_path / "run"
    args = [sys.executable, "-m", "plateau_bench", "sweep", "--out", str(out), "--quiet", "--workers", "2",
            "--concurrency", "8,16", "--min-level-time", "50s", "--max-level-time", "60s", "--output-len", "64",
            "--sim-speed", "4"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    requests = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (requests.exists() and requests.stat().st_size > 20_000):
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 3, "the twin and two load processes run as children"
    sent = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5.0
    assert proc.returncode == code, err
    assert b"Traceback" not in err and b"--resume" in err
    gone_by = time.monotonic() + 3.0
    while time.monotonic() < gone_by and any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                                             for c in children):
        time.sleep(0.05)
    assert not [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    # every finished request of the interrupted level is on disk, whole, once, from both processes
    lines = [json.loads(line) for line in requests.read_text().splitlines()]
    records = [msgspec.convert(line["record"], RequestRecord) for line in lines if line["level"] == "C=8"]
    assert len(records) >= 20 and len({r.index for r in records}) == len(records)
    assert {r.index % 2 for r in records} == {0, 1}
    assert all(r.error is None for r in records)


def test_a_steady_sweep_measures_the_workload_not_the_prefix_cache(cli: Cli, tmp_path: Path) -> None:
    """Long prompts, every one new: with prefix caching on, the twin finds next to nothing cached and
    serves what it serves with caching off. (Prompts cycled from a pool of 2 x the widest C, and
    restarted at every level, read hit rates of 0.5-0.99 here and a gain that was the cache.)"""
    prefill_heavy = get_preset("tiny").with_overrides(b_ms=0.02)   # 20 ms to prefill 1,024 tokens
    long = ["--mode", "steady", "-c", "4,8,16", "--input-len", "1024", "--output-len", "16"]
    cached = sweep(cli, tmp_path / "on", prefill_heavy, *long)
    cold = sweep(cli, tmp_path / "off", msgspec.structs.replace(prefill_heavy, prefix_caching=False), *long)
    for on, off in zip(cached["levels"], cold["levels"], strict=True):  # type: ignore[call-overload]
        figures = f"{on['label']}: {on['output_throughput']:.0f} vs {off['output_throughput']:.0f} tok/s"
        assert on["telemetry"]["prefix_cache_hit_rate"] <= 0.02, figures
        assert on["prompts"]["repeated"] == 0 and on["prompts"]["requests"] > 2 * 16, on["prompts"]
        assert on["output_throughput"] == pytest.approx(off["output_throughput"], rel=0.2), figures
    assert cached["verdict"]["constraint"] != "measurement"  # type: ignore[index]


def test_a_dataset_is_taken_in_turn_across_levels_and_ends_the_sweep_when_it_runs_out(cli: Cli, tmp_path: Path) -> None:
    data = tmp_path / "sixty.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"question {i} " + "word " * 30}) + "\n" for i in range(60)))
    summary = sweep(cli, tmp_path, get_preset("tiny"), "--mode", "steady", "-c", "2,4,8,16,32", "--dataset", str(data))
    levels = summary["levels"]
    uses = [lv["prompts"] for lv in levels]  # type: ignore[union-attr]
    assert [u["dataset_from"] for u in uses] == [sum(u["span"] for u in uses[:i]) for i in range(len(uses))]
    assert sum(u["requests"] for u in uses) == 60 and all(u["repeated"] == 0 for u in uses)
    assert uses[-1]["exhausted"] and not any(u["exhausted"] for u in uses[:-1])
    assert "the dataset ran out of prompts at" in str(summary["stop_reason"])
    assert any("the dataset ran out of prompts after" in note for note in levels[-1]["notes"])  # type: ignore[index]


def test_a_second_run_against_the_same_server_sends_new_prompts_unless_given_the_first_ones_salt(
        cli: Cli, tmp_path: Path) -> None:
    """A server's prefix cache outlives a run: the same --seed again measures the same lengths with new
    text, and the first run's salt sends its prompts again, which the verdict names as a fault."""
    with start_sim_server(get_preset("tiny").with_overrides(b_ms=0.02)) as twin:
        def run(name: str, *extra: str) -> ResultFile:
            out = tmp_path / name
            result = cli("run", "--url", twin.url, "--mode", "steady", "--concurrency", "4", "--duration", "2s",
                         "--input-len", "512", "--output-len", "8", "--out", str(out), "--quiet", *extra)
            assert result.exit_code == 0, result.output
            return load_result(out)

        first = run("first")
        again = run("again", "--prompt-salt", str(first.spec.workload.prompt_salt))  # before the cache evicts it
        second = run("second")
    salts = [r.spec.workload.prompt_salt for r in (first, second, again)]
    assert salts[0] is not None and salts[0] != salts[1] and salts[2] == salts[0]
    rates = [r.levels[0].telemetry.prefix_cache_hit_rate for r in (first, second, again)]
    assert rates[0] is not None and rates[1] is not None and rates[2] is not None
    assert rates[0] <= 0.02 and rates[1] <= 0.02, rates
    assert rates[2] >= 0.5, rates
    assert again.verdict is not None and again.verdict.constraint == "measurement", again.verdict


@pytest.mark.slow   # a few seconds of real time against a twin whose every request hangs
@pytest.mark.timeout(90)
def test_max_level_time_bounds_a_level_whose_requests_never_finish(cli: Cli, tmp_path: Path) -> None:
    """The level lasts --max-level-time, not the client's --timeout: what never answered is hung, not lost."""
    from plateau_bench.sim.faults import FaultSpec

    out = tmp_path / "hung"
    with start_sim_server(get_preset("tiny"), faults=FaultSpec(hang=1.0)) as twin:
        began = time.monotonic()
        result = cli("sweep", "--url", twin.url, "--concurrency", "4", "--min-level-time", "1s",
                     "--max-level-time", "3s", "--timeout", "600s", "--output-len", "16", "--quiet",
                     "--out", str(out))
        took = time.monotonic() - began
    assert "Traceback" not in result.output
    (level,) = load_result(out).levels
    assert level.num_requests == level.failed == 4 and level.completed == 0
    assert level.errors.get("hung") == 4 and level.wall_s <= 3.0 + 0.5
    assert any("--max-level-time (3 s)" in n for n in level.notes), level.notes
    assert took < 3.0 + 15.0   # start, analysis and saving; the old drain took 3 s more, the client 600 s


@pytest.mark.timeout(120)
def test_resume_measures_again_a_level_whose_records_the_disk_did_not_keep(cli: Cli, tmp_path: Path) -> None:
    """A full disk can keep a level's summary (a small file) and lose the end of its records (a large one):
    resuming measures that level again instead of keeping a summary whose requests are not all on disk."""
    config = get_preset("tiny").with_overrides(max_num_seqs=8)
    out = tmp_path / "run"
    grid = ["--concurrency", "2,4"]
    with start_sim_server(config, speed=4.0) as twin:
        first = cli("sweep", "--url", twin.url, "--out", str(out), *FAST, *grid)
        assert first.exit_code == 0, first.output
        requests = out / "requests.jsonl"
        lines = requests.read_bytes().splitlines(keepends=True)
        c2_lines = [i for i, line in enumerate(lines) if json.loads(line)["level"] == "C=2"]
        del lines[c2_lines[-1]]   # the last record of C=2 never reached the disk
        requests.write_bytes(b"".join(lines))
        resumed = cli("sweep", "--url", twin.url, "--resume", str(out), *FAST, *grid)
        assert resumed.exit_code == 0, resumed.output
    result = load_result(out)
    attempts = {lv.label: lv.attempt for lv in result.levels}
    assert attempts == {"C=2": 2, "C=4": 1}
    kept_records = load_requests(out, attempts=kept_attempts(result))
    for lv in result.levels:
        assert len(kept_records[lv.label]) == lv.num_requests
