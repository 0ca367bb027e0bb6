"""Trace files (Azure CSV, Mooncake JSONL, plain JSONL/CSV) and the prompts built for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from plateau_bench.errors import ConfigError
from plateau_bench.sim.tokens import count_tokens
from plateau_bench.workload import LocalTokenizer, RemoteCounter
from plateau_bench.workload.trace import load_trace
from plateau_bench.workload.trace_prompts import trace_prompts

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


async def twin_tokenize(text: str) -> int | None:
    return count_tokens(text)


def test_azure_csv() -> None:
    trace = load_trace(TRACES / "azure.csv")
    assert trace.format == "azure" and len(trace.rows) == 200
    first, second = trace.rows[:2]
    assert (first.offset_ns, first.input_len, first.output_len) == (0, 3347, 42)
    # 18:15:46.6805900 -> 18:15:46.7342410 (the seventh digit is dropped)
    assert second.offset_ns == 53_651_000 and (second.input_len, second.output_len) == (896, 56)
    assert all(a.offset_ns <= b.offset_ns for a, b in zip(trace.rows, trace.rows[1:], strict=False))


def test_mooncake_jsonl_keeps_hash_ids_and_reads_milliseconds() -> None:
    trace = load_trace(TRACES / "mooncake.jsonl")
    assert trace.format == "mooncake" and len(trace.rows) == 60
    assert trace.rows[1].offset_ns == 103_000_000 and trace.rows[0].hash_ids == (100, 101, 10000)


@pytest.mark.parametrize("name", ["plain.jsonl", "plain.csv"])
def test_plain_formats(name: str) -> None:
    trace = load_trace(TRACES / name)
    assert trace.format == "plain" and trace.rows[0].offset_ns == 0


def test_time_scale_divides_offsets_and_multiplies_the_rate() -> None:
    trace = load_trace(TRACES / "plain.csv")
    assert len(trace.rows) == 500 and 80 < trace.rate() < 120
    assert trace.offsets_ns(2.0)[-1] == round(trace.rows[-1].offset_ns / 2)
    assert trace.rate(2.0) == pytest.approx(2 * trace.rate())
    assert len(load_trace(TRACES / "plain.csv", limit=10).rows) == 10


@pytest.mark.parametrize(("text", "message"), [
    ("a,b,c\n1,2,3\n", "unknown format"),
    ("time_s,input_len,output_len\n0,5\n", ":2: expected 3 columns"),
    ("time_s,input_len,output_len\n0,0,5\n", ":2: input_len must be a positive integer"),
    ("time_s,input_len,output_len\nsoon,4,5\n", ":2: time_s must be a number"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,5\n", ":2: TIMESTAMP 'yesterday' is not"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1}\n', ":2: input_length must be"),
    ('{"time_s": 0, "input_len": 5, "output_len": 2, "hash_ids": [1, "x"]}\n', ":1: hash_ids must be a list"),
    ("{not json\n", ":1: invalid JSON"),
    ("\n\n", "the file is empty"),
])
def test_bad_traces_are_one_line_naming_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.trace"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_trace(path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


async def test_prompts_have_the_recorded_lengths_exactly_on_the_twin() -> None:
    trace = load_trace(TRACES / "plain.jsonl")
    built = await trace_prompts(trace, counter=RemoteCounter(twin_tokenize), seed=0)
    assert [p.prompt_tokens for p in built.prompts] == [r.input_len for r in trace.rows]
    assert [count_tokens(p.text) for p in built.prompts] == [r.input_len for r in trace.rows]
    assert [p.output_tokens for p in built.prompts] == [r.output_len for r in trace.rows]


async def test_equal_hash_ids_give_equal_token_blocks() -> None:
    trace = load_trace(TRACES / "mooncake.jsonl")
    built = await trace_prompts(trace, counter=RemoteCounter(twin_tokenize), seed=0)
    blocks: dict[int, list[str]] = {}
    for row, prompt in zip(trace.rows, built.prompts, strict=True):
        words = prompt.text.split()
        assert len(words) == prompt.prompt_tokens == row.input_len
        for k, h in enumerate(row.hash_ids):
            block = words[512 * k:512 * (k + 1)]
            seen = blocks.setdefault(h, block)
            n = min(len(seen), len(block))
            assert seen[:n] == block[:n]   # a cut last block is a prefix of that id's block
    firsts = {h: tuple(b[:8]) for h, b in blocks.items()}
    assert len(set(firsts.values())) == len(firsts)   # different ids, different text
    assert built.accuracy["trace_blocks"] == len(blocks)


async def test_trace_prompts_with_a_local_tokenizer_are_counted(byte_bpe: Tokenizer) -> None:
    trace = load_trace(TRACES / "mooncake.jsonl", limit=12)
    tok = LocalTokenizer(byte_bpe)
    built = await trace_prompts(trace, counter=tok, seed=1)
    assert [tok.count_text(p.text) for p in built.prompts] == [p.prompt_tokens for p in built.prompts]
    misses = built.accuracy["trace_misses"]
    assert misses == sum(p.prompt_tokens != r.input_len for p, r in zip(built.prompts, trace.rows, strict=True))
    assert misses <= 2
