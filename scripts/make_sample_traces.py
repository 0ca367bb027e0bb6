#!/usr/bin/env python3
"""Write the small sample traces in tests/data/traces (seeded: the same files every time).

    .venv/bin/python scripts/make_sample_traces.py

* azure.csv: the Azure LLM inference trace's columns (TIMESTAMP, ContextTokens, GeneratedTokens),
  200 requests, Poisson arrivals at ~20 requests/s, log-normal lengths as in the published trace.
* mooncake.jsonl: Mooncake's fields (timestamp in ms, input_length, output_length, hash_ids of
  512-token blocks): 60 requests over 4 shared documents of 2-4 blocks, each with a block of its own.
* plain.jsonl / plain.csv: the plain format (time_s, input_len, output_len); plain.csv is 500
  requests at 100 requests/s (Poisson) with short requests, the send-lag check's load.

None of it is real traffic: the files only have the shape of each format.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "traces"


def poisson_times(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))))


def azure(rng: np.random.Generator) -> str:
    start = dt.datetime(2023, 11, 16, 18, 15, 46, 680590)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in poisson_times(rng, 200, 20.0):
        when = start + dt.timedelta(seconds=float(t))
        context = max(1, int(rng.lognormal(6.5, 0.8)))
        generated = max(1, int(rng.lognormal(4.5, 0.7)))
        lines.append(f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond:06d}0,{context},{generated}")
    return "\n".join(lines) + "\n"


def mooncake(rng: np.random.Generator) -> str:
    documents = [list(range(100 * d, 100 * d + int(rng.integers(2, 5)))) for d in range(4)]
    lines = []
    next_own = 10_000
    for t in poisson_times(rng, 60, 5.0):
        doc = documents[int(rng.integers(0, 4))]
        ids = [*doc, next_own]
        next_own += 1
        input_length = 512 * len(doc) + int(rng.integers(1, 512))
        lines.append(json.dumps({"timestamp": round(t * 1000), "input_length": input_length,
                                 "output_length": int(rng.integers(8, 64)), "hash_ids": ids}))
    return "\n".join(lines) + "\n"


def plain_jsonl(rng: np.random.Generator) -> str:
    rows = [json.dumps({"time_s": round(float(t), 6), "input_len": int(rng.integers(16, 256)),
                        "output_len": int(rng.integers(4, 32))}) for t in poisson_times(rng, 50, 10.0)]
    return "\n".join(rows) + "\n"


def plain_csv(rng: np.random.Generator) -> str:
    lines = ["time_s,input_len,output_len"]
    lines += [f"{t:.6f},{int(rng.integers(16, 48))},{int(rng.integers(4, 12))}"
              for t in poisson_times(rng, 500, 100.0)]
    return "\n".join(lines) + "\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, make, seed in (("azure.csv", azure, 1), ("mooncake.jsonl", mooncake, 2),
                             ("plain.jsonl", plain_jsonl, 3), ("plain.csv", plain_csv, 4)):
        (OUT / name).write_text(make(np.random.default_rng(seed)))
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
