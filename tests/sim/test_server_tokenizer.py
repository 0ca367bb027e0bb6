"""The twin's server counts prompts with a real tokenizer when it is given one, as a server does."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import msgspec
import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.sim.embed import ServeOptions, start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.sim.tokens import TwinTokenizer
from plateau_bench.workload.tokens import LocalTokenizer

from support.loading import Cli
from support.trained_tokenizers import train_char_bpe

PROMPT = "the plateau is where more load adds queueing, not tokens; concurrency 1,024 waits"


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train_char_bpe().save(str(path))   # merges cross word boundaries: far from one token per word
    return path


async def _usage(url: str, prompt: str) -> tuple[int, int]:
    """(usage.prompt_tokens of a completion, /tokenize's count) for ``prompt``."""
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/completions", json={"model": "tiny", "prompt": prompt,
                                                                "max_tokens": 2}) as resp:
            usage = msgspec.json.decode(await resp.read())["usage"]
        async with session.post(url + "/tokenize", json={"prompt": prompt}) as resp:
            counted = msgspec.json.decode(await resp.read())
    assert counted["count"] == len(counted["tokens"])
    return usage["prompt_tokens"], counted["count"]


async def test_usage_is_what_the_prompt_holds_in_the_given_tokenizer(tokenizer_file: Path) -> None:
    exact = LocalTokenizer.load(tokenizer_file).count_text(PROMPT)
    words = len(PROMPT.split())
    assert exact != words   # the test means something only if the two counts differ
    with start_sim_server(get_preset("tiny"), in_process=True, tokenizer=str(tokenizer_file)) as twin:
        assert await _usage(twin.url, PROMPT) == (exact, exact)
    with start_sim_server(get_preset("tiny"), in_process=True) as twin:
        assert await _usage(twin.url, PROMPT) == (words, words)   # no tokenizer: one word, one token


def test_a_file_that_is_not_a_tokenizer_is_refused_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="--tokenizer: cannot load") as refused:
        ServeOptions(tokenizer=str(bad)).validate()
    assert "\n" not in str(refused.value)
    assert TwinTokenizer().count(PROMPT) == len(PROMPT.split())


def test_the_embedded_twin_counts_with_the_clients_tokenizer(cli: Cli, tokenizer_file: Path,
                                                             tmp_path: Path) -> None:
    from plateau_bench.store import load_requests, load_result

    out = tmp_path / "run"
    result = cli("run", "--concurrency", "2", "--num-requests", "4", "--mode", "steady", "--input-len", "64",
                 "--output-len", "4", "--tokenizer", str(tokenizer_file), "--quiet", "--out", str(out))
    assert result.exit_code == 0, result.output
    (level,) = load_result(out).levels
    assert level.completed == 4
    # The client built 64-token prompts in that tokenizer; the server's usage says the same.
    records = [r for rs in load_requests(out).values() for r in rs]
    assert len(records) == 4 and {r.prompt_tokens for r in records} == {64}
