"""Server-sent events: framing, the OpenAI chunk shape, and per-request stream accounting.

Framing follows the WHATWG event-stream rules (html.spec.whatwg.org, "Server-sent events",
section "Interpreting an event stream"): lines end with ``\\r\\n``, ``\\n`` or ``\\r``; a blank line
dispatches the event; ``data:`` lines of one event are joined with ``\\n``; one space after the
colon is dropped; lines starting with ``:`` are comments (keep-alives); other fields (``event``,
``id``, ``retry``) are ignored because no OpenAI-compatible server gives them a meaning we need.
One deliberate leniency: at the end of the stream a pending event without its blank line is still
dispatched, so a server that closes right after ``data: [DONE]`` is understood.

The parser is incremental and cheap. It keeps the unfinished tail of the stream as raw bytes,
finds the last event boundary with one ``rfind``, and splits complete events with ``split``;
the common event (``data: {...}`` and nothing else) takes a fast path with no line loop.
``\\r`` only costs a ``replace`` when present; a trailing ``\\r`` is held back until the next read
because it may be the first half of ``\\r\\n``.

``StreamAccumulator`` turns one response body into the figures a ``RequestRecord`` needs. It is
fed ``(bytes, t_ns)`` where ``t_ns`` was taken when the bytes were read, before any parsing, so
every event from one read shares that read's time. JSON is decoded with msgspec into the typed
``StreamChunk``; unknown fields are skipped by the decoder without being materialised.

Per-chunk token counts (``chunk_tokens``), in order of preference:

1. The server sends cumulative ``usage`` in every content chunk (vLLM's
   ``continuous_usage_stats``): each chunk gets the difference from the previous content chunk,
   so tokens carried by empty-text chunks land on the next chunk that shows their text, and
   tokens streamed after the last content chunk (empty-text chunks, e.g. the finish chunk) are
   added to it.
2. Otherwise one token per content chunk. If the final total (usage, else the tokenizer) differs
   from the chunk count, the total is shared over the chunks in proportion to their text length
   (largest-remainder rounding; every chunk keeps at least one token when there are at least as
   many tokens as chunks). Why: a server shows fewer chunks than tokens when it holds back text it
   cannot print yet (partial UTF-8, stop-string look-ahead) or batches several tokens per chunk,
   and in both cases the chunk that finally carries those tokens has the longer text. The sum of
   ``chunk_tokens`` always equals ``output_tokens``, so throughput over time stays exact.

A usage report is not trusted blindly. The stream itself counts tokens exactly only when the
server sent its running count with every content chunk (case 1); otherwise a content chunk proves
at least one token and nothing more (several tokens per chunk are normal). So the claim is checked
where the stream can refute it: when it exceeds the running count, or when the stream never
completed (no ``[DONE]``, no ``finish_reason``) and the claim exceeds what can be seen streamed
(the tokenizer's count of the streamed text, else one token per chunk). Then ``output_tokens`` is
what was streamed and ``usage_tokens`` keeps the claim, so the record shows the disagreement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import msgspec

from plateau_bench.records import TOKEN_SOURCE_ESTIMATE, TOKEN_SOURCE_TOKENIZER, TOKEN_SOURCE_USAGE

DONE = b"[DONE]"
_DATA_PREFIX = b"data: "


class SSEParser:
    """Incremental event-stream framing: bytes in, the ``data`` payload of each event out."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes read from the stream; return the payloads of the events they complete."""
        # The usual read: exactly one "data: ..." event, whose only newlines are the final two.
        if (not self._buf and data.startswith(_DATA_PREFIX) and data.find(b"\n") == len(data) - 2
                and data.endswith(b"\n\n") and b"\r" not in data):
            return [data[6:-2]]
        buf = self._buf + data if self._buf else data
        held_cr = b""
        if b"\r" in buf:
            if buf[-1] == 0x0D:  # may pair with a "\n" still in flight
                held_cr = b"\r"
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf + held_cr
            return []
        self._buf = buf[end + 2 :] + held_cr
        out: list[bytes] = []
        for block in buf[:end].split(b"\n\n"):
            if block.startswith(_DATA_PREFIX) and b"\n" not in block:
                out.append(block[6:])
            elif block:
                _parse_block(block, out)
        return out

    def close(self) -> list[bytes]:
        """End of stream: dispatch a pending event that lacked its closing blank line."""
        rest = self._buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        self._buf = b""
        out: list[bytes] = []
        for block in rest.split(b"\n\n"):
            if block:
                _parse_block(block, out)
        return out


def _parse_block(block: bytes, out: list[bytes]) -> None:
    """The general line-by-line path for one block between blank lines."""
    data_lines: list[bytes] = []
    for line in block.split(b"\n"):
        if not line:
            if data_lines:
                out.append(b"\n".join(data_lines))
                data_lines = []
            continue
        if line[0] == 0x3A:  # ":" comment, e.g. ": keep-alive"
            continue
        colon = line.find(b":")
        if colon < 0:
            field, value = line, b""
        else:
            field, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if field == b"data":
            data_lines.append(value)
    if data_lines:
        out.append(b"\n".join(data_lines))


