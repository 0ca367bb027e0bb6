"""What the streaming client costs, and how exact its times are.

Usage: ``.venv/bin/python bench/client_overhead.py [--quick] [--json PATH]``

A minimal SSE server runs in a subprocess (so its CPU is not counted) on 127.0.0.1: a raw asyncio
protocol speaking HTTP/1.1 with chunked encoding, sending vLLM-shaped completion chunks, one token
each. It logs ``time.monotonic_ns()`` for every request when it was read (the connection's
``connection_made``, the ``data_received`` that brought the request's first byte, the one that
completed it, and the start of its handler task) and just before every chunk write. The client's
times are on the same clock: ``time.monotonic_ns`` is ``CLOCK_MONOTONIC``, which on Linux is one
system-wide clock for every process, so client and server times compare directly (no offset).

1. Fast streaming (the server yields once between chunks and never sleeps): client CPU time
   (``time.process_time`` of this process) per 1,000 tokens for ``StreamingClient`` and for the
   floor, a raw asyncio protocol that sends the request and counts ``\\n\\n`` event boundaries
   without parsing anything. Target: <= 5 ms per 1,000 tokens.
2. Paced streaming, 20 ms between tokens, at C=64 and C=512 (all requests sent at once, as a
   burst, each on a new connection as at the start of a level), and at C=512 again on pooled
   connections: per chunk, the delay from the server's write to the client's chunk time. TTFT is
   measured from the client's ``sent_ns``, so its error has two paths: the *send* path (client
   ``sent_ns`` to the server's receipt of the request: first byte, handler start) and the
   *delivery* path (the server's first chunk write to the client's chunk time); both are shown
   (mean, p50, p99, max) with their ratio. ITL error is the change of delay between consecutive
   chunks. Target at C=512: mean TTFT error <= 2 ms, p99 <= 10 ms. The send path is cut into
   stages by stamps the client takes along the request's way out (``send_path_probe``, installed
   for this part only), each set against a lone request's (C=1) to tell the stage's own cost
   from waiting for the event loop.

Figures only, no assertions. Runs in well under two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from plateau_bench.driver import StreamingClient, install_event_loop
from plateau_bench.records import RequestRecord
from plateau_bench.spec import TargetSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import send_path_probe

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

    logs: dict[str, dict[str, Any]] = {}  # noqa: RUF012  (shared by all connections of the process)

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.writable = asyncio.Event()
        self.writable.set()
        self.accepted_ns = 0  # connection_made
        self.first_byte_ns = 0  # the first data_received of the request being read
        self.requests = 0  # requests read on this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.accepted_ns = time.monotonic_ns()
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        if not self.buf:
            self.first_byte_ns = now
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
        receipt = {"accept": self.accepted_ns, "first_byte": self.first_byte_ns,
                   "read": time.monotonic_ns(), "nth": self.requests}
        self.requests += 1
        self.first_byte_ns = now  # pipelined bytes of a next request, if any (unused by clients here)
        asyncio.get_running_loop().create_task(self.respond(path, body, receipt))

    async def respond(self, path: str, body: bytes, receipt: dict[str, int]) -> None:
        handler_ns = time.monotonic_ns()
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
        _ServerProtocol.logs[key] = {**receipt, "handler": handler_ns, "chunks": times}
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


async def _dump(port: int) -> dict[str, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /dump HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    body = await reader.readexactly(length)
    writer.close()
    return json.loads(body)  # type: ignore[no-any-return]


async def _client_burst(url: str, c: int, tokens: int, itl_ms: float, ttft_ms: float, tag: str,  # type: ignore[no-untyped-def]
                        probe: bool = False, pooled: bool = False):
    """C requests at once on a fresh client, so on new connections, or with ``pooled`` on the C
    connections that C one-token requests opened just before. With ``probe``, also each request's
    stamps along its way out (``send_path_probe``); the wrappers must be installed."""
    target = TargetSpec(url=url, model="tiny", timeout_s=120)
    async with StreamingClient(target, concurrency=c, t0_ns=0) as client:
        if pooled:
            await asyncio.gather(*(client.send(index=i, prompt=f"0|0|{tag}-pool-{i}", prompt_tokens=8,
                                               max_tokens=1, scheduled_ns=0) for i in range(c)))

        def one(i: int):  # type: ignore[no-untyped-def]
            return client.send(index=i, prompt=f"{itl_ms}|{ttft_ms}|{tag}-{i}", prompt_tokens=8,
                               max_tokens=tokens, scheduled_ns=0)

        cpu0, wall0 = _cpu(), time.perf_counter()
        if probe:
            pairs = await asyncio.gather(*(send_path_probe.probed(functools.partial(one, i)) for i in range(c)))
            records, stamps = [p[0] for p in pairs], [p[1] for p in pairs]
        else:
            records, stamps = await asyncio.gather(*(one(i) for i in range(c))), []
        cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    failed = [r for r in records if not r.ok]
    if failed:
        print(f"  {len(failed)} failed requests, first: {failed[0].error} {failed[0].error_detail}")
    return (records, stamps, cpu, wall) if probe else (records, cpu, wall)


# Stages of a request's way out, as (name, stamp it ends at); consecutive stamps, so the stages
# add up to the way from the start of the send to the server's first byte of the request (the
# client's sent_ns falls inside it, at the write).
_STAGES = (
    ("aiohttp sets the request up (pooled: to the conn.)", "tcp_start"),
    ("TCP connect: socket, handshake, task resumed", "tcp_sock"),
    ("transport set-up: create_connection -> made", "conn_made"),
    ("connection to the request: task resumed", "ready"),
    ("request head built, body writer task made", "headers"),
    ("body writer task waits its turn", "written"),
    ("write call, kernel, server loop -> first byte", "first_byte"),
)
_CONNECT_STAGES, _WRITE_STAGES, _WIRE_STAGES = (0, 1, 2, 3), (4, 5), (6,)


def _send_path(records: list[RequestRecord], stamps: list[dict[str, int]], logs: dict[str, dict[str, Any]],
               key: Callable[[int], str]) -> np.ndarray:
    """Per request (ms): stage durations (len(_STAGES) columns), then sent -> server first byte,
    sent -> server handler start, delivery of the first chunk, first byte -> handler, whether
    the connection was new, written -> server handler start. Requests without a full log are
    left out."""
    rows = []
    for rec, st in zip(records, stamps, strict=True):
        srv = logs.get(key(rec.index))
        if not rec.ok or srv is None or len(srv["chunks"]) != len(rec.chunk_ns) or rec.connect_ns is None:
            continue
        # Stages run from the start of the send (connect_ns counts from there); the paths from the
        # recorded sent_ns, which the client stamps when the request's bytes go to the kernel.
        start = st.get("start", rec.sent_ns)
        sent, ready = rec.sent_ns, start + rec.connect_ns
        new = "tcp_start" in st and "conn_made" in st
        t = {"tcp_start": st["tcp_start"], "tcp_sock": st["tcp_sock"], "conn_made": st["conn_made"]} if new \
            else {"tcp_start": ready, "tcp_sock": ready, "conn_made": ready}  # pooled: all in the first stage
        t |= {"ready": ready, "headers": st.get("headers", ready), "written": st.get("written", ready),
              "first_byte": srv["first_byte"]}
        edges = [start] + [t[name] for _, name in _STAGES]
        stages = np.diff(np.asarray(edges, dtype=np.int64)) / MS
        rows.append([*stages, (srv["first_byte"] - sent) / MS, (srv["handler"] - sent) / MS,
                     (rec.chunk_ns[0] - srv["chunks"][0]) / MS, (srv["handler"] - srv["first_byte"]) / MS,
                     float(new), (srv["handler"] - t["written"]) / MS])
    return np.asarray(rows)


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"mean": float(x.mean()), "p50": float(np.percentile(x, 50)), "p99": float(np.percentile(x, 99)),
            "max": float(x.max())}


async def _floor_burst(port: int, c: int, tokens: int, tag: str) -> tuple[int, np.ndarray]:
    cpu0 = _cpu()
    counts = await asyncio.gather(*(_floor_request(port, f"0|0|{tag}-{i}", tokens) for i in range(c)))
    return sum(counts), _cpu() - cpu0


def _cpu() -> np.ndarray:
    """(user + system, system) CPU seconds of this process; the sum is ``time.process_time``."""
    t = os.times()
    return np.array([t.user + t.system, t.system])


async def _part2(url: str, port: int, quick: bool, tokens_paced: int, figures: dict[str, Any]) -> None:
    # Lone requests (C=1, a fresh connection each): every stage's own cost with nothing else in
    # either event loop; at C=64/512 what a stage takes beyond that is waiting for other requests.
    lone = []
    for k in range(10 if quick else 30):
        records, stamps, _, _ = await _client_burst(url, 1, 2, 0, 0, f"lone{k}", probe=True)
        logs = await _dump(port)
        lone.append(_send_path(records, stamps, logs, functools.partial("0|0|lone{}-{}".format, k)))
    lone_stage = np.median(np.vstack(lone), axis=0)[: len(_STAGES)]

    print(f"\n2. paced streaming: 20 ms between tokens, 50 ms to the first, {tokens_paced} tokens,"
          " burst of C requests, each on a new connection")
    print("     C   TTFT err mean / p99   ITL err mean / p99   chunk delay p50 / p99   client CPU")
    per_c: dict[str, dict[str, Any]] = {}
    for c, pooled in ((64, False), (512, False), (512, True)):
        if pooled:
            print("   the same burst on pooled connections (C one-token requests opened them just before):")
        records, stamps, cpu_pair, wall = await _client_burst(url, c, tokens_paced, 20, 50, f"paced{c}",
                                                              probe=True, pooled=pooled)
        cpu = float(cpu_pair[0])
        logs = await _dump(port)
        ttft_err, itl_err, delays = [], [], []
        for rec in records:
            srv = logs.get(f"20|50|paced{c}-{rec.index}")
            if not rec.ok or srv is None or len(srv["chunks"]) != len(rec.chunk_ns):
                continue
            d = (np.asarray(rec.chunk_ns) - np.asarray(srv["chunks"])) / MS
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
        if c == 512 and not pooled:
            met = t.mean() <= 2 and np.percentile(t, 99) <= 10
            print(f"   target at C=512 (mean <= 2 ms, p99 <= 10 ms): {'met' if met else 'NOT met'}")
        if len(t) < c:
            print(f"   ({c - len(t)} requests left out: failed or chunk counts differ)")
        rows = _send_path(records, stamps, logs, functools.partial("20|50|paced{}-{}".format, c))
        per_c[f"{c} pooled" if pooled else str(c)] = {"c": c, "rows": rows, "spread": spread,
                                                      "delivery_ttft": _stats(t), "itl": _stats(i)}

    n = len(_STAGES)
    print("\n   TTFT's two paths (client and server read the same CLOCK_MONOTONIC), ms:")
    print("     C          path                                          mean      p50      p99      max")
    names = (("send", n, "send: client sent -> server first byte"),
             ("send_handler", n + 1, "send: client sent -> server handler start"),
             ("send_written", n + 5, "send if stamped at the write: -> handler"),
             ("delivery", n + 2, "delivery: server write -> client chunk"))
    for run, res in per_c.items():
        rows = res["rows"]
        for key, col, label in names:
            st = res[key] = _stats(rows[:, col])
            print(f"  {run:11s}   {label:44s} {st['mean']:7.2f}  {st['p50']:7.2f}  {st['p99']:7.2f}  {st['max']:7.2f}")
        both = res["ttft_error"] = _stats(rows[:, n + 1] + rows[:, n + 2])
        print(f"  {run:11s}   {'TTFT error: send (to handler) + delivery':44s} {both['mean']:7.2f}  "
              f"{both['p50']:7.2f}  {both['p99']:7.2f}  {both['max']:7.2f}")
        res["ratio"] = res["send_handler"]["mean"] / res["delivery"]["mean"]
        res["send_share"] = res["send_handler"]["mean"] / both["mean"]
        print(f"                send / delivery (means) {res['ratio']:.1f} x; the send path is "
              f"{res['send_share']:.0%} of the mean TTFT error; server first byte -> handler "
              f"{rows[:, n + 3].mean():.2f} ms mean; {int(rows[:, n + 4].sum())} of {len(rows)} on new connections")
        if run == "512":
            met = both["mean"] <= 2 and both["p99"] <= 10
            print(f"                target at C=512 on both paths (mean <= 2 ms, p99 <= 10 ms): "
                  f"{'met' if met else 'NOT met'}")

    print("\n   the way out (start of the send -> server first byte) by stage: mean ms (share of it); the client"
          "\n   stamps sent_ns at the write, so what precedes it is send lag, not TTFT;"
          "\n   'lone' is the median of a lone request (C=1), the stage's own cost without a crowd")
    print(f"     {'stage':49s}" + "".join(f"{f'C={run}':>17s}" for run in per_c) + "      lone")
    means = {run: res["rows"][:, :n].mean(axis=0) for run, res in per_c.items()}
    totals = {run: float(res["rows"][:, :n].sum(axis=1).mean()) for run, res in per_c.items()}

    def line(label: str, values: dict[str, float], lone_value: float) -> None:
        cells = "".join(f"{v:9.2f} ({v / totals[run]:4.0%})" for run, v in values.items())
        print(f"     {label:49s}{cells}  {lone_value:8.3f}")

    for k, (label, _) in enumerate(_STAGES):
        line(label, {run: float(m[k]) for run, m in means.items()}, float(lone_stage[k]))
    print("     " + "-" * (49 + 17 * len(per_c) + 10))
    groups = (("connection opening (= connect_ns)", _CONNECT_STAGES), ("request write", _WRITE_STAGES),
              ("kernel + server loop", _WIRE_STAGES))
    for label, idx in groups:
        line(label, {run: float(m[list(idx)].sum()) for run, m in means.items()}, float(lone_stage[list(idx)].sum()))
    client, wire = list(_CONNECT_STAGES + _WRITE_STAGES), list(_WIRE_STAGES)

    def beyond(m: np.ndarray, idx: list[int]) -> float:  # a stage a pooled request skips is 0, not negative
        return float(np.where(m[idx] > 0, m[idx] - lone_stage[idx], 0.0).sum())

    line("client event loop: client stages beyond lone", {run: beyond(m, client) for run, m in means.items()}, 0.0)
    line("server loop + kernel beyond lone", {run: beyond(m, wire) for run, m in means.items()}, 0.0)
    for run, res in per_c.items():
        print(f"     C={run}: the first loop turn (every request started, up to its first wait) took "
              f"{res['spread']:.1f} ms, {res['spread'] / res['c'] * 1000:.0f} us a request")
        res["stages"] = means[run].tolist()
        res["groups"] = {label: float(means[run][list(idx)].sum()) for label, idx in groups}
        res["loop_excess"] = beyond(means[run], client)
        res["server_excess"] = beyond(means[run], wire)
        del res["rows"]
    figures["lone_stages"] = lone_stage.tolist()
    figures["per_c"] = per_c


async def _main(quick: bool, json_path: str | None) -> None:
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
        figures: dict[str, Any] = {"cpu_per_k_client": float(per_k_client), "cpu_per_k_floor": float(per_k_floor)}
        send_path_probe.install()  # only for part 2: part 1's CPU figures are taken without it
        try:
            await _part2(url, port, quick, tokens_paced, figures)
        finally:
            send_path_probe.uninstall()
        if json_path:
            Path(json_path).write_text(json.dumps(figures, indent=1))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few seconds)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    args = parser.parse_args()
    install_event_loop()
    if args.serve:
        asyncio.run(_serve())
    else:
        asyncio.run(_main(args.quick, args.json))
