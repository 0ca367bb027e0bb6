"""How fast the twin runs: virtual-time simulation, and streamed tokens/s over HTTP.

1. Engine: 100,000 requests of 1,024 prompt / 512 output tokens from 1,024 closed-loop workers,
   in virtual time; prints wall seconds per million simulated requests (target: < 10 s).
2. Server: the twin in its own process (one event loop, one core) streaming to an aiohttp client
   in this process at a high speed-up; prints the streamed tokens/s and SSE chunks/s it sustains.
   The client shares the machine, so the figure is a lower bound for the server alone.

Usage: python bench/sim_speed.py [--requests N] [--server-seconds S (0: engine only)]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time

import aiohttp
import msgspec

from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.level import simulate_level
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, WorkloadSpec


def engine_figure(n: int) -> None:
    level = LevelSpec(mode="burst", concurrency=1024, num_requests=n)
    workload = WorkloadSpec(input_len=1024, output_len=512)
    for preset in ("llama-8b-h100", "seed-a-tp8ep"):
        config = get_preset(preset)
        gc.collect()   # the previous run's garbage is not this run's cost
        start, cpu_start = time.perf_counter(), time.process_time()
        result = simulate_level(config, level, workload)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        # CPU time is the steadier figure on a shared machine; wall time is what a user waits.
        print(f"engine  {preset:14s} {n:,} requests in {wall:.2f} s -> {wall * 1e6 / n:.1f} s per million "
              f"simulated requests (CPU {cpu * 1e6 / n:.1f} s; {result.state.now:,.0f} s of virtual time, "
              f"{result.state.preemptions} preemptions)")
        del result


async def server_figure(seconds: float, speed: float) -> None:
    config = get_preset("tiny").with_overrides(max_num_seqs=256, max_num_batched_tokens=4096)
    concurrency, max_tokens = 256, 256
    with start_sim_server(config, speed=speed) as handle:
        tokens = chunks = 0
        deadline = time.perf_counter() + seconds
        connector = aiohttp.TCPConnector(limit=concurrency)
        body = msgspec.json.encode({"prompt": "alpha beta gamma delta", "max_tokens": max_tokens, "stream": True,
                                    "stream_options": {"include_usage": True}})

        async def worker(session: aiohttp.ClientSession) -> None:
            nonlocal tokens, chunks
            while time.perf_counter() < deadline:
                async with session.post(handle.url + "/v1/completions", data=body,
                                        headers={"Content-Type": "application/json"}) as resp:
                    async for line in resp.content:
                        if line.startswith(b"data: {") and b'"choices":[]' not in line:
                            chunks += 1
                tokens += max_tokens

        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.perf_counter()
            await asyncio.gather(*[worker(session) for _ in range(concurrency)])
            wall = time.perf_counter() - start
    print(f"server  speed x{speed:<4g} {tokens / wall:,.0f} streamed tokens/s, {chunks / wall:,.0f} SSE chunks/s "
          f"({concurrency} streams, {tokens / chunks:.1f} tokens per chunk, {wall:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--server-seconds", type=float, default=8.0, help="0 skips the server figures")
    args = parser.parse_args()
    engine_figure(args.requests)
    if args.server_seconds <= 0:
        return
    # The engine offers ~9,300 tok/s at x1 (256 sequences, 27.6 ms steps): one token per chunk.
    for speed in (1.0, 4.0, 16.0):
        asyncio.run(server_figure(args.server_seconds, speed))


if __name__ == "__main__":
    main()
