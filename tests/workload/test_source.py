"""The run's prompts from one recipe: every level its own, the same from the same seed in any process,
exact lengths kept chunk after chunk, shared prefixes counted."""

from __future__ import annotations

from pathlib import Path

import msgspec
from tokenizers import Tokenizer

from plateau_bench.driver.wire import Setup, to_worker
from plateau_bench.spec import TargetSpec, WorkloadSpec
from plateau_bench.workload import EstimateCounter, LocalTokenizer, synthesize
from plateau_bench.workload.feed import CHUNK, LevelKey
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.source import PromptSource, synthetic_recipe


async def _source(workload: WorkloadSpec, counter: EstimateCounter | LocalTokenizer, n: int = 16) -> PromptSource:
    built = await synthesize(workload, n, counter=counter)
    return PromptSource(synthetic_recipe(workload, built), counter if isinstance(counter, LocalTokenizer) else None)


async def _taken(source: PromptSource, key: LevelKey, n: int) -> list[Prompt]:
    feed = source.feed(key, ahead=CHUNK)
    out = [p for i in range(n) if (p := await feed.take(i)) is not None]
    feed.close()
    return out


async def test_every_request_of_every_level_gets_a_prompt_of_its_own() -> None:
    source = await _source(WorkloadSpec(input_len=64, output_len=8, seed=3), EstimateCounter())
    keys = [*(LevelKey(label=f"C={c}") for c in (1, 2, 4)), LevelKey(label="C=4", attempt=2),
            LevelKey(label="C=4", repeat=2), LevelKey(label="run", base=True)]
    prompts = [p for key in keys for p in await _taken(source, key, 3 * CHUNK // 2)]
    texts = [p.text for p in prompts]
    assert len(set(texts)) == len(texts) == len(keys) * 3 * CHUNK // 2
    # not even a 16-token block in common at the start: a block-hashing prefix cache finds nothing
    assert len({" ".join(t.split()[:16]) for t in texts}) == len(texts)
    assert all(p.prompt_tokens == 64 and p.output_tokens == 8 for p in prompts)


async def test_the_one_level_of_a_run_takes_the_prepared_prompts_first() -> None:
    workload = WorkloadSpec(input_len=32, output_len=4, range_ratio=0.5, seed=1)
    built = await synthesize(workload, 16, counter=EstimateCounter())
    source = PromptSource(synthetic_recipe(workload, built))
    taken = await _taken(source, LevelKey(label="C=8", base=True), 40)
    assert taken[:16] == built.prompts
    assert not {p.text for p in taken[16:]} & {p.text for p in built.prompts}


async def test_a_load_process_builds_the_same_prompts_from_the_recipe_in_any_order(tokenizer_dir: Path) -> None:
    workload = WorkloadSpec(input_len=48, output_len=8, range_ratio=0.3, seed=5, tokenizer=str(tokenizer_dir))
    here = await _source(workload, LocalTokenizer.load(tokenizer_dir))
    # what a worker gets: the recipe through the wire, and the tokenizer loaded from the workload's path
    setup = to_worker.decode(msgspec.msgpack.encode(Setup(worker=0, target=TargetSpec(url="http://x"),
                                                          prompts=here.recipe)))
    assert isinstance(setup, Setup)
    there = PromptSource(setup.prompts)
    key = LevelKey(label="C=64", attempt=1, repeat=1)
    stream = (5, 2, 0)   # any stream: the two sources must agree chunk by chunk, whatever was built before
    later_first = there.chunk(stream, 3), there.chunk(stream, 0)
    assert here.chunk(stream, 0) == later_first[1] and here.chunk(stream, 3) == later_first[0]
    assert await _taken(here, key, 300) == await _taken(there, key, 300)


async def test_exact_lengths_hold_in_every_chunk(byte_bpe: Tokenizer) -> None:
    tok = LocalTokenizer(byte_bpe)
    workload = WorkloadSpec(input_len=100, output_len=4, range_ratio=0.5, seed=2)
    source = await _source(workload, tok)
    taken = await _taken(source, LevelKey(label="C=2"), 2 * CHUNK + 10)
    assert [len(byte_bpe.encode(p.text, add_special_tokens=False).ids) for p in taken] == \
        [p.prompt_tokens for p in taken]
    assert len({p.prompt_tokens for p in taken}) > 20   # spread lengths, drawn per chunk


async def test_shared_prefixes_repeat_on_purpose_and_are_counted() -> None:
    workload = WorkloadSpec(input_len=20, output_len=4, prefix_groups=2, prefix_len=30, seed=4)
    source = await _source(workload, EstimateCounter())
    feed = source.feed(LevelKey(label="C=4"), ahead=CHUNK)
    taken = [p for i in range(300) if (p := await feed.take(i)) is not None]
    heads = {" ".join(p.text.split()[:30]) for p in taken}
    assert len(heads) == 2                              # two shared prefixes ...
    assert len({p.text for p in taken}) == 300          # ... and every prompt still its own
    use = feed.use()
    assert (use.repeated, use.prefix_tokens, use.prompt_tokens) == (0, 300 * 30, 300 * 50)
    assert use.reusable_share == 0.6


async def test_a_salt_keeps_the_lengths_and_draws_new_text() -> None:
    plain = WorkloadSpec(input_len=64, output_len=8, range_ratio=0.5, seed=7)
    salted = [msgspec.structs.replace(plain, prompt_salt=s) for s in (1, 2)]
    heads = [await synthesize(w, 32, counter=EstimateCounter()) for w in (plain, *salted)]
    lengths = {tuple((p.prompt_tokens, p.output_tokens) for p in h.prompts) for h in heads}
    assert len(lengths) == 1                                     # the seed's lengths, whatever the salt
    assert len({p.text for h in heads for p in h.prompts}) == 3 * 32   # text of each salt's own
    later = [await _taken(await _source(w, EstimateCounter()), LevelKey(label="C=8"), 300) for w in salted]
    assert [(p.prompt_tokens, p.output_tokens) for p in later[0]] == [(p.prompt_tokens, p.output_tokens)
                                                                       for p in later[1]]
    assert not {p.text for p in later[0]} & {p.text for p in later[1]}
