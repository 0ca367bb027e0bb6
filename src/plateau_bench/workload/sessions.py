"""Multi-turn conversations (``--sessions N --turns T``): what each turn of each session says.

A session is a conversation of T turns (``--turns``: a number or a distribution, drawn per
session). Each turn is a user message of ``--input-len`` tokens and asks for ``--output-len``
tokens (both drawn per turn); with ``--prefix-groups`` the conversation starts with one of the
shared system prompts. The conversation carries its history: turn k sends every earlier user
message and the answer the server actually gave to it, then the new message.

* chat endpoint: ``messages`` grows, ``[system?, user 1, assistant 1, ..., user k]``;
* completions: the prompt grows, the same texts joined in order (a space between two texts where
  neither side has one, as words need to stay apart).

Token accounting: turn k's prompt has the system prompt's tokens, every user message's, and every
earlier answer's tokens as the server reported them (``usage``), which is exact on a server whose
tokenizer gives the answer's text back the same tokens (the twin, and most text); the server's own
count of the prompt is what the record keeps.

Determinism: one generator seeded with ``--seed`` draws the turn counts, then the lengths, then the
texts, so the same seed gives the same conversations; the answers are the server's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plateau_bench.spec import LengthSpec, WorkloadSpec
from plateau_bench.workload.lengths import LengthSampler, draw
from plateau_bench.workload.prefixes import shared_prefixes
from plateau_bench.workload.prompts import Prompt, make_texts, text_rng
from plateau_bench.workload.tokens import TokenCounter

MAX_TURNS = 10_000


@dataclass(frozen=True, slots=True)
class Turn:
    text: str
    tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Conversation:
    """One session: its turns, and the shared system prompt it starts with (if any)."""

    number: int
    turns: list[Turn]
    system: str | None = None
    system_tokens: int = 0
    prefix_group: int = -1

    def first_prompt(self) -> Prompt:
        first = self.turns[0]
        text = _glue(self.system, first.text) if self.system else first.text
        return Prompt(text, self.system_tokens + first.tokens, first.output_tokens, self.prefix_group)


@dataclass
class History:
    """What a session has said so far: the answers to its turns, and their token counts."""

    answers: list[str] = field(default_factory=list)
    answer_tokens: int = 0

    def prompt_tokens(self, conv: Conversation, turn: int) -> int:
        """Turn ``turn``'s expected prompt tokens (see the module docstring)."""
        return conv.system_tokens + sum(t.tokens for t in conv.turns[:turn + 1]) + self.answer_tokens

    def completion_prompt(self, conv: Conversation, turn: int) -> str:
        parts = [conv.system] if conv.system else []
        for k in range(turn):
            parts += [conv.turns[k].text, self.answers[k]]
        parts.append(conv.turns[turn].text)
        text = parts[0]
        for part in parts[1:]:
            text = _glue(text, part)
        return text

    def chat_messages(self, conv: Conversation, turn: int) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": conv.system}] if conv.system else []
        for k in range(turn):
            messages.append({"role": "user", "content": conv.turns[k].text})
            messages.append({"role": "assistant", "content": self.answers[k]})
        messages.append({"role": "user", "content": conv.turns[turn].text})
        return messages


def _glue(left: str, right: str) -> str:
    if not right or not left or left[-1:].isspace() or right[:1].isspace():
        return left + right
    return f"{left} {right}"


@dataclass(frozen=True)
class Sessions:
    conversations: list[Conversation]
    token_source: str
    accuracy: dict[str, Any]

    @property
    def max_turns(self) -> int:
        return max(len(c.turns) for c in self.conversations)

    @property
    def mean_turns(self) -> float:
        return sum(len(c.turns) for c in self.conversations) / len(self.conversations)


async def build_sessions(workload: WorkloadSpec, *, counter: TokenCounter) -> Sessions:
    """The ``workload.sessions`` conversations of a multi-turn workload."""
    workload.validate()
    rng = np.random.default_rng(workload.seed)
    n = workload.sessions
    turns_spec = workload.turns or LengthSpec(text="1", kind="fixed", a=1.0)
    counts = [min(t, MAX_TURNS) for t in draw(rng, turns_spec, n, "--turns")]
    inputs, outputs = LengthSampler(workload, rng).draw(sum(counts))
    texts_rng = text_rng(workload, rng)
    texts, tokens, accuracy = await make_texts(counter, inputs, texts_rng)
    systems: list[tuple[str | None, int, int]] = [(None, 0, -1)] * n
    if workload.prefix_groups:
        shared = await shared_prefixes(counter, workload.prefix_groups, workload.prefix_len, texts_rng, make_texts)
        accuracy = {**accuracy, **shared.accuracy}
        groups = [int(g) for g in rng.integers(0, workload.prefix_groups, n)]
        systems = [(shared.texts[g], shared.counts[g], g) for g in groups]
    conversations: list[Conversation] = []
    start = 0
    for number, count in enumerate(counts):
        turns = [Turn(texts[i], tokens[i], outputs[i]) for i in range(start, start + count)]
        start += count
        system, system_tokens, group = systems[number]
        conversations.append(Conversation(number, turns, system, system_tokens, group))
    accuracy = {**accuracy, "sessions": n, "turns_total": sum(counts)}
    return Sessions(conversations, counter.source, accuracy)
