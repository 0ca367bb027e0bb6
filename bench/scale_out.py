"""Scaling the load out over processes (``--workers``): what one machine's load generator delivers.

Usage: ``.venv/bin/python bench/scale_out.py [--quick] [--json PATH] [--workers -,1,2,auto]
[--levels 256,1024,...] [--server-cores N]``

``--server-cores N`` gives serve-sim the first N cores this process may use and the load processes
the rest (both by affinity, which the pool's processes inherit and ``auto`` counts), so that server
and client do not share cores: on a machine with cores to spare, what ``--workers`` itself gives.
Without it (the default) they share every core.

``plateau serve-sim`` runs in a child process (preset ``tiny`` with its cap lifted to 16,384 and a
KV cache for all of them, ``--speed 4``, ``--backlog 8192``). Its step time grows by 0.1 ms per
sequence, so the engine's demand stays near ``speed / 0.1 ms`` = ~40,000 tokens/s at every
concurrency: a 256-stream level streams a token every ~7 ms per stream, an 8,192-stream level one
every ~200 ms. Each steady level (closed loop, 32-token answers, ``DURATION_S`` of load, then the drain) runs
through the same runner as ``plateau run``, with the load in this process (``-``) or in a pool of
1, 2 or ``auto`` processes started once per configuration, as a sweep does. Each record is
encoded as JSON as it arrives, as the result writer would.

Per level:

* ``tok/s``: output throughput over the level's steady window (``analysis``, as every result);
* ``cpu ms/1k``: CPU time (user + system) of every load process (the coordinator included) over the
  whole level, per 1,000 tokens streamed; ``srv ms/1k`` the same for serve-sim;
* ``lag p99``: the event-loop lag p99 of the busiest load process (ms);
* ``TTFT err``: the client's mean TTFT minus the engine's own mean TTFT for the same requests (the
  difference of serve-sim's ``vllm:time_to_first_token_seconds`` histogram over the level): both
  paths of the error together, out (the client's send, the server's read) and back (the server's
  write, the client's read); ``bench/client_overhead.py`` splits them against a logging server;
* ``connect p99``: the time requests waited for a connection (a listen backlog that overflowed
  costs 1 s and more of SYN retries);
* ``failed``: failed or hung requests (a request still in flight when the drain's grace period ends
  is hung: a load generator too slow to connect its requests makes them late, not lost);
* ``lost`` (per configuration, after the table): requests the engine finished that the client has no
  record of at all (its histogram's count less the client's records, when positive).

This machine has two cores and serve-sim shares them with the load processes, so the figures show
what two cores give to server and client together: more load processes than cores only share
them, and the server's own CPU bounds the throughput. Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from plateau_bench.aio import run as run_async
from plateau_bench.analysis.level import build_level
from plateau_bench.driver.limits import ensure_open_files, files_needed
from plateau_bench.driver.pool import WorkerPool
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.driver.split import usable_cores
from plateau_bench.records import RequestRecord
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.workload.prompts import Prompt

SPEED = 4.0
DURATION_S = 6.0
OUTPUT_TOKENS = 32
LEVELS = (256, 1024, 2048, 4096, 8192)
CONFIGS: tuple[int | str | None, ...] = (None, 1, 2, "auto")
_TTFT = re.compile(r'^vllm:time_to_first_token_seconds_(sum|count)\{[^}]*\} (\S+)$', re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _split_cores(server_cores: int | None) -> tuple[list[int] | None, list[int] | None]:
    """(serve-sim's cores, the load's cores) by affinity; (None, None) to share them all."""
    if not server_cores:
        return None, None
    cores = sorted(os.sched_getaffinity(0))
    if server_cores >= len(cores):
        raise SystemExit(f"--server-cores {server_cores}: only {len(cores)} cores here, none left for the load")
    return cores[:server_cores], cores[server_cores:]


def _serve_sim(cores: list[int] | None) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    args = [sys.executable, "-m", "plateau_bench", "serve-sim", "--preset", "tiny", "--max-num-seqs", "16384",
            "--kv-tokens", "4000000", "--speed", f"{SPEED:g}", "--backlog", "8192", "--port", str(port)]
    src = str(Path(__file__).resolve().parents[1] / "src")   # serve-sim from this checkout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (src, os.environ.get("PYTHONPATH")))))
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, preexec_fn=pin)
    assert proc.stderr is not None
    for line in proc.stderr:
        if b"Ctrl-C to stop" in line:
            break
    return proc, f"http://127.0.0.1:{port}"


async def _engine_ttft(url: str) -> tuple[float, float]:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as resp:
        text = await resp.text()
    values = {m.group(1): float(m.group(2)) for m in _TTFT.finditer(text)}
    return values.get("sum", 0.0), values.get("count", 0.0)


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


async def _level(runner: HttpLevelRunner, url: str, c: int, pids: list[int], server_pid: int) -> dict[str, Any]:
    sink = bytearray()

    def on_record(record: RequestRecord) -> None:   # what the result writer does with each record
        sink.extend(msgspec.json.encode(record))
        if len(sink) > 1 << 24:
            sink.clear()

    ttft_before = await _engine_ttft(url)
    cpu_before, server_before = _cpu_s(pids), _cpu_s([server_pid])
    run = await runner.run_level(LevelSpec(mode="steady", concurrency=c, duration_s=DURATION_S), label=f"C={c}",
                                 on_record=on_record, stop_rule=None)
    cpu, server_cpu = _cpu_s(pids) - cpu_before, _cpu_s([server_pid]) - server_before
    ttft_after = await _engine_ttft(url)
    level = build_level(run)
    ok = [r for r in run.records if r.error is None and r.first_token_ns is not None]
    tokens = sum(r.output_tokens for r in run.records)
    client_ttft_ms = sum((r.first_token_ns or 0) - r.sent_ns for r in ok) / len(ok) / 1e6 if ok else float("nan")
    served = ttft_after[1] - ttft_before[1]
    engine_ttft_ms = (ttft_after[0] - ttft_before[0]) / served * 1e3 if served else float("nan")
    per_1k = 1e6 / tokens if tokens else float("nan")
    return {"c": c, "tok_s": level.output_throughput, "cpu_ms_per_1k": cpu * per_1k,
            "server_cpu_ms_per_1k": server_cpu * per_1k,
            "lag_p99_ms": level.client.loop_lag_ms_p99, "connect_p99_ms": level.connect_ms.p99,
            "ttft_err_ms": client_ttft_ms - engine_ttft_ms,
            "failed": level.failed, "lost": max(0, int(served) - len(run.records)), "processes": level.client.processes,
            "requests": len(run.records)}


async def _config(workers: int | str | None, url: str, levels: tuple[int, ...],
                  server_pid: int) -> list[dict[str, Any]]:
    target = TargetSpec(url=url, model="tiny", timeout_s=120.0)
    prompts = [Prompt(" ".join(f"w{i}" for i in range(k, k + 32)), 32, OUTPUT_TOKENS) for k in range(64)]
    if workers is None:
        runner = HttpLevelRunner(target, prompts, metrics_url=None)
        return [await _level(runner, url, c, [psutil.Process().pid], server_pid) for c in levels]
    size = usable_cores() if workers == "auto" else int(workers)
    async with WorkerPool(size, auto=workers == "auto", target=target, prompts=prompts) as pool:
        runner = HttpLevelRunner(target, prompts, metrics_url=None, pool=pool)
        rows = []
        for c in levels:
            pids = [psutil.Process().pid, *(p.pid for p in pool.processes)]
            rows.append(await _level(runner, url, c, pids, server_pid))
        return rows


HEADER = "     C         workers procs      tok/s  cpu ms/1k  srv ms/1k   lag p99   TTFT err  connect p99  failed"


def row_line(workers: int | str | None, row: dict[str, Any]) -> str:
    # "streams" marks the real-time figures (tests/test_readme.py does not compare them: machine noise)
    return (f"{row['c']:>6} streams {_label(workers):>7} {row['processes']:>5}  {row['tok_s']:>9,.0f}  "
            f"{row['cpu_ms_per_1k']:>9.1f}  {row['server_cpu_ms_per_1k']:>9.1f}  {row['lag_p99_ms'] or 0.0:>8.1f}  "
            f"{row['ttft_err_ms']:>9.1f}  {row['connect_p99_ms'] or 0.0:>9.1f}  {row['failed']:>6}")


def render(saved: dict[str, Any]) -> str:
    """The table of a file ``--json`` wrote, as the run printed it."""
    m = saved["machine"]
    where = (f"{m['server_cores']} of {m['cores']} cores for serve-sim, {m['cores'] - m['server_cores']} for the load"
             if m.get("server_cores") else f"{m['cores']} cores shared by serve-sim and the load")
    lines = [f"serve-sim tiny (cap 16,384), speed x{m['speed']:g}, {m['output_tokens']}-token answers, steady levels "
             f"of {m['duration_s']:g} s; {where} ({m.get('cpu') or 'CPU unknown'})", HEADER]
    configs = saved["configs"]
    lines += [row_line(_config_of(w), row) for w, rows in configs.items() for row in rows]
    lines += [f"workers {w}: requests lost {sum(r['lost'] for r in rows)} over levels C="
              + ",".join(str(r["c"]) for r in rows) for w, rows in configs.items()]
    return "\n".join(lines)


def _print(workers: int | str | None, row: dict[str, Any]) -> None:
    print(row_line(workers, row), flush=True)


def _label(workers: int | str | None) -> str:
    return "-" if workers is None else str(workers)


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), None)


def _config_of(text: str) -> int | str | None:
    if text in ("-", "None"):   # None: how --json names the in-process configuration
        return None
    if text == "auto":
        return text
    return int(text)


async def _main(levels: tuple[int, ...], configs: tuple[int | str | None, ...],
                server_cores: int | None) -> dict[str, list[dict[str, Any]]]:
    ensure_open_files(files_needed(max(levels) * 2))
    server_set, load_set = _split_cores(server_cores)
    server, url = _serve_sim(server_set)
    if load_set:
        os.sched_setaffinity(0, load_set)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        where = (f"{len(server_set)} cores for serve-sim, {len(load_set)} for the load" if server_set and load_set
                 else f"{usable_cores()} cores shared by serve-sim and the load")
        print(f"serve-sim tiny (cap 16,384), speed x{SPEED:g}, {OUTPUT_TOKENS}-token answers, steady levels of "
              f"{DURATION_S:g} s; {where}")
        print(HEADER)
        for workers in configs:
            rows = await _config(workers, url, levels, server.pid)
            for row in rows:
                _print(workers, row)
            out[str(workers)] = rows
        for workers in configs:
            rows = out[str(workers)]
            print(f"workers {_label(workers)}: requests lost {sum(r['lost'] for r in rows)} over levels C="
                  + ",".join(str(r["c"]) for r in rows))
    finally:
        server.terminate()
        server.wait(timeout=10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two levels only")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--workers", default=",".join(_label(w) for w in CONFIGS),
                        help="the load's configurations: - (this process), a number of processes, or auto")
    parser.add_argument("--levels", help="concurrencies (default 256,1024,2048,4096,8192; --quick 256,2048)")
    parser.add_argument("--server-cores", type=int, help="pin serve-sim to this many cores, the load to the rest")
    parser.add_argument("--render", type=Path, help="print the table of a file --json wrote, and exit")
    args = parser.parse_args()
    try:
        if args.render:
            print(render(json.loads(args.render.read_text())))
            return
        levels = tuple(int(c) for c in args.levels.split(",")) if args.levels else (256, 2048) if args.quick else LEVELS
        configs = tuple(_config_of(w.strip()) for w in args.workers.split(","))
    except (OSError, ValueError, KeyError) as exc:   # one line and exit 2, as plateau answers
        parser.error(f"{type(exc).__name__}: {exc}")
    cores = len(os.sched_getaffinity(0))
    started = time.monotonic()
    figures = run_async(_main(levels, configs, args.server_cores))
    print(f"(wall time {time.monotonic() - started:.0f} s)")
    if args.json:
        machine = {"cores": cores,
                   "cpu": _cpu_model(), "server_cores": args.server_cores, "duration_s": DURATION_S,
                   "speed": SPEED, "output_tokens": OUTPUT_TOKENS}
        Path(args.json).write_text(json.dumps({"machine": machine, "configs": figures}, indent=2))


if __name__ == "__main__":
    main()
