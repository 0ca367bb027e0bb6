"""Event-stream framing and per-request stream accounting, without a network."""

from __future__ import annotations

import itertools
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_bench.driver.sse import SSEParser, StreamAccumulator, spread_tokens
from plateau_bench.records import TOKEN_SOURCE_ESTIMATE, TOKEN_SOURCE_TOKENIZER, TOKEN_SOURCE_USAGE


def parse_all(stream: bytes, cuts: list[int] | None = None) -> list[bytes]:
    parser = SSEParser()
    out: list[bytes] = []
    bounds = [0, *sorted(set(cuts or [])), len(stream)]
    for a, b in itertools.pairwise(bounds):
        out += parser.feed(stream[a:b])
    return out + parser.close()


def reference_parse(stream: bytes) -> list[bytes]:
    """The WHATWG algorithm, line by line, as literally as possible (plus the end-of-stream flush)."""
    lines = re.split(rb"\r\n|\r|\n", stream)
    events: list[bytes] = []
    buffer: bytes | None = None
    for line in lines:
        if line == b"":
            if buffer is not None:
                events.append(buffer[:-1])
            buffer = None
            continue
        if line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            buffer = (buffer or b"") + value + b"\n"
    if buffer is not None:
        events.append(buffer[:-1])
    return events


# --- explicit edge cases --------------------------------------------------------------------


def test_one_event_per_read() -> None:
    assert parse_all(b'data: {"a":1}\n\n') == [b'{"a":1}']


def test_several_events_in_one_read() -> None:
    stream = b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    assert SSEParser().feed(stream) == [b"1", b"2", b"[DONE]"]


def test_event_split_at_every_byte() -> None:
    stream = b'data: {"x": "y"}\r\n\r\n: keep-alive\n\ndata: [DONE]\n\n'
    parser = SSEParser()
    out = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    assert out == [b'{"x": "y"}', b"[DONE]"]


def test_crlf_line_endings() -> None:
    assert parse_all(b"data: a\r\n\r\ndata: b\r\n\r\n") == [b"a", b"b"]


def test_crlf_split_between_cr_and_lf_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r") == []
    assert parser.feed(b"\n\r\n") == [b"a\nb"]


def test_bare_cr_line_endings() -> None:
    assert parse_all(b"data: a\r\rdata: b\r\r") == [b"a", b"b"]


def test_comment_lines_are_ignored() -> None:
    assert parse_all(b": keep-alive\n\n: ping\ndata: a\n\n") == [b"a"]


def test_empty_keepalive_lines_dispatch_nothing() -> None:
    assert parse_all(b"\n\n\n\ndata: a\n\n\n\n\n") == [b"a"]


def test_done_marker_is_passed_through() -> None:
    assert parse_all(b"data: [DONE]\n\n") == [b"[DONE]"]


def test_multiline_data_is_joined_with_newline() -> None:
    assert parse_all(b"data: {\"a\":\ndata:  1}\n\n") == [b'{"a":\n 1}']


def test_space_after_colon_is_optional_and_only_one_is_dropped() -> None:
    assert parse_all(b"data:a\n\ndata:  b\n\ndata\n\n") == [b"a", b" b", b""]


def test_other_fields_are_ignored() -> None:
    assert parse_all(b"event: message\nid: 7\nretry: 10\ndata: a\n\n") == [b"a"]


def test_last_event_without_blank_line_is_flushed_at_close() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: [DONE]\n") == [b"1"]
    assert parser.close() == [b"[DONE]"]


# --- property: any split gives the same events ------------------------------------------------

_value = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_line = st.one_of(
    st.tuples(st.sampled_from([b"data: ", b"data:"]), _value).map(lambda t: t[0] + t[1]),
    _value.map(lambda v: b":" + v),                         # comment
    st.sampled_from([b"event: x", b"id: 1", b"retry: 5", b"data"]),
)
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@st.composite
def streams(draw: st.DrawFn, eols: st.SearchStrategy[bytes] = _eol) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 6))):
        for line in draw(st.lists(_line, min_size=1, max_size=4)):
            parts.append(line + draw(eols))
        parts.extend(draw(st.lists(eols, min_size=1, max_size=3)))  # blank line(s)
    if draw(st.booleans()):
        parts.append(draw(_line))  # an unterminated tail
    return b"".join(parts)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_split_yields_the_same_events(data: st.DataObject) -> None:
    stream = data.draw(streams())
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    assert parse_all(stream, cuts) == parse_all(stream) == reference_parse(stream)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(st.lists(_value, min_size=1, max_size=3), max_size=6),
    eol=st.sampled_from([b"\n", b"\r\n"]),
    cuts=st.lists(st.integers(0, 400), max_size=10),
)
def test_events_round_trip(events: list[list[bytes]], eol: bytes, cuts: list[int]) -> None:
    stream = b"".join(
        b": keep-alive" + eol + b"".join(b"data: " + v + eol for v in lines) + eol for lines in events
    )
    cuts = [c for c in cuts if c <= len(stream)]
    assert parse_all(stream, cuts) == [b"\n".join(lines) for lines in events]


