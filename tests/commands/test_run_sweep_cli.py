"""`plateau run` / `plateau sweep`: bad input is one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from plateau_bench.result import ResultFile

from support.loading import Cli


@pytest.mark.parametrize(("args", "fragment"), [
    (["run", "--concurrency", "0"], "--concurrency must be a positive integer"),
    (["run", "--concurrency", "4", "--duration", "-5s"], "duration must be positive"),
    (["run", "--rate", "0", "--duration", "10s"], "--rate must be > 0"),
    (["run", "--mode", "burst", "--concurrency", "4", "--duration", "10s"], "cannot take --duration"),
    (["run", "--concurrency", "4", "--endpoint", "embeddings"], "--endpoint must be"),
    (["run", "--concurrency", "4", "--url", "ftp://x"], "--url must start with http"),
    (["run", "--concurrency", "4", "--header", "novalue"], "--header must look like Name:value"),
    (["run", "--concurrency", "4", "--dataset", "/nonexistent/file.jsonl"], "cannot read dataset"),
    (["run", "--concurrency", "4", "--tokenizer", "/nonexistent/tok"], "no such file or directory"),
    (["run", "--concurrency", "4", "--input-len", "0"], "--input-len must be >= 1"),
    (["run", "--url", "http://127.0.0.1:9", "--concurrency", "2"], "cannot reach http://127.0.0.1:9"),
    (["sweep", "--mode", "burst", "--rate", "auto"], "cannot be combined with --rate"),
    (["sweep", "--rate", "fast"], "is not a number"),
    (["sweep", "--rate", "auto", "--concurrency", "1,2"], "drop --concurrency"),
    (["sweep", "--slo", "ttft_p42=1s"], "unknown statistic"),
    (["sweep", "--slo", "latency_p99=1s"], "unknown metric"),
    (["sweep", "--budget", "2s"], "below one level"),
    (["sweep", "--concurrency", "1,x"], "is not an integer"),
    (["sweep", "--mode", "open"], "--mode must be steady or burst"),
    (["sweep", "--precision", "2"], "--precision must be in (0, 1)"),
])
def test_bad_input_is_one_line(cli: Cli, args: list[str], fragment: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0


def test_unwritable_output_directory(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = cli("run", "--concurrency", "1", "--num-requests", "1", "--out", str(blocker / "sub"),
                 "--quiet")
    assert result.exit_code == 2
    assert "cannot write to output directory" in result.output


def test_resume_of_a_directory_without_results(cli: Cli, tmp_path: Path) -> None:
    result = cli("sweep", "--resume", str(tmp_path), "--quiet")
    assert result.exit_code == 2
    assert "result.json not found" in result.output


def test_diagnose_bad_directories(cli: Cli, tmp_path: Path) -> None:
    result = cli("diagnose", str(tmp_path))
    assert result.exit_code == 2 and "no results" in result.output
    (tmp_path / "result.json").write_text('{"schema_version": 99, "levels": []}')
    result = cli("diagnose", str(tmp_path))
    assert result.exit_code == 2 and "schema 99" in result.output


def test_api_key_never_reaches_output_or_results(cli: Cli, tmp_path: Path) -> None:
    secret = "sk-test-0123456789abcdef"
    out = tmp_path / "run"
    result = cli("run", "--concurrency", "2", "--num-requests", "4", "--output-len", "8",
                 "--api-key", secret, "--header", "X-Api-Token:" + secret, "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    for f in out.iterdir():
        assert secret not in f.read_text(), f.name


@pytest.mark.slow
def test_results_already_in_out_are_never_replaced_silently(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--concurrency", "2", "--num-requests", "2", "--output-len", "4", "--out", str(out), "--quiet"]
    assert cli(*args).exit_code == 0
    before = (out / "requests.jsonl").read_bytes()
    result = cli(*args)
    assert result.exit_code == 2 and "already holds results" in result.output
    assert "--overwrite" in result.output and "--resume" in result.output
    assert (out / "requests.jsonl").read_bytes() == before
    assert cli(*args, "--overwrite").exit_code == 0


def test_an_empty_url_is_an_error_not_the_simulator(cli: Cli) -> None:
    result = cli("run", "--url", "", "--concurrency", "1")
    assert result.exit_code == 2 and "--url is empty" in result.output


def test_a_level_without_one_successful_request_exits_1_and_says_why(cli: Cli, tmp_path: Path) -> None:
    from plateau_bench.sim.embed import start_sim_server
    from plateau_bench.sim.faults import parse_faults
    from plateau_bench.sim.presets import get_preset

    with start_sim_server(get_preset("tiny"), faults=parse_faults("http_500=1")) as twin:
        result = cli("run", "--url", twin.url, "--concurrency", "2", "--num-requests", "6",
                     "--output-len", "4", "--quiet")
    assert result.exit_code == 1, result.output
    assert "0/6 ok (6 err)" in result.output and "http_5xx 6" in result.output
    assert "Verdict: errors from" in result.output and "rate limit" not in result.output
    assert "the server fails requests under load (5xx)" in result.output


@pytest.mark.slow
def test_url_passwords_and_named_secret_headers_never_reach_output_or_results(cli: Cli, tmp_path: Path) -> None:
    from plateau_bench.sim.embed import start_sim_server
    from plateau_bench.sim.presets import get_preset

    secret = "hunter2-do-not-print"
    out = tmp_path / "sweep"
    with start_sim_server(get_preset("tiny")) as twin:
        url = twin.url.replace("http://", f"http://alice:{secret}@")
        result = cli("sweep", "--url", url, "--concurrency", "1,2", "--max-level-time", "2s",
                     "--min-level-time", "1s", "--output-len", "8", "--header", f"X-Tenant:{secret}",
                     "--secret-header", "X-Tenant", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    assert secret not in result.output
    for f in out.iterdir():
        assert secret not in f.read_text(), f.name
    assert "***" in (out / "result.json").read_text()


@pytest.mark.slow
def test_gpu_metrics_from_a_dcgm_exporter_are_summarised_per_level(cli: Cli, tmp_path: Path) -> None:
    import http.server
    import threading

    page = (Path(__file__).resolve().parents[1] / "telemetry" / "data" / "dcgm_h100_node_a.prom").read_bytes()

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "run"
    try:
        result = cli("run", "--concurrency", "4", "--duration", "2s", "--output-len", "16", "--out", str(out),
                     "--gpu-metrics-url", f"http://127.0.0.1:{server.server_address[1]}", "--quiet")
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.output
    (level,) = json.loads((out / "result.json").read_text())["levels"]
    assert level["gpu_metrics"]["gpus"] == 4 and level["gpu_metrics"]["power_w_mean"] > 0
    assert '"source":"dcgm"' in (out / "telemetry.jsonl").read_text()


def test_a_bad_gpu_metrics_url_is_one_line(cli: Cli) -> None:
    result = cli("run", "--concurrency", "1", "--gpu-metrics-url", "ftp://x")
    assert result.exit_code == 2 and "--gpu-metrics-url must start with http" in result.output


def test_report_exports_vllm_json_that_import_reads_back(cli: Cli, tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    assert cli("sim", "--concurrency", "4,16", "--output-len", "16", "--out", str(sim)).exit_code == 0
    exported = tmp_path / "levels.jsonl"
    assert cli("report", str(sim), "--format", "vllm-json", "--output", str(exported)).exit_code == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [line["max_concurrency"] for line in lines] == [4, 16]
    assert cli("import", str(exported), "--out", str(tmp_path / "back")).exit_code == 0
    back = json.loads((tmp_path / "back" / "result.json").read_text())["levels"]
    original = json.loads((sim / "result.json").read_text())["levels"]
    for a, b in zip(original, back, strict=True):
        assert b["output_throughput"] == pytest.approx(a["output_throughput"], rel=1e-6)


def test_refusals_are_counted_by_status_with_the_retry_after_asked(cli: Cli, tmp_path: Path) -> None:
    from plateau_bench.sim.embed import start_sim_server
    from plateau_bench.sim.faults import parse_faults
    from plateau_bench.sim.presets import get_preset

    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny"), faults=parse_faults("http_429=0.5,http_500=0.5,retry_after_s=7")) as twin:
        result = cli("run", "--url", twin.url, "--concurrency", "4", "--num-requests", "12",
                     "--output-len", "4", "--out", str(out), "--quiet")
    assert result.exit_code == 1, result.output
    (level,) = json.loads((out / "result.json").read_text())["levels"]
    assert sum(level["http_statuses"].values()) == 12 and set(level["http_statuses"]) <= {"429", "500"}
    assert level["retry_after_s_max"] == 7
    assert "HTTP statuses: " in result.output and "Retry-After" in result.output


@pytest.mark.parametrize(("args", "fragment"), [
    (["sweep", "--find", "sideways", "--slo", "ttft_p99=1s"], "--find must be max-concurrency or max-rate"),
    (["sweep", "--find", "max-rate", "--slo", "ttft_p99=1s", "--resolution", "2"], "--resolution must be in (0, 1)"),
    (["sweep", "--find", "max-rate"], "give --slo too"),
    (["sweep", "--find", "max-rate", "--slo", "ttft_p99=1s", "--start-rate", "-1"], "--start-rate must be > 0"),
    (["schema", "--out", "/nonexistent/dir/schema.json"], "cannot write /nonexistent/dir/schema.json"),
    (["run", "--concurrency", "4", "--workers", "0"], "--workers must be between 1 and"),
    (["sweep", "--workers", "lots"], "--workers must be a number of processes or 'auto'"),
    (["run", "--concurrency", "4", "--prompt-salt", "-1"], "--prompt-salt must be >= 0"),
    (["sweep", "--allow-reuse"], "--allow-reuse repeats a --dataset's prompts"),
])
def test_new_flags_answer_bad_values_in_one_line(cli: Cli, args: list[str], fragment: str) -> None:
    result = cli(*args)
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0


def _run_until_records(out: Path, *flags: str, size: int = 2_000) -> subprocess.Popen[bytes]:
    """``plateau run`` against the embedded twin, returned once ``requests.jsonl`` holds ``size`` bytes.
    It leads a process group of its own, so ``_ctrl_c`` reaches it as a terminal's Ctrl-C would."""
    proc = subprocess.Popen([sys.executable, "-m", "plateau_bench", "run", "--concurrency", "4", "--duration", "60s",
                             "--quiet", "--out", str(out), *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    requests = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (requests.exists() and requests.stat().st_size > size):
        time.sleep(0.1)
    return proc


def _ctrl_c(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the whole process group, as a terminal sends it: the embedded twin must not stop with it."""
    os.killpg(proc.pid, signal.SIGINT)


def _last_line_after_ctrl_c(proc: subprocess.Popen[bytes], err: bytes) -> str:
    """What every command ended by Ctrl-C shares (exit 130, no traceback, the first Ctrl-C's line, then
    one more); returns that last line."""
    assert proc.returncode == 130, err
    lines = err.decode().strip().splitlines()
    assert b"Traceback" not in err and len(lines) == 2, err
    assert lines[0] == ("plateau: ending the level now (the requests in flight are cancelled, what finished is kept); "
                        "Ctrl-C again to stop at once")
    return lines[1]


@pytest.mark.slow   # a real-time run against the embedded twin, 5-20 s
@pytest.mark.timeout(120)
def test_sigterm_ends_a_run_at_once_with_one_line_naming_its_records(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run_until_records(out, "--output-len", "32")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in err, err
    assert b"stopped by SIGTERM" in err and str(out / "requests.jsonl").encode() in err
    assert len((out / "requests.jsonl").read_text().splitlines()) >= 2   # what finished before it is kept


@pytest.mark.slow   # a real-time run against the embedded twin, 5-20 s
@pytest.mark.timeout(120)
def test_a_first_ctrl_c_ends_the_level_early_and_keeps_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _run_until_records(out, "--output-len", "32")
    _ctrl_c(proc)
    stdout, err = proc.communicate(timeout=60)
    assert _last_line_after_ctrl_c(proc, err) == \
        "plateau: interrupted (Ctrl-C): the level ended early, its figures cover what it ran"
    result = msgspec.json.decode((out / "result.json").read_bytes(), type=ResultFile)
    (level,) = result.levels
    # The requests in flight were cancelled, not counted as failures; every one that finished has a record.
    assert level.completed > 0 and level.failed == 0 and level.output_throughput > 0
    assert level.completed == len((out / "requests.jsonl").read_text().splitlines())
    assert level.cancelled_at_end > 0   # four workers always have requests in flight
    assert any(n.startswith("ended by Ctrl-C at ") for n in level.notes), level.notes
    assert b"tok/s" in stdout


@pytest.mark.slow   # a real-time sweep of the embedded twin, cut after its second level: 10-30 s
@pytest.mark.timeout(180)
def test_a_first_ctrl_c_ends_a_sweep_after_the_level_it_ends_early(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "plateau_bench", "sweep", "--min-level-time", "2s",
                             "--max-level-time", "30s", "--output-len", "32", "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    saved = out / "result.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        levels = msgspec.json.decode(saved.read_bytes(), type=ResultFile).levels if saved.exists() else []
        if len(levels) >= 2:
            break
        time.sleep(0.2)
    # Into the third level, far enough that its window is open: a warm level closed by Ctrl-C before it measured
    # anything keeps no level of its own (driver.warm_level), which a fixed wait here left to the machine's load.
    third = f'{{"level":"C={2 * (levels[-1].concurrency or 1)}"'
    while time.monotonic() < deadline and sum(
            line.startswith(third) for line in (out / "requests.jsonl").read_text().splitlines()) < 8:
        time.sleep(0.2)
    time.sleep(1.0)   # the level's checks run every 0.5 s: one more has seen its window
    _ctrl_c(proc)
    stdout, err = proc.communicate(timeout=90)
    assert _last_line_after_ctrl_c(proc, err) == (
        f"plateau: interrupted (Ctrl-C): the sweep stopped after the level it ended early; its levels are saved "
        f"in {out} (continue with --resume {out})")
    result = msgspec.json.decode(saved.read_bytes(), type=ResultFile)
    ended = [lv for lv in result.levels if any(n.startswith("ended by Ctrl-C") for n in lv.notes)]
    assert len(result.levels) >= 3 and ended == [result.levels[-1]], [lv.notes for lv in result.levels]
    assert ended[0].completed > 0 and ended[0].failed == 0
    assert result.stop_reason == f"stopped by Ctrl-C, which ended {ended[0].label} early"
    assert b"Verdict" in stdout


@pytest.mark.slow   # two real-time sweeps of the embedded twin, ~5 s each
@pytest.mark.parametrize("levels", ["--cold-levels", "--warm-levels"])
def test_no_drain_cancels_the_requests_in_flight_at_a_precise_stop(cli: Cli, tmp_path: Path, levels: str) -> None:
    from plateau_bench.store import load_result

    cancelled: dict[bool, list[int]] = {}
    for drain in (False, True):
        out = tmp_path / f"drain-{drain}"
        args = ["sweep", "--concurrency", "4,8", "--min-level-time", "1s", "--max-level-time", "10s", levels,
                "--precision", "0.2", "--input-len", "16", "--output-len", "32", "--out", str(out), "--quiet"]
        result = cli(*args, *([] if drain else ["--no-drain"]))
        assert result.exit_code == 0, result.output
        saved = load_result(out)
        assert saved.spec is not None and saved.spec.sweep is not None and saved.spec.sweep.drain is drain
        cancelled[drain] = [lv.cancelled_at_end for lv in saved.levels]
    assert cancelled[True] == [0, 0]
    if levels == "--cold-levels":   # each level that stops on its interval cancels what it has in flight
        assert all(n > 0 for n in cancelled[False])
    else:                           # warm: the load goes on between levels; only the sweep's end cancels
        assert cancelled[False][0] == 0 and cancelled[False][1] > 0


def _dataset(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"question {i} " + "word " * 20}) + "\n" for i in range(n)))
    return path


def test_allow_reuse_is_for_datasets_and_a_short_dataset_is_refused_before_any_request(cli: Cli,
                                                                                       tmp_path: Path) -> None:
    result = cli("run", "--concurrency", "4", "--allow-reuse")
    assert result.exit_code == 2 and "--allow-reuse repeats a --dataset's prompts" in result.output
    data = _dataset(tmp_path / "five.jsonl", 5)
    result = cli("run", "--mode", "burst", "--concurrency", "8", "--dataset", str(data), "--quiet")
    assert result.exit_code == 2, result.output
    assert "has 5 prompts and the run sends 8: give --allow-reuse" in result.output
    assert "Traceback" not in result.output
    result = cli("run", "--mode", "burst", "--concurrency", "4", "--repeat", "2", "--dataset", str(data),
                 "--quiet")
    assert result.exit_code == 2 and "has 5 prompts and the run sends 8" in result.output, result.output


def test_a_short_dataset_repeats_only_with_allow_reuse_and_every_repeat_is_counted(cli: Cli, tmp_path: Path) -> None:
    data = _dataset(tmp_path / "five.jsonl", 5)
    out = tmp_path / "reused"
    result = cli("run", "--mode", "burst", "--concurrency", "8", "--dataset", str(data), "--allow-reuse",
                 "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    (level,) = msgspec.json.decode((out / "result.json").read_bytes(), type=ResultFile).levels
    assert level.prompts is not None
    assert (level.prompts.requests, level.prompts.repeated, level.prompts.dataset_from) == (8, 3, 0)
    assert level.prompts.repeated_tokens > 0
