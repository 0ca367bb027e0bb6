"""Exact prompt lengths with real (locally trained) tokenizers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from plateau_bench.errors import ConfigError
from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import LocalTokenizer, synthesize
from plateau_bench.workload.tokenized import candidate_ids, exact_texts


def _recount(tok: LocalTokenizer, text: str) -> int:
    return len(tok.tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("fixture", ["byte_bpe", "metaspace_bpe", "char_bpe"])
def test_every_prompt_reencodes_to_its_target(fixture: str, request: pytest.FixtureRequest) -> None:
    tok = LocalTokenizer(request.getfixturevalue(fixture), fixture)
    targets = [1, 2, 3, 5, 17, 64, 200, 513] * 4
    result = exact_texts(tok, targets, np.random.default_rng(7))
    assert result.misses == 0
    assert [_recount(tok, t) for t in result.texts] == targets
    assert result.counts == targets


def test_byte_level_takes_the_fast_path_and_avoids_special_tokens(byte_bpe: Tokenizer) -> None:
    tok = LocalTokenizer(byte_bpe)
    cands = candidate_ids(tok, np.random.default_rng(0))
    assert cands.word_start and cands.concatenative
    specials = {byte_bpe.token_to_id("<s>"), byte_bpe.token_to_id("</s>")}
    assert specials.isdisjoint(cands.ids.tolist())
    result = exact_texts(tok, [128] * 50, np.random.default_rng(1))
    assert result.rounds == 0
    assert 0 < result.verified <= 50
    assert all("<s>" not in t and "</s>" not in t for t in result.texts)


def test_tokenizer_without_word_boundaries_goes_through_correction(char_bpe: Tokenizer) -> None:
    tok = LocalTokenizer(char_bpe)
    result = exact_texts(tok, [100] * 20, np.random.default_rng(3))
    assert result.rounds >= 1
    assert [_recount(tok, t) for t in result.texts] == [100] * 20


async def test_synthesize_same_seed_same_prompts_distinct_prompts(tokenizer_dir: Path) -> None:
    tok = LocalTokenizer.load(tokenizer_dir)
    spec = WorkloadSpec(input_len=256, output_len=64, seed=11, tokenizer=str(tokenizer_dir))
    first = await synthesize(spec, 40, counter=tok)
    again = await synthesize(spec, 40, counter=LocalTokenizer.load(tokenizer_dir / "tokenizer.json"))
    other = await synthesize(WorkloadSpec(input_len=256, output_len=64, seed=12), 40, counter=tok)
    assert first.prompts == again.prompts
    assert [p.text for p in first.prompts] != [p.text for p in other.prompts]
    assert len({p.text for p in first.prompts}) == 40
    # distinct from the first tokens on: a prefix cache cannot serve one prompt from another
    assert len({tuple(tok.encode(p.text)[:4]) for p in first.prompts}) == 40
    assert first.token_source == "tokenizer"
    assert all(p.prompt_tokens == 256 == _recount(tok, p.text) and p.output_tokens == 64 for p in first.prompts)


async def test_range_ratio_bounds_and_spread(byte_bpe: Tokenizer) -> None:
    tok = LocalTokenizer(byte_bpe)
    spec = WorkloadSpec(input_len=100, output_len=40, range_ratio=0.5, seed=3)
    prompts = (await synthesize(spec, 300, counter=tok)).prompts
    inputs = [p.prompt_tokens for p in prompts]
    outputs = [p.output_tokens for p in prompts]
    assert min(inputs) >= 50 and max(inputs) <= 150
    assert min(outputs) >= 20 and max(outputs) <= 60
    assert len(set(inputs)) > 30 and len(set(outputs)) > 15
    assert all(_recount(tok, p.text) == p.prompt_tokens for p in prompts)


def test_bad_tokenizer_paths_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no tokenizer\.json"):
        LocalTokenizer.load(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        LocalTokenizer.load(tmp_path / "missing.json")
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot load"):
        LocalTokenizer.load(broken)