# --- accumulation ---------------------------------------------------------------------------


def completion(text: str, usage: dict[str, int] | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"text": text}], "usage": usage}).encode() + b"\n\n"


def chat(delta: dict[str, str]) -> bytes:
    return b"data: " + json.dumps({"choices": [{"delta": delta}]}).encode() + b"\n\n"


def usage_event(prompt: int, completion_tokens: int) -> bytes:
    body = {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_events_of_one_read_share_its_time() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a") + completion("b"), 100)
    acc.feed(completion("c") + usage_event(3, 3) + b"data: [DONE]\n\n", 250)
    assert acc.chunk_ns == [100, 100, 250]
    assert acc.first_token_ns == 100
    assert acc.last_byte_ns == 250
    assert acc.done
    assert acc.token_counts(None) == (3, [1, 1, 1], TOKEN_SOURCE_USAGE)
    assert acc.usage_prompt == 3


def test_role_only_chat_chunk_is_not_a_token() -> None:
    acc = StreamAccumulator()
    acc.feed(chat({"role": "assistant", "content": ""}), 10)
    acc.feed(chat({"content": "hi"}), 20)
    assert acc.first_token_ns == 20
    assert acc.chunk_ns == [20]


def test_reasoning_sets_both_first_times() -> None:
    acc = StreamAccumulator()
    acc.feed(chat({"role": "assistant"}), 5)
    acc.feed(chat({"reasoning_content": "think"}), 10)
    acc.feed(chat({"reasoning": "more"}), 15)
    acc.feed(chat({"content": "answer"}), 20)
    assert acc.first_token_ns == 10
    assert acc.first_reasoning_ns == 10
    assert acc.chunk_ns == [10, 15, 20]


def test_error_event_stops_and_keeps_its_message() -> None:
    acc = StreamAccumulator()
    stop = acc.feed(completion("a") + b'data: {"error": {"message": "oom", "code": 500}}\n\n', 10)
    assert stop and acc.error == "oom"
    plain = StreamAccumulator()
    assert plain.feed(b'data: {"error": "Input validation error", "error_type": "validation"}\n\n', 10)
    assert plain.error == "Input validation error"


def test_undecodable_event_is_a_protocol_error() -> None:
    acc = StreamAccumulator()
    assert acc.feed(b"data: {not json\n\n", 10)
    assert acc.protocol_error is not None


def test_cumulative_usage_gives_exact_chunk_tokens() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a", {"prompt_tokens": 4, "completion_tokens": 1}), 1)
    acc.feed(completion("", {"prompt_tokens": 4, "completion_tokens": 2}), 2)  # held back
    acc.feed(completion("bcd", {"prompt_tokens": 4, "completion_tokens": 4}), 3)
    acc.feed(completion("e", {"prompt_tokens": 4, "completion_tokens": 5}), 4)
    acc.feed(completion("", {"prompt_tokens": 4, "completion_tokens": 6}), 5)  # finish chunk, no text
    acc.feed(usage_event(4, 6), 6)
    assert acc.token_counts(None) == (6, [1, 3, 2], TOKEN_SOURCE_USAGE)
    assert acc.counts(None).usage_tokens is None


def finish(text: str, usage: dict[str, int] | None = None) -> bytes:
    body = {"choices": [{"text": text, "finish_reason": "length"}], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_finish_reason_or_done_marks_the_stream_complete() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a"), 1)
    assert not acc.complete
    acc.feed(finish("b"), 2)
    assert acc.complete and acc.finish_reason == "length" and acc.chunk_ns == [1, 2]
    done = StreamAccumulator()
    done.feed(completion("a") + b"data: [DONE]\n\n", 1)
    assert done.complete and done.finish_reason is None


def test_a_claim_above_the_running_count_is_refuted() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a", {"prompt_tokens": 4, "completion_tokens": 1}), 1)
    acc.feed(finish("bc", {"prompt_tokens": 4, "completion_tokens": 3}), 2)
    acc.feed(usage_event(4, 9), 3)
    assert acc.counts(None) == (3, [1, 2], TOKEN_SOURCE_USAGE, 9)


def test_an_incomplete_stream_does_not_vouch_for_its_usage_claim() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a b ") + completion("c ") + usage_event(4, 8), 1)
    assert acc.counts(None) == (2, [1, 1], TOKEN_SOURCE_ESTIMATE, 8)
    assert acc.counts(lambda text: len(text.split())) == (3, [2, 1], TOKEN_SOURCE_TOKENIZER, 8)
    assert acc.counts(lambda text: 8 + len(text)) == (8, [5, 3], TOKEN_SOURCE_USAGE, None)


def test_a_complete_stream_may_carry_several_tokens_per_chunk() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("a b ") + finish("c ") + usage_event(4, 8), 1)
    assert acc.counts(None) == (8, [5, 3], TOKEN_SOURCE_USAGE, None)


def test_a_usage_claim_above_max_tokens_is_refuted_by_the_request() -> None:
    """A complete stream claiming 20 tokens of a request allowed 8 generated (ignore_eos) the 8 it asked for;
    an incomplete one what it shows, never more than 8. The claim is kept as usage_tokens either way."""
    done = StreamAccumulator()
    done.feed(completion("a b ") + finish("c ") + usage_event(4, 20), 1)
    assert done.counts(None, max_tokens=8) == (8, [5, 3], TOKEN_SOURCE_ESTIMATE, 20)
    assert done.counts(None, max_tokens=32) == (20, [13, 7], TOKEN_SOURCE_USAGE, None)   # within what was allowed
    cut = StreamAccumulator()
    cut.feed(completion("a b ") + completion("c ") + usage_event(4, 20), 1)
    assert cut.counts(lambda text: len(text.split()), max_tokens=8) == (3, [2, 1], TOKEN_SOURCE_TOKENIZER, 20)


def test_without_usage_the_tokenizer_counts_all_text() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("ab ") + completion("cd ef ") + chat({"reasoning_content": "gh "}), 1)
    total, per_chunk, source = acc.token_counts(lambda text: len(text.split()))
    assert (total, source) == (4, TOKEN_SOURCE_TOKENIZER)
    assert sum(per_chunk) == 4 and per_chunk[1] == 2


