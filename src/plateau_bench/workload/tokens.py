"""Token counters: where a prompt's token count comes from.

Three sources, best first:

* ``LocalTokenizer``: a Hugging Face ``tokenizer.json`` loaded with the ``tokenizers`` library.
  Counts are exact (the server's tokenizer, minus any special tokens it adds itself).
* ``RemoteCounter``: the server's own ``/tokenize`` endpoint, through an async callable
  ``count_remote(text) -> int | None``. Exact for the text it is asked about, but each count is a
  network round trip, so prompt synthesis calls it a bounded number of times (see ``synth``).
* ``EstimateCounter``: no tokenizer at all. Synthetic prompts are built from common English words
  that are one token each in the vocabularies of current models (about one token per word); other
  text is estimated at four characters per token. The analysis later compares these expected
  counts with the server's ``usage.prompt_tokens`` and reports the error.

Counts never include special tokens (BOS, chat template): ``--input-len`` means the prompt's own
tokens, as in vLLM's and SGLang's random datasets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from plateau_bench.errors import ConfigError
from plateau_bench.records import TOKEN_SOURCE_ESTIMATE, TOKEN_SOURCE_TOKENIZER

# Counted by the server's /tokenize endpoint: exact where verified, calibrated elsewhere.
TOKEN_SOURCE_SERVER_TOKENIZER = "server_tokenizer"

CHARS_PER_TOKEN_ESTIMATE = 4.0
REMOTE_CONCURRENCY = 16

CountRemote = Callable[[str], Awaitable[int | None]]


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text; ``source`` says how (stored with the results)."""

    source: str

    async def count(self, text: str) -> int: ...

    async def count_many(self, texts: Sequence[str]) -> list[int]: ...


class LocalTokenizer:
    """A local ``tokenizers`` tokenizer: exact counts, and the id-level access synthesis needs."""

    source = TOKEN_SOURCE_TOKENIZER

    def __init__(self, tokenizer: object, name: str = "") -> None:
        from tokenizers import Tokenizer

        if not isinstance(tokenizer, Tokenizer):
            raise TypeError("LocalTokenizer needs a tokenizers.Tokenizer")
        self.tokenizer = tokenizer
        self.name = name

    @classmethod
    def load(cls, path: str | Path) -> LocalTokenizer:
        """Load ``tokenizer.json``, or the one inside a Hugging Face model directory."""
        from tokenizers import Tokenizer

        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            where = f"{p} has no tokenizer.json" if p.is_dir() else f"{p} does not exist"
            raise ConfigError(f"--tokenizer: {where} (give a local tokenizer.json or a model directory)")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust library raises plain Exception subclasses
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"--tokenizer: cannot load {file}: {first_line}") from None
        return cls(tok, name=str(file))

    def count_text(self, text: str) -> int:
        """Synchronous count, e.g. for output tokens when the server reports no usage."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_lengths(self, texts: Sequence[str]) -> list[int]:
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def decode_many(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return list(self.tokenizer.decode_batch([list(x) for x in ids], skip_special_tokens=True))

    async def count(self, text: str) -> int:
        return self.count_text(text)

    async def count_many(self, texts: Sequence[str]) -> list[int]:
        return self.encode_lengths(texts)


class RemoteCounter:
    """The server's ``/tokenize`` endpoint, behind an async callable.

    ``calls`` counts round trips so synthesis can report (and tests can check) its budget.
    """

    source = TOKEN_SOURCE_SERVER_TOKENIZER

    def __init__(self, count_remote: CountRemote, *, concurrency: int = REMOTE_CONCURRENCY) -> None:
        self._count_remote = count_remote
        self._sem = asyncio.Semaphore(concurrency)
        self.calls = 0

    async def count(self, text: str) -> int:
        async with self._sem:
            self.calls += 1
            n = await self._count_remote(text)
        if n is None:
            raise ConfigError("the server's /tokenize endpoint stopped answering while building prompts")
        return n

    async def count_many(self, texts: Sequence[str]) -> list[int]:
        return list(await asyncio.gather(*(self.count(t) for t in texts)))


class EstimateCounter:
    """No tokenizer: four characters per token (synthesis uses one token per word instead)."""

    source = TOKEN_SOURCE_ESTIMATE

    @staticmethod
    def estimate(text: str) -> int:
        return max(1, round(len(text) / CHARS_PER_TOKEN_ESTIMATE))

    async def count(self, text: str) -> int:
        return self.estimate(text)

    async def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.estimate(t) for t in texts]


async def choose_counter(tokenizer: str | None, count_remote: CountRemote | None = None) -> TokenCounter:
    """The best counter available: ``--tokenizer``, else a working ``/tokenize``, else an estimate.

    ``count_remote`` is probed once; a ``None`` answer means the server has no such endpoint.
    """
    if tokenizer:
        return LocalTokenizer.load(tokenizer)
    if count_remote is not None and await count_remote("hello world") is not None:
        return RemoteCounter(count_remote)
    return EstimateCounter()
