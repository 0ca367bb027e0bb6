"""Shared prefixes: G system prompts of exactly P tokens, each request's own suffix after one."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from plateau_bench.errors import ConfigError
from plateau_bench.sim.tokens import count_tokens
from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import EstimateCounter, LocalTokenizer, RemoteCounter, synthesize


async def twin_tokenize(text: str) -> int | None:
    """The twin's /tokenize: one token per word, no special tokens."""
    return count_tokens(text)


async def test_prefixes_through_tokenize_are_exact_and_shared() -> None:
    spec = WorkloadSpec(input_len=20, output_len=8, prefix_groups=4, prefix_len=100, seed=2)
    built = await synthesize(spec, 200, counter=RemoteCounter(twin_tokenize))
    prompts = built.prompts
    assert [p.prompt_tokens for p in prompts] == [120] * 200
    assert [count_tokens(p.text) for p in prompts] == [120] * 200
    assert {p.prefix_group for p in prompts} == {0, 1, 2, 3}
    heads = {p.prefix_group: " ".join(p.text.split()[:100]) for p in prompts}
    for p in prompts:
        assert " ".join(p.text.split()[:100]) == heads[p.prefix_group]
    assert len(set(heads.values())) == 4
    # the prefixes differ from their first tokens on; the suffixes differ between requests
    assert len({tuple(h.split()[:4]) for h in heads.values()}) == 4
    assert len({" ".join(p.text.split()[100:]) for p in prompts}) == 200
    acc = built.accuracy
    assert acc["prefix_groups"] == 4 and acc["prefix_len"] == 100 and acc["prefix_exact"] == 4


async def test_prefixes_with_a_local_tokenizer_are_exact_in_tokens(byte_bpe: Tokenizer) -> None:
    tok = LocalTokenizer(byte_bpe)
    spec = WorkloadSpec(input_len=50, prefix_groups=3, prefix_len=64, seed=4)
    built = await synthesize(spec, 60, counter=tok)
    assert built.accuracy["prefix_join_misses"] == 0
    assert [p.prompt_tokens for p in built.prompts] == [114] * 60
    assert [tok.count_text(p.text) for p in built.prompts] == [114] * 60
    ids_by_group: dict[int, list[int]] = {}
    for p in built.prompts:
        head = tok.encode(p.text)[:64]
        assert ids_by_group.setdefault(p.prefix_group, head) == head
    assert len(ids_by_group) == 3


async def test_prefixes_with_the_estimate_are_words() -> None:
    built = await synthesize(WorkloadSpec(input_len=10, prefix_groups=1, prefix_len=30), 5,
                             counter=EstimateCounter())
    assert [len(p.text.split()) for p in built.prompts] == [40] * 5
    assert len({" ".join(p.text.split()[:30]) for p in built.prompts}) == 1


async def test_without_prefixes_prompts_are_unchanged() -> None:
    plain = await synthesize(WorkloadSpec(input_len=30, seed=9), 20, counter=EstimateCounter())
    assert {p.prefix_group for p in plain.prompts} == {-1}
    assert "prefix_groups" not in plain.accuracy


@pytest.mark.parametrize(("spec", "message"), [
    (WorkloadSpec(prefix_groups=2), "--prefix-groups and --prefix-len go together"),
    (WorkloadSpec(prefix_len=64), "--prefix-groups and --prefix-len go together"),
    (WorkloadSpec(prefix_groups=-1, prefix_len=4), "--prefix-groups must be >= 1"),
    (WorkloadSpec(prefix_groups=2, prefix_len=4, dataset="d.jsonl"), "cannot be combined with --dataset"),
])
def test_bad_prefix_settings_are_one_line(spec: WorkloadSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec.validate()