def test_without_usage_or_tokenizer_each_chunk_is_one_token() -> None:
    acc = StreamAccumulator()
    acc.feed(completion("ab") + completion("cd"), 1)
    assert acc.token_counts(None) == (2, [1, 1], TOKEN_SOURCE_ESTIMATE)


def test_spread_gives_surplus_to_longer_chunks() -> None:
    assert spread_tokens(5, [1, 1, 3]) == [1, 1, 3]
    assert spread_tokens(3, [2, 2, 2]) == [1, 1, 1]
    assert spread_tokens(6, [1, 1, 10]) == [1, 1, 4]   # pinned at one, the rest to the long chunk
    assert spread_tokens(1, [1, 5]) == [0, 1]


@given(total=st.integers(0, 200), lengths=st.lists(st.integers(0, 40), min_size=1, max_size=50))
def test_spread_keeps_the_total(total: int, lengths: list[int]) -> None:
    counts = spread_tokens(total, lengths)
    assert sum(counts) == total
    assert len(counts) == len(lengths)
    if total >= len(lengths):
        assert min(counts) >= 1


@settings(max_examples=150, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1, max_size=6), max_size=12),
    eol=st.sampled_from([b"\n", b"\r\n"]),
    keepalive=st.booleans(),
    data=st.data(),
)
def test_accumulator_sees_the_same_chunks_under_any_split(
    texts: list[str], eol: bytes, keepalive: bool, data: st.DataObject
) -> None:
    frames = [b"data: " + json.dumps({"choices": [{"text": t}]}).encode() + eol + eol for t in texts]
    frames.append(b"data: " + json.dumps({"choices": [], "usage": {"completion_tokens": len(texts)}}).encode()
                  + eol + eol + b"data: [DONE]" + eol + eol)
    if keepalive:
        frames = [b": keep-alive" + eol + eol + f for f in frames]
    stream = b"".join(frames)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=10))))
    acc = StreamAccumulator()
    for t, (a, b) in enumerate(itertools.pairwise([0, *cuts, len(stream)])):
        acc.feed(stream[a:b], t)
    acc.close()
    assert acc.texts == texts
    assert acc.done and acc.protocol_error is None
    assert acc.token_counts(None) == (len(texts), [1] * len(texts), TOKEN_SOURCE_USAGE)
    assert acc.chunk_ns == sorted(acc.chunk_ns)
