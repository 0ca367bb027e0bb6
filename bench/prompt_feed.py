"""What a new prompt per request costs the load generator, and what it keeps in memory.

A level takes N prompts of 1,024 tokens through its feed (``workload.feed``): new ones built chunk by
chunk, or a prepared list cycled as a fixed pool would be. Printed side by side, per counter: the
microseconds of the generator's time per prompt taken (median of ``--runs``), the ratio to the cycled
list, and the most memory the feed held (tracemalloc peak) against building all N prompts at once.

    .venv/bin/python bench/prompt_feed.py [--requests 20000] [--input-len 1024] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_prompts import train

from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import EstimateCounter, LocalTokenizer, synthesize
from plateau_bench.workload.feed import CHUNK, LevelKey, ListFeed, PromptFeed
from plateau_bench.workload.source import PromptSource, synthetic_recipe


async def _take(feed: PromptFeed, n: int) -> float:
    """Seconds to take ``n`` prompts, one per request, as the load loop does."""
    await feed.prime(CHUNK)
    start = time.perf_counter()
    for i in range(n):
        await feed.take(i)
    elapsed = time.perf_counter() - start
    feed.close()
    return elapsed


async def _peak_mib(make: object) -> float:
    tracemalloc.start()
    await make()  # type: ignore[operator]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


async def case(name: str, workload: WorkloadSpec, counter: EstimateCounter | LocalTokenizer, n: int,
               runs: int) -> None:
    built = await synthesize(workload, CHUNK, counter=counter)
    source = PromptSource(synthetic_recipe(workload, built), counter if isinstance(counter, LocalTokenizer) else None)
    fresh = [await _take(source.feed(LevelKey(label=f"run {r}"), ahead=CHUNK), n) for r in range(runs)]
    cycled = [await _take(ListFeed(built.prompts), n) for _ in range(runs)]
    fresh_us, cycled_us = (statistics.median(x) / n * 1e6 for x in (fresh, cycled))
    feed_mib = await _peak_mib(lambda: _take(source.feed(LevelKey(label="mem"), ahead=CHUNK), n))
    whole_mib = await _peak_mib(lambda: synthesize(workload, n, counter=counter))
    print(f"{name:<16} {fresh_us:>10.1f} {cycled_us:>10.2f} {fresh_us / cycled_us:>8.0f}x "
          f"{feed_mib:>10.1f} {whole_mib:>11.1f} {whole_mib / feed_mib:>7.1f}x")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tok_dir = Path(__file__).resolve().parent / ".prompt_feed_tokenizer"
    tok_dir.mkdir(exist_ok=True)
    train(8000).save(str(tok_dir / "tokenizer.json"))
    workload = WorkloadSpec(input_len=args.input_len, output_len=64, range_ratio=0.25, seed=0)
    print(f"{args.requests:,} requests of ~{args.input_len:,} prompt tokens, median of {args.runs} runs")
    print(f"{'counter':<16} {'new us/req':>10} {'cycled us':>10} {'ratio':>9} {'feed MiB':>10} "
          f"{'all-at-once':>11} {'ratio':>8}")
    await case("words (none)", workload, EstimateCounter(), args.requests, args.runs)
    tokenized = WorkloadSpec(input_len=args.input_len, output_len=64, range_ratio=0.25, seed=0,
                             tokenizer=str(tok_dir / "tokenizer.json"))
    await case("local tokenizer", tokenized, LocalTokenizer.load(tok_dir / "tokenizer.json"), args.requests,
               args.runs)


if __name__ == "__main__":
    asyncio.run(main())
