"""Multi-turn sessions on the closed load loop: each worker holds one conversation at a time.

The load loop (``load``) releases requests as it always does; ``SessionSender`` turns a worker's
next request into the next turn of that worker's conversation (``workload.sessions``): it waits
the think time after the previous answer, then sends the whole history with the new message and
the session id header, and keeps the answer for the turns after. When a conversation's last turn
is answered, the worker starts the next conversation of the pool (``SessionPool``, cyclic, carried
across levels so a new level does not replay the conversations the server has just cached). A
failed turn ends its conversation, since its history would be wrong.

So concurrency counts sessions: C workers keep C conversations going, each either thinking or
waiting for an answer. In an open loop (``--rate``) each arrival is a new conversation, keyed by
the load loop as a worker of its own, whose turns follow one another. A turn's scheduled time is
its worker's free time plus the think time, so the send lag (``sent_ns - scheduled_ns``) still
measures the load generator alone. Records carry their ``session`` number and ``turn`` index for
the per-turn metrics.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from plateau_bench.errors import ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS
from plateau_bench.workload.sessions import Conversation, History, Sessions


class TurnClient(Protocol):
    """What a session needs from the HTTP client (``client.StreamingClient``)."""

    async def send_turn(self, *, index: int, prompt: str, messages: list[dict[str, str]] | None, prompt_tokens: int,
                        max_tokens: int, scheduled_ns: int, worker: int = -1, warmup: bool = False,
                        headers: dict[str, str] | None = None) -> tuple[RequestRecord, str]: ...

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None: ...


class SessionPool:
    """The conversations of a run and how many have been started (all levels together)."""

    def __init__(self, sessions: Sessions, *, chat: bool, think_time_s: float, header: str) -> None:
        if not sessions.conversations:
            raise ValueError("a session pool needs at least one conversation")
        self.conversations = sessions.conversations
        self.chat = chat
        self.think_ns = round(think_time_s * NS)
        self.header = header
        self.started = 0

    def next(self) -> tuple[int, Conversation]:
        number = self.started
        self.started += 1
        return number, self.conversations[number % len(self.conversations)]


@dataclass
class _Active:
    number: int
    conv: Conversation
    turn: int = 0
    history: History = field(default_factory=History)


class SessionSender:
    """A ``load.Sender`` that sends each worker's requests as the turns of its conversation."""

    def __init__(self, client: TurnClient, pool: SessionPool) -> None:
        self.client = client
        self.pool = pool
        self._active: dict[int, _Active] = {}

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        pool = self.pool
        active = self._active.get(worker)
        if active is None:
            number, conv = pool.next()
            active = self._active[worker] = _Active(number, conv)
        elif pool.think_ns:
            await asyncio.sleep(pool.think_ns / NS)
            scheduled_ns += pool.think_ns
        conv, turn, history = active.conv, active.turn, active.history
        record, answer = await self.client.send_turn(
            index=index, prompt="" if pool.chat else history.completion_prompt(conv, turn),
            messages=history.chat_messages(conv, turn) if pool.chat else None,
            prompt_tokens=history.prompt_tokens(conv, turn), max_tokens=conv.turns[turn].output_tokens,
            scheduled_ns=scheduled_ns, worker=worker, warmup=warmup,
            headers={pool.header: f"session-{active.number}"})
        if record.error is not None or turn + 1 >= len(conv.turns):
            del self._active[worker]
        else:
            history.answers.append(answer)
            history.answer_tokens += record.output_tokens
            active.turn = turn + 1
        # open-loop conversations are keyed -2, -3, ...; their records carry the open loop's worker -1
        return msgspec.structs.replace(record, session=active.number, turn=turn, worker=max(worker, -1))

    def in_session(self, worker: int) -> bool:
        """Whether the conversation ``worker`` holds has turns left."""
        return worker in self._active

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None:
        return self.client.partial_record(index, error=error, detail=detail)
