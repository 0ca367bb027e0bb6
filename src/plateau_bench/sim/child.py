"""Entry point of the twin's server process: ``python -m plateau_bench.sim.child --config JSON ...``.

Prints ``READY <port>`` once listening, or ``ERROR <message>`` and exits 2; stops on SIGTERM.
Kept apart from ``embed`` so that running it as ``-m`` does not import it twice.
"""

from __future__ import annotations

import argparse
import os

import msgspec

from plateau_bench.aio import new_event_loop
from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import serve_forever


def _child_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="plateau_bench.sim.child")
    parser.add_argument("--config", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--no-metrics", action="store_true")
    parser.add_argument("--reject-when-waiting", type=int, default=None)
    parser.add_argument("--reject-status", type=int, default=429)
    ns = parser.parse_args(argv)
    config = msgspec.json.decode(ns.config.encode(), type=EngineConfig)
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve_forever(
            config, host=ns.host, port=ns.port, speed=ns.speed, metrics=not ns.no_metrics,
            reject_when_waiting=ns.reject_when_waiting, reject_status=ns.reject_status,
            on_ready=lambda port: print(f"READY {port}", flush=True)))
    except ConfigError as exc:
        print(f"ERROR {exc}", flush=True)
        os._exit(2)
    finally:
        loop.close()


if __name__ == "__main__":
    _child_main()