# --- the OpenAI streaming chunk, only the fields we read ---------------------------------------


class Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None  # vLLM, SGLang, DeepSeek
    reasoning: str | None = None          # newer vLLM, OpenRouter-style servers


class Choice(msgspec.Struct, gc=False):
    text: str | None = None      # /v1/completions
    delta: Delta | None = None   # /v1/chat/completions
    finish_reason: str | None = None


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ErrorBody(msgspec.Struct, gc=False):
    message: str | None = None
    type: str | None = None
    code: int | str | None = None


class StreamChunk(msgspec.Struct, gc=False):
    choices: list[Choice] | None = None
    usage: Usage | None = None
    error: ErrorBody | str | None = None  # TGI sends a plain string


_decode_chunk = msgspec.json.Decoder(StreamChunk).decode


def error_message(error: ErrorBody | str) -> str:
    if isinstance(error, str):
        return error
    return error.message or error.type or (str(error.code) if error.code is not None else "error")


class TokenCounts(NamedTuple):
    """The token figures of one ended stream (see the module docstring for the rules)."""

    output_tokens: int
    chunk_tokens: list[int]      # per content chunk; sums to output_tokens
    source: str                  # TOKEN_SOURCE_*
    usage_tokens: int | None     # the usage report's claim when it was not taken as output_tokens


