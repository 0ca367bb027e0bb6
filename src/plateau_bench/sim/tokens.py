"""The twin's tokenizer: one whitespace-separated word is one token, or a real one (``TwinTokenizer``).

Words are exact and trivially fast, so a prompt's count is known to the client and to the server alike:
``/tokenize`` returns the same number as ``usage.prompt_tokens``. Token ids are a stable hash of
the word (CRC-32 modulo a 32k vocabulary), for clients that want ids. Given a Hugging Face tokenizer
(``serve-sim --tokenizer``, or the client's ``--tokenizer`` for the embedded twin) the twin counts
and hashes prompts with it instead, as a server does: a client that counts with that tokenizer sees
``usage.prompt_tokens`` equal to what it sent, and shared prefixes share token ids. Generated text is made of
words too, each with a leading space, so the text of ``n`` tokens splits into ``n`` words.
Chat requests count the words of every message's text content (no template tokens are added).
"""

from __future__ import annotations

import zlib
from typing import Any

VOCAB_SIZE = 32_000

_OUTPUT_WORDS = (
    "the", "plateau", "is", "where", "more", "load", "adds", "queueing", "not", "tokens", "batch",
    "step", "cache", "block", "sequence", "decode", "prefill", "server", "request", "time",
    "model", "engine", "wave", "cap", "compute", "memory", "bandwidth", "scheduler", "latency",
    "throughput", "concurrency", "token",
)
_PIECES = tuple(" " + w for w in _OUTPUT_WORDS)


def count_tokens(text: str) -> int:
    return len(text.split())


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % VOCAB_SIZE for w in text.split()]


class TwinTokenizer:
    """How the twin's server reads a prompt: words (``path`` None) or the tokenizer at ``path``."""

    def __init__(self, path: str | None = None) -> None:
        from plateau_bench.workload.tokens import LocalTokenizer

        self.path = path
        self._local = LocalTokenizer.load(path) if path else None

    def count(self, text: str) -> int:
        return count_tokens(text) if self._local is None else self._local.count_text(text)

    def ids(self, text: str) -> list[int]:
        return token_ids(text) if self._local is None else self._local.encode(text)


def prompt_text(body: dict[str, Any]) -> str | list[int] | None:
    """The prompt of a completions body (text, or token ids), None when it has none."""
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        elif all(isinstance(t, int) for t in prompt):
            return [int(t) for t in prompt]
        else:
            return None
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]
    return prompt if isinstance(prompt, str) else None


def messages_text(messages: object) -> str | None:
    """The text content of chat messages joined by spaces; None when they are malformed."""
    if not isinstance(messages, list) or not messages:
        return None
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            return None
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        elif content is not None:
            return None
    return " ".join(parts)


def output_text(seed: int, start: int, stop: int) -> str:
    """The text of generated tokens ``start..stop-1`` of the request numbered ``seed``."""
    n = len(_PIECES)
    return "".join(_PIECES[(seed + i) % n] for i in range(start, stop))
