"""What the coordinator and its load processes say to each other: typed messages over two pipes.

Each message is a msgspec struct, encoded as MessagePack and framed by a 4-byte big-endian length.
The coordinator writes to a process's stdin and reads its stdout (the process moves its own stdout
aside so nothing else can write into the stream).

Coordinator to process: ``Setup`` once, then per level ``RunLevel`` and, while it runs, ``Finish``
(nothing new; drain) or ``Abort`` (cut everything off); ``Shutdown`` at the end (end of input means
the same). Process to coordinator: ``Ready`` once, ``Batch`` as requests start and finish (a notice
per request sent, so a process that dies leaves its requests in flight known, and the finished
records), and ``LevelDone`` with its health samples when its part of the level is over.
"""

from __future__ import annotations

import asyncio
import struct

import msgspec

from plateau_bench.driver.split import WorkerLevel
from plateau_bench.records import HealthSample, RequestRecord
from plateau_bench.result_parts import PromptUse
from plateau_bench.spec import TargetSpec
from plateau_bench.workload.feed import CHUNK, LevelKey
from plateau_bench.workload.source import PromptRecipe

_LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 30


class Setup(msgspec.Struct, tag="setup", kw_only=True):
    worker: int                      # this process's number in the pool
    target: TargetSpec
    prompts: PromptRecipe            # the process builds the run's prompts from it (``workload.source``)
    tokenizer: str | None = None     # a local tokenizer for output tokens when the server reports none


class RunLevel(msgspec.Struct, tag="level", kw_only=True):
    part: WorkerLevel
    t0_ns: int                       # the level's origin on the machine's monotonic clock
    seed: int = 0
    prompts: LevelKey | None = None  # which prompts the level takes (None: the level's label alone)
    ahead: int = CHUNK               # prompts kept built ahead of the one sent


class Finish(msgspec.Struct, tag="finish"):
    pass


class Abort(msgspec.Struct, tag="abort"):
    pass


class Shutdown(msgspec.Struct, tag="shutdown"):
    pass


class Ready(msgspec.Struct, tag="ready", kw_only=True):
    pid: int
    loop: str


class Started(msgspec.Struct, array_like=True):
    """A request handed to the client: enough to account for it if its process dies."""

    index: int
    worker: int
    scheduled_ns: int
    sent_ns: int
    prompt_tokens: int
    warmup: bool


class Batch(msgspec.Struct, tag="batch", kw_only=True):
    started: list[Started] = msgspec.field(default_factory=list)
    records: list[RequestRecord] = msgspec.field(default_factory=list)


class LevelDone(msgspec.Struct, tag="done", kw_only=True):
    health: list[HealthSample] = msgspec.field(default_factory=list)
    cancelled: int = 0               # cut off by an abort
    hung_at_bound: int = 0           # silent at --max-level-time, declared hung then
    prompts: PromptUse | None = None  # what this process's part took as prompts
    error: str | None = None         # the process's part of the level broke (not a failed request)


ToWorker = Setup | RunLevel | Finish | Abort | Shutdown
FromWorker = Ready | Batch | LevelDone

_encoder = msgspec.msgpack.Encoder()
to_worker = msgspec.msgpack.Decoder(ToWorker)
from_worker = msgspec.msgpack.Decoder(FromWorker)


def encode(message: ToWorker | FromWorker) -> bytes:
    """One message, unframed (a transport that keeps message boundaries itself, as Ray does)."""
    return _encoder.encode(message)


def frame(message: ToWorker | FromWorker) -> bytes:
    payload = _encoder.encode(message)
    return _LENGTH.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's payload, or None at the end of the stream (the other side is gone)."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        (size,) = _LENGTH.unpack(head)
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes")
        return await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