class StreamAccumulator:
    """Everything one streamed response tells us, gathered as its bytes arrive.

    ``texts`` holds the text of each content chunk (content and reasoning together), aligned
    with ``chunk_ns``. ``finish_reason`` is the last one a choice carried.
    """

    __slots__ = (
        "_cumulative", "_parser", "chunk_ns", "done", "error", "finish_reason", "first_reasoning_ns",
        "first_token_ns", "last_byte_ns", "other_events", "protocol_error", "texts",
        "usage_completion", "usage_prompt", "usage_running",
    )

    def __init__(self) -> None:
        self._parser = SSEParser()
        self.chunk_ns: list[int] = []
        self.texts: list[str] = []
        self._cumulative: list[int] = []  # usage.completion_tokens of content chunks that had it
        self.first_token_ns: int | None = None
        self.first_reasoning_ns: int | None = None
        self.last_byte_ns: int | None = None
        self.usage_prompt: int | None = None
        self.usage_completion: int | None = None  # the last usage report's completion tokens
        self.usage_running: int | None = None     # the last one carried by a chunk with choices
        self.finish_reason: str | None = None
        self.done = False
        self.other_events = 0                   # events that were not content chunks
        self.error: str | None = None           # message of an error event from the server
        self.protocol_error: str | None = None  # malformed stream

    @property
    def events(self) -> int:
        return self.other_events + len(self.chunk_ns)

    @property
    def complete(self) -> bool:
        """The server marked the end of the answer: ``[DONE]`` or a ``finish_reason``."""
        return self.done or self.finish_reason is not None

    def feed(self, data: bytes, t_ns: int) -> bool:
        """Consume one read taken at ``t_ns``. Returns True when reading should stop (an error)."""
        self.last_byte_ns = t_ns
        # Inlined from SSEParser.feed: the usual read is exactly one "data: ..." event.
        if (not self._parser._buf and data.startswith(_DATA_PREFIX)
                and data.find(b"\n") == len(data) - 2 and data.endswith(b"\n\n") and b"\r" not in data):
            return self._consume((data[6:-2],), t_ns)
        return self._consume(self._parser.feed(data), t_ns)

    def close(self) -> None:
        """The body ended: flush a trailing event that had no blank line after it."""
        if self.last_byte_ns is not None:
            self._consume(self._parser.close(), self.last_byte_ns)

    def _consume(self, payloads: Sequence[bytes], t_ns: int) -> bool:
        # The hot path of the client: one pass per event, attribute look-ups kept to a minimum.
        for payload in payloads:
            try:
                chunk = _decode_chunk(payload)
            except msgspec.DecodeError as exc:
                if payload == DONE:
                    self.done = True
                    self.other_events += 1
                    continue
                self.protocol_error = f"undecodable event: {exc}"
                return True
            if (chunk.usage is not None or chunk.error is not None) and self._usage_or_error(chunk):
                return True
            choices = chunk.choices
            if not choices:
                self.other_events += 1
                continue
            choice = choices[0]
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            text = choice.text
            if text is None:
                delta = choice.delta
                if delta is None:
                    self.other_events += 1
                    continue
                text = delta.content
                reasoning = delta.reasoning_content or delta.reasoning
                if reasoning:
                    if self.first_reasoning_ns is None:
                        self.first_reasoning_ns = t_ns
                    text = text + reasoning if text else reasoning
            if not text:
                self.other_events += 1  # role-only, finish-only or held-back chunk: no token shows
                continue
            if self.first_token_ns is None:
                self.first_token_ns = t_ns
            self.chunk_ns.append(t_ns)
            self.texts.append(text)
            usage = chunk.usage
            if usage is not None and usage.completion_tokens is not None:
                self._cumulative.append(usage.completion_tokens)
        return False

    def _usage_or_error(self, chunk: StreamChunk) -> bool:
        """The rare path: an error (True: stop reading) or a usage report."""
        if chunk.error is not None:
            self.error = error_message(chunk.error)
            return True
        usage = chunk.usage
        if usage is not None:
            if usage.prompt_tokens is not None:
                self.usage_prompt = usage.prompt_tokens
            if usage.completion_tokens is not None:
                self.usage_completion = usage.completion_tokens
                if chunk.choices:
                    self.usage_running = usage.completion_tokens
        return False

    def token_counts(
        self, count_tokens: Callable[[str], int] | None
    ) -> tuple[int, list[int], str]:
        """(output tokens, tokens per content chunk, token source) once the stream has ended."""
        counts = self.counts(count_tokens)
        return counts.output_tokens, counts.chunk_tokens, counts.source

    def counts(self, count_tokens: Callable[[str], int] | None, max_tokens: int | None = None) -> TokenCounts:
        """The token figures once the stream has ended; a refuted usage claim is kept apart.

        A claim above ``max_tokens`` (what the request allowed) is refuted by the request itself: the
        tokens are what the stream shows, at most ``max_tokens``, and all of them when it completed (the
        requests are sent with ``ignore_eos``, so a completed one generated what it asked for)."""
        n = len(self.chunk_ns)
        claimed = self.usage_completion
        if claimed is not None and max_tokens is not None and claimed > max_tokens:
            streamed, _, source = self._streamed(count_tokens)
            total = max_tokens if self.complete else min(streamed, max_tokens)
            return TokenCounts(total, spread_tokens(total, [len(t) for t in self.texts]),
                               source if not self.complete else TOKEN_SOURCE_ESTIMATE, claimed)
        if claimed is not None:
            running = self._running_count()
            if running is not None and claimed > running:
                per_chunk = self._from_cumulative(running)
                assert per_chunk is not None  # _running_count checked it
                return TokenCounts(running, per_chunk, TOKEN_SOURCE_USAGE, claimed)
            if running is None and claimed > n and not self.complete:
                streamed, chunk_tokens, source = self._streamed(count_tokens)
                if claimed > streamed:
                    return TokenCounts(streamed, chunk_tokens, source, claimed)
            per_chunk = self._from_cumulative(claimed)
            if per_chunk is not None:
                return TokenCounts(claimed, per_chunk, TOKEN_SOURCE_USAGE, None)
            return TokenCounts(claimed, spread_tokens(claimed, [len(t) for t in self.texts]),
                               TOKEN_SOURCE_USAGE, None)
        total, per_chunk, source = self._streamed(count_tokens)
        return TokenCounts(total, per_chunk, source, None)

    def _streamed(self, count_tokens: Callable[[str], int] | None) -> tuple[int, list[int], str]:
        """Tokens seen in the stream without the usage report: the tokenizer, else one per chunk."""
        n = len(self.chunk_ns)
        if count_tokens is None:
            return n, [1] * n, TOKEN_SOURCE_ESTIMATE
        total = count_tokens("".join(self.texts))
        return total, spread_tokens(total, [len(t) for t in self.texts]), TOKEN_SOURCE_TOKENIZER

    def _running_count(self) -> int | None:
        """Tokens streamed by the server's own running count, when it sent a valid one."""
        running = self.usage_running
        if running is None or self._from_cumulative(running) is None:
            return None
        return running

    def _from_cumulative(self, total: int) -> list[int] | None:
        cum = self._cumulative
        # every content chunk must have carried usage, else it is not a running count
        if not cum or len(cum) != len(self.chunk_ns) or cum[-1] > total:
            return None
        per_chunk: list[int] = []
        prev = 0
        for value in cum:
            if value < prev:
                return None  # not cumulative after all
            per_chunk.append(value - prev)
            prev = value
        if cum[-1] == cum[0] and len(cum) > 1:
            return None  # a constant value repeated is not a running count
        per_chunk[-1] += total - cum[-1]
        return per_chunk


def spread_tokens(total: int, lengths: list[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to their text length.

    When there are at least as many tokens as chunks every chunk keeps one token (a chunk that
    shows text carried at least one): chunks whose share falls below one are pinned at one and
    the rest is shared again among the others. Largest-remainder rounding keeps the sum exactly
    ``total``. With fewer tokens than chunks, some chunks carry none.
    """
    n = len(lengths)
    if n == 0 or total == n:
        return [1] * n
    weights = [max(length, 1) for length in lengths]
    exact = [0.0] * n
    free = list(range(n))
    pinned = 0
    while free:
        remaining = total - pinned
        weight_sum = sum(weights[i] for i in free)
        for i in free:
            exact[i] = remaining * weights[i] / weight_sum
        if total < n:
            break
        below = [i for i in free if exact[i] < 1.0]
        if not below:
            break
        for i in below:
            exact[i] = 1.0
        pinned += len(below)
        pinned_now = set(below)
        free = [i for i in free if i not in pinned_now]
    counts = [int(x) for x in exact]
    left = total - sum(counts)
    by_remainder = sorted(range(n), key=lambda i: exact[i] - counts[i], reverse=True)
    for i in by_remainder[:left]:
        counts[i] += 1
    return counts
