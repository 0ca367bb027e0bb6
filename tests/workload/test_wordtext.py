"""Prompts without a local tokenizer: the server's /tokenize (bounded calls) and the estimate."""

from __future__ import annotations

import asyncio

from tokenizers import Tokenizer

from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import EstimateCounter, RemoteCounter, choose_counter, synthesize


class FakeTokenize:
    """A server /tokenize: the trained tokenizer plus a BOS token, with a short network delay."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.calls = 0

    async def __call__(self, text: str) -> int | None:
        self.calls += 1
        await asyncio.sleep(0)
        return len(self.tok.encode(text, add_special_tokens=False).ids) + 1


async def test_remote_counts_are_exact_where_verified_within_budget(byte_bpe: Tokenizer) -> None:
    server = FakeTokenize(byte_bpe)
    counter = RemoteCounter(server)
    built = await synthesize(WorkloadSpec(input_len=200, output_len=16, seed=5), 50, counter=counter)
    acc = built.accuracy
    assert built.token_source == "server_tokenizer"
    assert acc["special_tokens"] == 1
    assert acc["verified"] == 50 and acc["verified_exact"] == 50
    truth = [len(byte_bpe.encode(p.text, add_special_tokens=False).ids) for p in built.prompts]
    assert truth == [p.prompt_tokens for p in built.prompts] == [200] * 50
    assert acc["remote_calls"] == server.calls <= 6 + 50 * 5


async def test_remote_calls_do_not_grow_with_prompts_beyond_the_budget(byte_bpe: Tokenizer) -> None:
    server = FakeTokenize(byte_bpe)
    built = await synthesize(WorkloadSpec(input_len=64, seed=1), 1000, counter=RemoteCounter(server))
    acc = built.accuracy
    assert acc["verified"] == 256
    assert server.calls <= 6 + 256 * 5
    # unverified prompts carry the calibrated expectation; the sample measures its error
    truth = [len(byte_bpe.encode(p.text, add_special_tokens=False).ids) for p in built.prompts]
    errors = [abs(t - p.prompt_tokens) for t, p in zip(truth, built.prompts, strict=True)]
    assert max(errors) <= 3 * max(acc["max_abs_error_tokens"], 1.0)


async def test_remote_is_deterministic(byte_bpe: Tokenizer) -> None:
    spec = WorkloadSpec(input_len=80, seed=9)
    a = await synthesize(spec, 30, counter=RemoteCounter(FakeTokenize(byte_bpe)))
    b = await synthesize(spec, 30, counter=RemoteCounter(FakeTokenize(byte_bpe)))
    assert a.prompts == b.prompts


async def test_estimate_is_one_word_per_expected_token() -> None:
    built = await synthesize(WorkloadSpec(input_len=120, output_len=10, range_ratio=0.2, seed=2), 100,
                             counter=EstimateCounter())
    assert built.token_source == "estimate"
    assert all(len(p.text.split()) == p.prompt_tokens for p in built.prompts)
    assert all(96 <= p.prompt_tokens <= 144 for p in built.prompts)
    assert len({p.text for p in built.prompts}) == 100


async def test_choose_counter_falls_back(tokenizer_dir, byte_bpe: Tokenizer) -> None:  # type: ignore[no-untyped-def]
    async def no_endpoint(text: str) -> int | None:
        return None

    assert (await choose_counter(str(tokenizer_dir), no_endpoint)).source == "tokenizer"
    assert (await choose_counter(None, FakeTokenize(byte_bpe))).source == "server_tokenizer"
    assert (await choose_counter(None, no_endpoint)).source == "estimate"
    assert (await choose_counter(None, None)).source == "estimate"


class CharTokenize:
    """llama.cpp's /tokenize on a character-level SentencePiece vocabulary: a leading "▁", one token per
    character, and a BOS on any text but the empty one. A word is several tokens here."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, text: str) -> int | None:
        self.calls += 1
        return 0 if not text else 1 + len(" " + text)


async def test_multi_token_words_are_cut_to_the_exact_count_and_the_bos_is_measured() -> None:
    server = CharTokenize()
    built = await synthesize(WorkloadSpec(input_len=61, output_len=8, seed=3), 20, counter=RemoteCounter(server))
    acc = built.accuracy
    assert acc["special_tokens"] == 1 and acc["tokens_per_word"] > 3
    assert acc["verified_exact"] == 20 and acc["cut_inside_a_word"] > 0
    # The prompt's own tokens: what the server counts, less its BOS.
    assert [await server(p.text) - 1 for p in built.prompts] == [p.prompt_tokens for p in built.prompts] == [61] * 20
    assert all(not p.text.endswith(" ") for p in built.prompts)
