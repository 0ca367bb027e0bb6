"""Shared prefixes and multi-turn sessions against llama.cpp with its prompt cache on (the default).

* Prefixes: the prompts plateau-bench writes through llama.cpp's /tokenize are exact in the server's
  own count (prefix + suffix + the BOS it adds), although a word is several tokens of this model's
  vocabulary.
* Turns: the first turn is exact; each later one adds exactly the new message plus the previous answer
  as the server reads its text back (within a token or two of what it generated: a random model's
  tokens need not survive a trip through text); the per-turn figures are the server's counts.
* Prompt cache: llama.cpp states no prefix-cache counter. Its ``llamacpp:prompt_tokens_total`` counts
  the prompt tokens it evaluated, and a slot keeps its last prompt and answer cached, so one
  conversation at a time (``--concurrency 1``) lands every turn on the slot that holds its history.
  The hit rate plateau-bench estimates from that counter matches the share the test computes from the
  records alone: turn k carries turn k-1's prompt and answer, which are cached.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from plateau_bench.records import RequestRecord
from plateau_bench.store import load_requests

from support import real_servers
from support.real_servers import ServerHandle

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

PREFIX_LEN, SUFFIX_LEN, OUTPUT_LEN = 48, 16, 8
SESSIONS, TURNS, MESSAGE_LEN = 3, 4, 24
READ_BACK_SLACK = 2


def _records(out: Path) -> list[RequestRecord]:
    return [r for records in load_requests(out).values() for r in records if not r.warmup]


def test_shared_prefixes_are_exact_in_the_servers_own_count(
    llamacpp_server: ServerHandle, tmp_path: Path, plateau_cli: PlateauCli
) -> None:
    out = tmp_path / "prefixes"
    summary = plateau_cli.saved(
        out, "run", *plateau_cli.target(llamacpp_server), "--endpoint", "completions",
        "--concurrency", "2", "--num-requests", "8", "--prefix-groups", "2", "--prefix-len", str(PREFIX_LEN),
        "--input-len", str(SUFFIX_LEN), "--output-len", str(OUTPUT_LEN),
    )  # fmt: skip
    records = _records(out)
    assert len(records) == 8 and all(r.error is None for r in records), summary["levels"][0]["errors"]
    # Built through llama.cpp's /tokenize, a word being several tokens of this model's vocabulary: the
    # server counts every prompt at exactly prefix + suffix, plus the BOS it adds.
    bos = real_servers.llamacpp_bos_tokens(llamacpp_server.url)
    assert summary["spec"]["prompt_accuracy"]["special_tokens"] == bos
    assert {r.prompt_tokens for r in records} == {PREFIX_LEN + SUFFIX_LEN + bos}
    assert {r.output_tokens for r in records} == {OUTPUT_LEN}


def test_multi_turn_accounting_and_the_prompt_cache_estimate(
    llamacpp_server: ServerHandle, tmp_path: Path, plateau_cli: PlateauCli
) -> None:
    out, bos = tmp_path / "sessions", real_servers.llamacpp_bos_tokens(llamacpp_server.url)
    summary = plateau_cli.saved(
        out, "run", *plateau_cli.target(llamacpp_server), "--endpoint", "completions",
        "--concurrency", "1", "--sessions", str(SESSIONS), "--turns", str(TURNS),
        "--num-requests", str(SESSIONS * TURNS),
        "--input-len", str(MESSAGE_LEN), "--output-len", str(OUTPUT_LEN),
    )  # fmt: skip
    records = _records(out)
    assert len(records) == SESSIONS * TURNS and all(r.error is None for r in records), summary["levels"][0]["errors"]
    by_session: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r.turn):
        by_session[r.session].append(r)
    assert sorted(by_session) == list(range(SESSIONS))
    cached = 0
    for turns in by_session.values():
        assert [r.turn for r in turns] == list(range(TURNS))
        assert turns[0].prompt_tokens == MESSAGE_LEN + bos   # the first turn: the user's message, exact
        for before, now in itertools.pairwise(turns):
            # Turn k is turn k-1's prompt, its answer and a new message of exactly MESSAGE_LEN tokens. The
            # answer is this random model's tokens sent back as text, which the server may read back as a
            # token or two more or fewer (the one part of a prompt plateau-bench does not write).
            answer_read_back = now.prompt_tokens - before.prompt_tokens - MESSAGE_LEN
            assert abs(answer_read_back - before.output_tokens) <= READ_BACK_SLACK, (before, now)
            cached += before.prompt_tokens + before.output_tokens
    level = summary["levels"][0]
    # Per turn, the record keeps the server's count, which is what the per-turn figures show.
    per_turn = [t["prompt_tokens_mean"] for t in level["turns"]]
    assert per_turn == [sum(r[k].prompt_tokens for r in by_session.values()) / SESSIONS for k in range(TURNS)]
    expected = cached / sum(r.prompt_tokens for r in records)
    estimate = level["telemetry"]["prefix_cache_hit_rate"]
    # Expected: all of turn k-1's prompt and answer is cached. llama.cpp evaluates the last cached token
    # again (it needs its logits), and an answer read back differently is evaluated from the difference on.
    print(f"llama.cpp prompt cache: estimated hit rate {estimate:.3f}, expected {expected:.3f}")
    assert estimate == pytest.approx(expected, abs=0.05), (estimate, expected)
