#!/usr/bin/env python3
"""Start, stop and inspect the real inference servers by hand (the test fixtures use the same code).

    .venv/bin/python scripts/real_servers.py status
    .venv/bin/python scripts/real_servers.py start vllm --max-num-seqs 4 --pidfile /tmp/vllm.pid
    .venv/bin/python scripts/real_servers.py start llamacpp --parallel 4 --model mid --port 41000
    .venv/bin/python scripts/real_servers.py stop --pidfile /tmp/vllm.pid

`start` prints one JSON line (url, pid, log, model, tokenizer_dir) once /health answers, and leaves the
server running in its own session. Provision first with scripts/provision.sh.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the test-only support package
from support import real_servers


def start(args: argparse.Namespace) -> int:
    log = Path(args.log) if args.log else None
    if args.server == "vllm":
        handle = real_servers.start_vllm(args.max_num_seqs, args.port, log_path=log)
    else:
        handle = real_servers.start_llamacpp(args.parallel, args.port, model=args.model, ctx=args.ctx, log_path=log)
    if args.pidfile:
        Path(args.pidfile).write_text(f"{handle.pid}\n")
    print(
        json.dumps(
            {
                "kind": handle.kind,
                "url": handle.url,
                "pid": handle.pid,
                "log": str(handle.log_path),
                "model": handle.model,
                "tokenizer_dir": str(handle.tokenizer_dir) if handle.tokenizer_dir else None,
            }
        )
    )
    return 0


def stop(args: argparse.Namespace) -> int:
    if args.pid is None and args.pidfile is None:
        print("stop needs --pid or --pidfile", file=sys.stderr)
        return 2
    pid = args.pid if args.pid is not None else int(Path(args.pidfile).read_text().strip())
    real_servers.stop_process(pid)
    if args.pidfile:
        Path(args.pidfile).unlink(missing_ok=True)
    return 0


def status(_: argparse.Namespace) -> int:
    root = real_servers.cache_root()
    artefacts = {
        "vllm": [real_servers.vllm_venv() / ".plateau-ready", real_servers.vllm_model_dir() / "config.json"],
        "llamacpp": [
            real_servers.llamacpp_binary(),
            real_servers.gguf_model("tiny"),
            real_servers.gguf_model("mid"),
        ],
    }
    for kind, paths in artefacts.items():
        status_file = root / "status" / kind
        last_run = status_file.read_text().strip() if status_file.exists() else "never run"
        ready = all(path.exists() for path in paths)
        print(f"{kind}: {'ready' if ready else 'NOT ready'} (last provisioning: {last_run})")
        for path in paths:
            print(f"  {'ok     ' if path.exists() else 'missing'} {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    start_parser = commands.add_parser("start", help="start a server and wait until /health answers")
    start_parser.add_argument("server", choices=["vllm", "llamacpp"])
    start_parser.add_argument("--port", type=int, help="default: a free high port")
    start_parser.add_argument("--max-num-seqs", type=int, default=4, help="vLLM concurrency cap")
    start_parser.add_argument("--parallel", type=int, default=4, help="llama.cpp slot count")
    start_parser.add_argument("--model", choices=["tiny", "mid"], default="mid", help="llama.cpp model")
    start_parser.add_argument("--ctx", type=int, default=8192, help="llama.cpp context, split across slots")
    start_parser.add_argument("--pidfile")
    start_parser.add_argument("--log", help="server log (default: under the cache's logs/)")
    start_parser.set_defaults(run=start)
    stop_parser = commands.add_parser("stop", help="stop a server by PID")
    stop_parser.add_argument("--pid", type=int)
    stop_parser.add_argument("--pidfile")
    stop_parser.set_defaults(run=stop)
    commands.add_parser("status", help="show what is provisioned").set_defaults(run=status)
    args = parser.parse_args()
    try:
        return int(args.run(args))
    except real_servers.ProvisioningError as exc:
        print(exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
