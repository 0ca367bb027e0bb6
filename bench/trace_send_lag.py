"""How closely a trace replay keeps its schedule: send lag at 100 requests/s on serve-sim.

Usage: ``.venv/bin/python bench/trace_send_lag.py [--runs N] [--trace FILE] [--time-scale S]``

The twin (preset ``tiny``) runs in its own process, as ``plateau serve-sim`` does; ``plateau run
--trace`` replays ``tests/data/traces/plain.csv`` (500 short requests, Poisson at 100 requests/s)
against it. The send lag of a request is ``sent_ns - scheduled_ns``: from the time the trace says
it should leave to the first write of its bytes to the socket (a new connection's setup included).
Prints, per run, the lag's p50, p99 and max and how many requests left more than 5 ms late, with
the machine's load average before and after (the lag is the load generator's own, and a busy
machine shows in it). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from plateau_bench.cli import app
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.store import load_requests

TRACE = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces" / "plain.csv"


def one_run(trace: Path, time_scale: float) -> np.ndarray:
    out = Path(tempfile.mkdtemp(prefix="plateau-lag-")) / "run"
    with start_sim_server(get_preset("tiny")) as twin:
        result = CliRunner().invoke(app, ["run", "--url", twin.url, "--trace", str(trace), "--time-scale",
                                          str(time_scale), "--out", str(out), "--quiet"])
    if result.exit_code != 0:
        raise SystemExit(result.output)
    records = next(iter(load_requests(out).values()))
    return np.array([(r.sent_ns - r.scheduled_ns) / 1e6 for r in records if r.error is None])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    print(f"trace {args.trace.name} at time scale {args.time_scale:g}, serve-sim tiny in its own process")
    every = []
    for run in range(args.runs):
        before = os.getloadavg()[0]
        lags = one_run(args.trace, args.time_scale)
        after = os.getloadavg()[0]
        every.append(lags)
        print(f"run {run + 1}: {lags.size} requests, send lag p50 {np.median(lags):.2f} ms, p99 "
              f"{np.percentile(lags, 99):.2f} ms, max {lags.max():.2f} ms, over 5 ms: {int((lags > 5).sum())} "
              f"({(lags > 5).mean():.1%}); load average {before:.2f} -> {after:.2f} on {os.cpu_count()} cores")
    lags = np.concatenate(every)
    print(f"all runs: {lags.size} requests sent")
    print(f"all runs' send lag: max {lags.max():.2f} ms, over 5 ms late: {int((lags > 5).sum())}")


if __name__ == "__main__":
    main()
