"""Datasets: JSONL and ShareGPT parsing, and one-line errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from plateau_bench.errors import ConfigError
from plateau_bench.spec import WorkloadSpec
from plateau_bench.workload import EstimateCounter, LocalTokenizer, RemoteCounter, load_dataset, synthesize


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_prompt_or_text_and_output_lengths(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", "\n".join([
        json.dumps({"prompt": "hello there", "output_len": 7}),
        "",
        json.dumps({"text": "second one", "max_tokens": 3}),
        json.dumps({"prompt": "third"}),
    ]) + "\n")
    entries = load_dataset(path)
    assert [(e.prompt, e.output_len) for e in entries] == [("hello there", 7), ("second one", 3), ("third", None)]


def _sharegpt(convs: list[object]) -> str:
    return json.dumps([{"id": str(i), "conversations": c} for i, c in enumerate(convs)])


def test_sharegpt_first_human_turn_and_its_answer(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.json", _sharegpt([
        [{"from": "human", "value": "What is up?"}, {"from": "gpt", "value": "the sky is up"},
         {"from": "human", "value": "later"}, {"from": "gpt", "value": "ignored"}],
        [{"from": "system", "value": "be nice"}, {"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
        [{"from": "human", "value": "no answer"}],
        [],
    ]))
    entries = load_dataset(path)
    assert [(e.prompt, e.reference_output) for e in entries] == [("What is up?", "the sky is up"), ("hi", "yo")]


async def test_sharegpt_output_len_from_the_answer_with_a_tokenizer(tmp_path: Path, byte_bpe: Tokenizer) -> None:
    answer = "the state of the union is good and people work"
    path = _write(tmp_path / "s.json", _sharegpt([[{"from": "human", "value": "tell me"},
                                                   {"from": "gpt", "value": answer}]]))
    tok = LocalTokenizer(byte_bpe)
    spec = WorkloadSpec(dataset=str(path), output_len=99)
    (prompt,) = (await synthesize(spec, 5, counter=tok)).prompts
    assert prompt.output_tokens == tok.count_text(answer) != 99
    assert prompt.prompt_tokens == tok.count_text("tell me")
    (estimated,) = (await synthesize(spec, 5, counter=EstimateCounter())).prompts
    assert estimated.output_tokens == 99


async def test_dataset_is_shuffled_by_seed_and_taken_whole(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.jsonl", "".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(50)))
    a = await synthesize(WorkloadSpec(dataset=str(path), seed=1), 20, counter=EstimateCounter())
    b = await synthesize(WorkloadSpec(dataset=str(path), seed=1), 20, counter=EstimateCounter())
    c = await synthesize(WorkloadSpec(dataset=str(path), seed=2), 20, counter=EstimateCounter())
    assert a.prompts == b.prompts != c.prompts
    # every entry once, in the seed's order: a run takes them in turn and knows when they run out
    assert sorted(p.text for p in a.prompts) == sorted(f"prompt {i}" for i in range(50))
    assert [p.text for p in a.prompts] != [f"prompt {i}" for i in range(50)]


@pytest.mark.parametrize(("name", "content", "message"), [
    ("missing.jsonl", None, "cannot read"),
    ("empty.jsonl", "  \n", "empty"),
    ("bad.jsonl", '{"prompt": "ok"}\n{"prompt": \n', r"bad.jsonl:2: invalid JSON"),
    ("list.jsonl", '{"prompt": "ok"}\n[1, 2]\n', r":2: expected a JSON object"),
    ("noprompt.jsonl", '{"question": "x"}\n', r":1: needs a non-empty"),
    ("badlen.jsonl", '{"prompt": "x", "output_len": -3}\n', r":1: .*positive integer"),
    ("bad.json", '[{"conversations": [', "invalid JSON"),
    ("nothing.json", '[{"conversations": [{"from": "human", "value": "x"}]}]', "no usable prompts"),
    ("csv.txt", "prompt,output\nhi,3\n", "expected JSONL objects or a ShareGPT JSON list"),
    ("latin1.jsonl", b'{"prompt": "caf\xe9"}\n', "not UTF-8"),
])
def test_bad_files_are_one_line_config_errors(tmp_path: Path, name: str, content: str | bytes | None,
                                              message: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_dataset(path)
    assert "\n" not in str(info.value) and name in str(info.value)


async def test_dataset_counted_by_the_server_without_its_special_tokens(tmp_path: Path,
                                                                        byte_bpe: Tokenizer) -> None:
    texts = ["the state of the union", "people work in the city", "music"]
    path = _write(tmp_path / "p.jsonl", "".join(json.dumps({"prompt": t}) + "\n" for t in texts))

    async def tokenize(text: str) -> int | None:
        return len(byte_bpe.encode(text, add_special_tokens=False).ids) + 1

    prompts = (await synthesize(WorkloadSpec(dataset=str(path)), 3, counter=RemoteCounter(tokenize))).prompts
    tok = LocalTokenizer(byte_bpe)
    assert {(p.text, p.prompt_tokens) for p in prompts} == {(t, tok.count_text(t)) for t in texts}
