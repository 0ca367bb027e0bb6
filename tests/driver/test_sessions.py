"""Multi-turn sessions: the sender's history and headers, then the twin over real HTTP per turn."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import msgspec
import pytest

from plateau_bench.driver.load import run_level
from plateau_bench.driver.sessions import SessionPool, SessionSender
from plateau_bench.errors import ConfigError, ErrorClass
from plateau_bench.records import RequestRecord
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LengthSpec, LevelSpec, WorkloadSpec
from plateau_bench.store import load_levels, load_requests
from plateau_bench.workload import EstimateCounter
from plateau_bench.workload.sessions import build_sessions

from support.loading import Cli, plateau


class FakeTurns:
    """Answers every turn with ``answer_words`` words at once; fails the turns listed in ``fail``."""

    def __init__(self, answer_words: int = 3, fail: frozenset[tuple[str, int]] = frozenset(),
                 delay_s: float = 0.0) -> None:
        self.calls: list[dict[str, object]] = []
        self.answer_words = answer_words
        self.fail = fail
        self.delay_s = delay_s
        self.in_flight: set[str] = set()
        self.most_sessions_in_flight = 0

    async def send_turn(self, *, index: int, prompt: str, messages: list[dict[str, str]] | None,
                        prompt_tokens: int, max_tokens: int, scheduled_ns: int, worker: int = -1,
                        warmup: bool = False, headers: dict[str, str] | None = None) -> tuple[RequestRecord, str]:
        assert headers is not None
        session = next(iter(headers.values()))
        turn = sum(1 for c in self.calls if c["session"] == session)
        self.calls.append({"session": session, "headers": headers, "messages": messages, "prompt": prompt,
                           "prompt_tokens": prompt_tokens, "scheduled_ns": scheduled_ns, "worker": worker,
                           "sent": time.monotonic_ns()})
        error = ErrorClass.HTTP_5XX if (session, turn) in self.fail else None
        if self.delay_s:
            self.in_flight.add(session)
            self.most_sessions_in_flight = max(self.most_sessions_in_flight, len(self.in_flight))
            await asyncio.sleep(self.delay_s)
            self.in_flight.discard(session)
        answer = "".join(f" a{index}w{i}" for i in range(self.answer_words))
        record = RequestRecord(index=index, worker=worker, scheduled_ns=scheduled_ns, sent_ns=scheduled_ns,
                               end_ns=scheduled_ns + 1, first_token_ns=scheduled_ns + 1, prompt_tokens=prompt_tokens,
                               output_tokens=0 if error else self.answer_words, error=error)
        return record, answer

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None:
        return None


async def _pool(chat: bool, sessions: int = 3, turns: int = 3, think_s: float = 0.0,
                prefix: int = 0) -> SessionPool:
    spec = WorkloadSpec(input_len=5, output_len=3, sessions=sessions, turns=LengthSpec(text=str(turns), kind="fixed",
                        a=turns), prefix_groups=1 if prefix else 0, prefix_len=prefix)
    built = await build_sessions(spec, counter=EstimateCounter())
    return SessionPool(built, chat=chat, think_time_s=think_s, header="X-Session-ID")


async def test_chat_history_grows_turn_by_turn_with_the_session_header() -> None:
    pool = await _pool(chat=True, prefix=4)
    fake = FakeTurns()
    sender = SessionSender(fake, pool)
    for i in range(3):
        record = await sender.send(index=i, prompt="ignored", prompt_tokens=0, max_tokens=0, scheduled_ns=0, worker=0)
        assert (record.session, record.turn) == (0, i)
    conv = pool.conversations[0]
    roles = [[m["role"] for m in c["messages"]] for c in fake.calls]  # type: ignore[union-attr]
    assert roles == [["system", "user"], ["system", "user", "assistant", "user"],
                     ["system", "user", "assistant", "user", "assistant", "user"]]
    last = fake.calls[2]["messages"]
    assert last[2]["content"] == " a0w0 a0w1 a0w2" and last[5]["content"] == conv.turns[2].text  # type: ignore[index]
    assert {c["headers"]["X-Session-ID"] for c in fake.calls} == {"session-0"}  # type: ignore[index]
    # prompt tokens: the system prompt, every user message so far, every answer so far
    assert [c["prompt_tokens"] for c in fake.calls] == [4 + 5, 4 + 5 + 3 + 5, 4 + 5 + 3 + 5 + 3 + 5]


async def test_completions_history_is_one_growing_text() -> None:
    pool = await _pool(chat=False)
    fake = FakeTurns()
    sender = SessionSender(fake, pool)
    for i in range(2):
        await sender.send(index=i, prompt="", prompt_tokens=0, max_tokens=0, scheduled_ns=0, worker=0)
    first, second = (str(c["prompt"]) for c in fake.calls)
    conv = pool.conversations[0]
    assert second == f"{first} a0w0 a0w1 a0w2 {conv.turns[1].text}"
    assert len(second.split()) == fake.calls[1]["prompt_tokens"] == 5 + 3 + 5


async def test_a_worker_moves_on_to_the_next_conversation_and_a_failure_ends_one() -> None:
    pool = await _pool(chat=True, sessions=2, turns=3)
    fake = FakeTurns(fail=frozenset({("session-0", 1)}))
    sender = SessionSender(fake, pool)
    seen = []
    for i in range(6):
        r = await sender.send(index=i, prompt="", prompt_tokens=0, max_tokens=0, scheduled_ns=0, worker=0)
        seen.append((r.session, r.turn))
    # session 0 fails at turn 1 and ends; session 1 runs its three turns; session 2 reuses conversation 0
    assert seen == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0)]
    assert pool.started == 3


async def test_think_time_is_waited_and_scheduled() -> None:
    pool = await _pool(chat=True, sessions=1, turns=2, think_s=0.05)
    fake = FakeTurns()
    sender = SessionSender(fake, pool)
    t = time.monotonic_ns()
    await sender.send(index=0, prompt="", prompt_tokens=0, max_tokens=0, scheduled_ns=1000, worker=0)
    await sender.send(index=1, prompt="", prompt_tokens=0, max_tokens=0, scheduled_ns=2000, worker=0)
    assert int(fake.calls[1]["sent"]) - t >= 50_000_000   # type: ignore[call-overload]
    assert fake.calls[0]["scheduled_ns"] == 1000 and fake.calls[1]["scheduled_ns"] == 2000 + 50_000_000


async def test_concurrency_counts_sessions_in_the_closed_loop() -> None:
    pool = await _pool(chat=True, sessions=8, turns=3)
    fake = FakeTurns(delay_s=0.01)
    t0 = time.monotonic_ns()
    records = await run_level(SessionSender(fake, pool), [c.first_prompt() for c in pool.conversations],
                              LevelSpec(mode="burst", concurrency=4, num_requests=12), t0_ns=t0)
    assert len(records) == 12 and fake.most_sessions_in_flight == 4
    by_worker: dict[int, list[tuple[int, int]]] = {}
    for r in sorted(records, key=lambda r: r.index):
        by_worker.setdefault(r.worker, []).append((r.session, r.turn))
    # each worker holds one conversation and sends its turns in order
    assert sorted(by_worker) == [0, 1, 2, 3]
    assert all([t for _, t in turns] == [0, 1, 2] and len({s for s, _ in turns}) == 1
               for turns in by_worker.values())


def _twin_run(cli: Cli, tmp_path: Path, caching: bool, *extra: str) -> Path:
    config = get_preset("tiny").with_overrides(b_ms=0.05)
    config = msgspec.structs.replace(config, prefix_caching=caching)
    out = tmp_path / ("on" if caching else "off")
    with start_sim_server(config, in_process=True) as twin:
        result = cli("run", "--url", twin.url, "--endpoint", "chat", "--concurrency", "2", "--sessions", "4",
                     "--turns", "5", "--input-len", "300", "--output-len", "16", "--out", str(out), "--quiet", *extra)
    assert result.exit_code == 0, result.output
    assert "TTFT p50 by turn (prompt tokens): 1: " in result.output and "5: " in result.output
    return out


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_multi_turn_ttft_grows_with_history_without_caching_and_stays_flat_with_it(cli: Cli, tmp_path: Path) -> None:
    ttft = {}
    for caching in (False, True):
        out = _twin_run(cli, tmp_path, caching)
        level = load_levels(out)[0]
        assert [t.turn for t in level.turns] == [0, 1, 2, 3, 4]
        assert all(t.requests == 2 for t in level.turns)   # a burst of 2 sessions x 5 turns
        records = load_requests(out)["C=2"]
        # Exact token accounting per turn (the twin's usage): 300 per message, 16 per earlier answer.
        assert {(r.turn, r.prompt_tokens) for r in records} == {(k, 300 * (k + 1) + 16 * k) for k in range(5)}
        ttft[caching] = [t.ttft_ms.p50 or 0.0 for t in level.turns]
    off, on = ttft[False], ttft[True]
    # Without the cache the whole history is prefilled each turn: 300 -> 1,564 tokens at 50 us each.
    assert off[4] > off[0] + 40 and all(b > a for a, b in itertools.pairwise(off))
    # With it only the new message is: turn 4 within a few ms of turn 0.
    assert abs(on[4] - on[0]) < 8 and on[4] < off[4] - 40


async def test_open_loop_arrivals_are_whole_conversations() -> None:
    pool = await _pool(chat=True, sessions=20, turns=3)
    fake = FakeTurns(delay_s=0.01)
    sender = SessionSender(fake, pool)
    t0 = time.monotonic_ns()
    level = LevelSpec(mode="rate", rate=100.0, duration_s=0.2, max_concurrency=3)
    records = await run_level(sender, [c.first_prompt() for c in pool.conversations], level, t0_ns=t0,
                              session_open=sender.in_session)
    by_session: dict[int, list[RequestRecord]] = {}
    for r in sorted(records, key=lambda r: r.index):
        by_session.setdefault(r.session, []).append(r)
    assert len(by_session) >= 5 and all(r.worker == -1 for r in records)
    for turns in by_session.values():
        assert [r.turn for r in turns] == list(range(len(turns)))
        # each turn leaves when the previous one is answered
        assert all(b.sent_ns >= a.end_ns for a, b in itertools.pairwise(turns))
    assert all(len(t) == 3 for t in list(by_session.values())[:3])
    assert fake.most_sessions_in_flight <= 3   # --max-concurrency bounds conversations


@pytest.mark.slow   # a second or more: kept out of the inner loop
def test_open_loop_sessions_on_the_twin(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with start_sim_server(get_preset("tiny"), in_process=True, speed=4.0) as twin:
        result = cli("run", "--url", twin.url, "--endpoint", "chat", "--rate", "20", "--duration", "1s",
                     "--sessions", "40", "--turns", "3", "--input-len", "50", "--output-len", "8", "--out", str(out),
                     "--quiet")
    assert result.exit_code == 0, result.output
    level = load_levels(out)[0]
    assert [t.turn for t in level.turns] == [0, 1, 2] and level.failed == 0
    records = load_requests(out)[level.label]
    assert {(r.turn, r.prompt_tokens) for r in records} <= {(k, 50 * (k + 1) + 8 * k) for k in range(3)}


@pytest.mark.parametrize("argv", [["sweep", "--mode", "burst", "--sessions", "2"],
                                  ["sweep", "--mode", "burst", "--concurrency", "1,2", "--sessions", "2"]])
def test_sessions_refuse_a_sweep_of_bursts(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(argv, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "burst levels (num-requests = C) would send only their first turns" in err


@pytest.mark.parametrize(("spec", "message"), [
    (WorkloadSpec(sessions=-1), "--sessions must be >= 1"),
    (WorkloadSpec(sessions=2, think_time_s=-1.0), "--think-time must be >= 0"),
    (WorkloadSpec(sessions=2, session_header="X Session"), "--session-header must be an HTTP header name"),
    (WorkloadSpec(sessions=2, dataset="d.jsonl"), "cannot be combined with --dataset"),
])
def test_bad_session_settings_are_one_line(spec: WorkloadSpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec.validate()
