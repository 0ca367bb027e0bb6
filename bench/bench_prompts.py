"""Prompt synthesis speed and exactness: n prompts of 1,024 tokens with each token counter.

Trains a byte-level BPE tokenizer (GPT-2 style) on generated text, so it runs offline. Prints
seconds per build, tokens per second, and the share of prompts whose re-encoded length is exact
(checked outside the timing, by re-encoding every prompt).

    .venv/bin/python bench/bench_prompts.py [--sizes 1000,10000] [--input-len 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import EstimateCounter, LocalTokenizer, RemoteCounter, synthesize
from plateau_bench.workload.words import WORDS


def train(vocab: int) -> Tokenizer:
    rng = random.Random(0)
    suffixes = ("", "", "s", "ing", "ed", ",", ".", "'s")
    lines = [" ".join(rng.choice(WORDS) + rng.choice(suffixes) for _ in range(30)) for _ in range(5000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<s>"], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8000)
    args = ap.parse_args()
    tok = train(args.vocab)
    local = LocalTokenizer(tok, "trained byte-level BPE")

    async def tokenize(text: str) -> int | None:
        return len(tok.encode(text, add_special_tokens=False).ids) + 1  # a server adds BOS

    spec = WorkloadSpec(input_len=args.input_len, seed=1)
    print(f"tokenizer: byte-level BPE, vocab {tok.get_vocab_size()}; input_len {args.input_len}")
    for n in (int(x) for x in args.sizes.split(",")):
        for name, make in (("tokenizer", lambda: local), ("/tokenize", lambda: RemoteCounter(tokenize)),
                           ("estimate", EstimateCounter)):
            counter = make()
            t = time.perf_counter()
            built = await synthesize(spec, n, counter=counter)
            elapsed = time.perf_counter() - t
            truth = local.encode_lengths([p.text for p in built.prompts])
            exact = sum(1 for p, c in zip(built.prompts, truth, strict=True) if p.prompt_tokens == c)
            err = sum(abs(p.prompt_tokens - c) for p, c in zip(built.prompts, truth, strict=True)) / n
            calls = f" remote calls {counter.calls}" if isinstance(counter, RemoteCounter) else ""
            print(f"n={n:>6} {name:<10} {elapsed:6.2f} s  {n * args.input_len / elapsed / 1e6:5.2f} M tok/s  "
                  f"exact {exact}/{n}  mean |error| {err:.2f} tok{calls}")


if __name__ == "__main__":
    asyncio.run(main())
