"""What the streaming client costs, and how exact its chunk times are.

Usage: ``.venv/bin/python bench/client_overhead.py [--quick]``

A minimal SSE server runs in a subprocess (so its CPU is not counted) on 127.0.0.1: a raw asyncio
protocol speaking HTTP/1.1 with chunked encoding, sending vLLM-shaped completion chunks, one token
each, and logging ``time.monotonic_ns()`` just before every chunk write. Both processes read the
same system-wide monotonic clock, so client and server times compare directly.

1. Fast streaming (the server yields once between chunks and never sleeps): client CPU time
   (``time.process_time`` of this process) per 1,000 tokens for ``StreamingClient`` and for the
   floor, a raw asyncio protocol that sends the request and counts ``\\n\\n`` event boundaries
   without parsing anything. Target: <= 5 ms per 1,000 tokens.
2. Paced streaming, 20 ms between tokens, at C=64 and C=512 (all requests sent at once, as a
   burst): per chunk, the delay from the server's write to the client's chunk time. TTFT error is
   that delay for the first token; ITL error is the change of delay between consecutive chunks.
   Target at C=512: mean TTFT error <= 2 ms, p99 <= 10 ms.

Figures only, no assertions. Runs in well under two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from plateau_bench.driver import StreamingClient, install_event_loop
from plateau_bench.spec import TargetSpec

MS = 1_000_000

# --- the server (subprocess) --------------------------------------------------------------------

_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n")


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: object) -> bytes:
    return _chunked(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


_TOKEN = _event({"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1700000000,
                 "model": "tiny", "choices": [{"index": 0, "text": " tok", "logprobs": None,
                                               "finish_reason": None, "stop_reason": None}],
                 "usage": None})


class _ServerProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one request at a time per connection (what streaming clients do)."""

    logs: dict[str, list[int]] = {}  # noqa: RUF012  (shared by all connections of the process)

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode("latin-1")
        found = re.search(r"(?im)^content-length:\s*(\d+)", head)
        length = int(found.group(1)) if found else 0
        if len(self.buf) < end + 4 + length:
            return
        body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
        path = head.split(" ", 2)[1]
        asyncio.get_running_loop().create_task(self.respond(path, body))

    async def respond(self, path: str, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        if path == "/dump":
            out = json.dumps(_ServerProtocol.logs).encode()
            _ServerProtocol.logs = {}
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(out), out))
            return
        request = json.loads(body)
        key = request["prompt"]
        itl_ms, ttft_ms, _ = key.split("|", 2)
        itl_ns, ttft_s = float(itl_ms) * MS, float(ttft_ms) / 1000
        times: list[int] = []
        _ServerProtocol.logs[key] = times
        transport.write(_HEAD)
        if ttft_s:
            await asyncio.sleep(ttft_s)
        first = time.monotonic_ns()
        for i in range(int(request["max_tokens"])):
            if self.transport is None:
                return
            times.append(time.monotonic_ns())
            transport.write(_TOKEN)
            await self.writable.wait()
            if itl_ns:
                await asyncio.sleep(max(0.0, (first + (i + 1) * itl_ns - time.monotonic_ns()) / 1e9))
            else:
                await asyncio.sleep(0)
        n = int(request["max_tokens"])
        transport.write(_event({"id": "cmpl-0", "choices": [],
                                "usage": {"prompt_tokens": 8, "completion_tokens": n}}))
        transport.write(_chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")


async def _serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_ServerProtocol, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


# --- the floor: count event boundaries, parse nothing ---------------------------------------------


class _FloorProtocol(asyncio.Protocol):
    def __init__(self, request: bytes, done: asyncio.Future[int]) -> None:
        self.request = request
        self.done = done
        self.events = 0
        self.last_newline = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        self.events += data.count(b"\n\n") + (self.last_newline and data[:1] == b"\n")
        self.last_newline = data[-1:] == b"\n"
        if data.endswith(b"0\r\n\r\n"):
            self.transport.close()
            self.done.set_result(self.events)


async def _floor_request(port: int, prompt: str, max_tokens: int) -> int:
    loop = asyncio.get_running_loop()
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "stream": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    done: asyncio.Future[int] = loop.create_future()
    await loop.create_connection(lambda: _FloorProtocol(request, done), "127.0.0.1", port)
    return await done


# --- the client side ------------------------------------------------------------------------------


async def _dump(port: int) -> dict[str, list[int]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /dump HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    body = await reader.readexactly(length)
    writer.close()
    return json.loads(body)  # type: ignore[no-any-return]


async def _client_burst(url: str, c: int, tokens: int, itl_ms: float, ttft_ms: float, tag: str):  # type: ignore[no-untyped-def]
    target = TargetSpec(url=url, model="tiny", timeout_s=120)
    async with StreamingClient(target, concurrency=c, t0_ns=0) as client:
        cpu0, wall0 = _cpu(), time.perf_counter()
        records = await asyncio.gather(*(
            client.send(index=i, prompt=f"{itl_ms}|{ttft_ms}|{tag}-{i}", prompt_tokens=8,
                        max_tokens=tokens, scheduled_ns=0)
            for i in range(c)
        ))
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    failed = [r for r in records if not r.ok]
    if failed:
        print(f"  {len(failed)} failed requests, first: {failed[0].error} {failed[0].error_detail}")
    return records, cpu, wall


async def _floor_burst(port: int, c: int, tokens: int, tag: str) -> tuple[int, np.ndarray]:
    cpu0 = _cpu()
    counts = await asyncio.gather(*(_floor_request(port, f"0|0|{tag}-{i}", tokens) for i in range(c)))
    return sum(counts), _cpu() - cpu0


def _cpu() -> np.ndarray:
    """(user + system, system) CPU seconds of this process; the sum is ``time.process_time``."""
    t = os.times()
    return np.array([t.user + t.system, t.system])


async def _main(quick: bool) -> None:
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        rounds, c_fast, n_fast = (2, 16, 500) if quick else (4, 32, 1000)

        print(f"event loop: {type(asyncio.get_running_loop()).__module__}; server pid {server.pid}")
        print(f"\n1. fast streaming: {rounds} bursts of C={c_fast} x {n_fast} tokens")
        client_cpu, floor_cpu = np.zeros(2), np.zeros(2)
        client_tokens = floor_events = 0
        await _client_burst(url, 4, 50, 0, 0, "warm")  # imports, first connections
        for r in range(rounds):
            records, cpu, _ = await _client_burst(url, c_fast, n_fast, 0, 0, f"fast{r}")
            client_cpu += cpu
            client_tokens += sum(rec.output_tokens for rec in records)
            events, fcpu = await _floor_burst(port, c_fast, n_fast, f"floor{r}")
            floor_cpu += fcpu
            floor_events += events - 2 * c_fast  # usage event and [DONE] are not tokens
        await _dump(port)
        per_k_client, sys_client = client_cpu / client_tokens * 1e6
        per_k_floor, sys_floor = floor_cpu / floor_events * 1e6
        print(f"   (a) StreamingClient    {per_k_client:6.2f} ms CPU / 1,000 tokens  (of which system "
              f"{sys_client:.2f}; {client_tokens:,} tokens)")
        print(f"   (b) floor reader       {per_k_floor:6.2f} ms CPU / 1,000 tokens  (of which system "
              f"{sys_floor:.2f}; {floor_events:,} tokens)")
        print(f"   (c) ratio              {per_k_client / per_k_floor:6.2f} x")
        print(f"   target <= 5 ms / 1,000 tokens: {'met' if per_k_client <= 5 else 'NOT met'}")

        tokens_paced = 50 if quick else 100
        print(f"\n2. paced streaming: 20 ms between tokens, 50 ms to the first, {tokens_paced} tokens,"
              " burst of C requests")
        print("     C   TTFT err mean / p99   ITL err mean / p99   chunk delay p50 / p99   client CPU")
        for c in (64, 512):
            records, cpu_pair, wall = await _client_burst(url, c, tokens_paced, 20, 50, f"paced{c}")
            cpu = float(cpu_pair[0])
            logs = await _dump(port)
            ttft_err, itl_err, delays = [], [], []
            for rec in records:
                sent = logs.get(f"20|50|paced{c}-{rec.index}")
                if not rec.ok or sent is None or len(sent) != len(rec.chunk_ns):
                    continue
                d = (np.asarray(rec.chunk_ns) - np.asarray(sent)) / MS
                ttft_err.append(d[0])
                itl_err.extend(np.abs(np.diff(d)))
                delays.extend(d)
            t, i, dl = np.asarray(ttft_err), np.asarray(itl_err), np.asarray(delays)
            print(f"  {c:4d}   {t.mean():6.2f} / {np.percentile(t, 99):6.2f} ms   "
                  f"{i.mean():6.2f} / {np.percentile(i, 99):6.2f} ms   "
                  f"{np.percentile(dl, 50):6.2f} / {np.percentile(dl, 99):6.2f} ms     "
                  f"{cpu / wall:5.0%} of a core ({cpu / (c * tokens_paced) * 1e6:.1f} ms / 1,000 tok)")
            spread = (max(r.sent_ns for r in records) - min(r.sent_ns for r in records)) / MS
            print(f"         sending the burst took {spread:.0f} ms (first tokens due 50 ms after each send)")
            if c == 512:
                met = t.mean() <= 2 and np.percentile(t, 99) <= 10
                print(f"   target at C=512 (mean <= 2 ms, p99 <= 10 ms): {'met' if met else 'NOT met'}")
            if len(t) < c:
                print(f"   ({c - len(t)} requests left out: failed or chunk counts differ)")
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few seconds)")
    args = parser.parse_args()
    install_event_loop()
    if args.serve:
        asyncio.run(_serve())
    else:
        asyncio.run(_main(args.quick))
