"""Engine invariants, checked on its step trace and records over random configurations."""

from __future__ import annotations

import gc
import math

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, RequestRejected
from plateau_bench.sim.level import SimResult, simulate_level
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import LevelSpec, WorkloadSpec


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[EngineConfig, LevelSpec, list[tuple[int, int]]]:
    lengths = draw(st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40)), min_size=1, max_size=40))
    block = draw(st.sampled_from([1, 4, 16]))
    longest = max(p + o - 1 for p, o in lengths)
    # From "barely one request" (constant preemption) to "never short".
    kv_blocks = draw(st.integers(math.ceil(longest / block), math.ceil(longest / block) * 12))
    cap = draw(st.integers(1, 16))
    config = EngineConfig(
        name="prop", step=StepModel(t0=draw(st.floats(1e-4, 1e-2)), a=draw(st.floats(0, 1e-3)),
                                    b=draw(st.floats(0, 1e-4)), c=draw(st.floats(0, 1e-6))),
        max_num_seqs=cap, max_num_batched_tokens=draw(st.integers(cap, cap + 96)),
        kv_tokens=kv_blocks * block, block_size=block, policy=draw(st.sampled_from(["mixed", "prefill_first"])),
        reserve_kv=draw(st.booleans()))
    if draw(st.booleans()):
        level = LevelSpec(mode="burst", concurrency=draw(st.integers(1, 24)), num_requests=len(lengths))
    else:
        level = LevelSpec(mode="rate", rate=draw(st.floats(1.0, 500.0)), num_requests=len(lengths))
    return config, level, lengths


def _run(config: EngineConfig, level: LevelSpec, lengths: list[tuple[int, int]]) -> SimResult:
    return simulate_level(config, level, WorkloadSpec(), chunks=True, trace=True, lengths=lengths)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants(scenario: tuple[EngineConfig, LevelSpec, list[tuple[int, int]]]) -> None:
    config, level, lengths = scenario
    result = _run(config, level, lengths)
    assert result.trace is not None
    for row in result.trace:
        assert row.running <= config.max_num_seqs
        assert 0 <= row.kv_blocks_used <= config.num_gpu_blocks
        assert row.decode_seqs + row.prefill_tokens <= config.max_num_batched_tokens
        # Work conserving: requests wait only for a reason the step can show.
        if row.waiting and row.blocked != "preempted":
            assert row.blocked in ("cap", "budget", "kv"), row
            if row.blocked == "cap":
                assert row.running == config.max_num_seqs
            elif row.blocked == "budget":
                assert row.decode_seqs + row.prefill_tokens == config.max_num_batched_tokens
            elif config.reserve_kv:   # held back by the running requests' promises: something runs
                assert row.running > 0 and 0 < row.blocked_need <= config.num_gpu_blocks
            else:
                assert row.kv_blocks_used + row.blocked_need > config.num_gpu_blocks
        if row.blocked == "preempted":
            assert row.preempted > 0
        if config.reserve_kv:   # every admitted request fits at full length: nothing is ever preempted
            assert row.preempted == 0
    assert len(result.records) == len(lengths)
    for record in result.records:
        assert record.ok
        _, output = lengths[record.index % len(lengths)]
        # Every token is produced exactly once, preempted or not.
        assert record.output_tokens == output
        assert len(record.chunk_ns) == output and sum(record.chunk_tokens) == output
        assert record.chunk_ns == sorted(record.chunk_ns)
        assert record.first_token_ns == record.chunk_ns[0]
        assert record.end_ns == record.chunk_ns[-1]
        assert record.sent_ns <= record.first_token_ns
    state = result.state
    assert state.running == 0 and state.waiting == 0 and state.kv_blocks_used == 0
    assert state.generation_tokens_total == sum(o for _, o in lengths)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_same_seed_same_trace(scenario: tuple[EngineConfig, LevelSpec, list[tuple[int, int]]]) -> None:
    first = _run(*scenario)
    second = _run(*scenario)
    assert first.trace == second.trace
    assert first.records == second.records


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_multi_step_jumps_change_nothing(scenario: tuple[EngineConfig, LevelSpec, list[tuple[int, int]]],
                                         ) -> None:
    config, level, lengths = scenario
    fast = simulate_level(config, level, WorkloadSpec(), lengths=lengths)
    Engine.jump = False
    try:
        slow = simulate_level(config, level, WorkloadSpec(), lengths=lengths)
    finally:
        Engine.jump = True
    assert len(fast.records) == len(slow.records)
    for a, b in zip(fast.records, slow.records, strict=True):
        assert a.output_tokens == b.output_tokens
        assert a.first_token_ns == pytest.approx(b.first_token_ns, abs=1000)
        assert a.end_ns == pytest.approx(b.end_ns, abs=1000)
    assert fast.state.preemptions == slow.state.preemptions


def _config(**kw: object) -> EngineConfig:
    base = dict(name="t", step=StepModel(t0=1e-3, a=1e-4), max_num_seqs=4, max_num_batched_tokens=64,
                kv_tokens=4096, block_size=16)
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def test_cap_makes_waves() -> None:
    result = simulate_level(_config(), LevelSpec(mode="burst", concurrency=12), WorkloadSpec(
        input_len=8, output_len=20))
    ends = sorted({r.end_ns for r in result.records})
    assert len(ends) == 3   # 12 requests through a cap of 4: three waves


def test_reserved_kv_admits_only_what_fits_at_full_length_and_never_preempts() -> None:
    # 100 blocks of 16; a request of 100 + 200 tokens holds 19 blocks at its longest: 5 fit at once
    config = _config(max_num_seqs=64, max_num_batched_tokens=4096, kv_tokens=1600, prefix_caching=False)
    level, workload = LevelSpec(mode="burst", concurrency=30), WorkloadSpec(input_len=100, output_len=200)
    on_demand = simulate_level(config, level, workload, trace=True)
    reserved = simulate_level(msgspec.structs.replace(config, reserve_kv=True), level, workload, trace=True)
    # (docs/guides/simulated-engine.md quotes both counts)
    assert on_demand.state.preemptions > 0 and max(r.running for r in on_demand.trace or []) == 14
    assert reserved.state.preemptions == 0 and max(r.running for r in reserved.trace or []) == 5
    assert all(r.output_tokens == 200 for r in reserved.records) and len(reserved.records) == 30


def test_a_reservation_is_released_when_its_request_is_aborted() -> None:
    engine = Engine(_config(max_num_seqs=64, max_num_batched_tokens=4096, kv_tokens=1600, reserve_kv=True))
    requests = [engine.submit(100, 200) for _ in range(6)]
    engine.run_until(0.05)
    assert engine.state().running == 5 and engine.state().waiting == 1
    engine.abort(requests[0])
    engine.run_until(0.1)
    assert engine.state().running == 5 and engine.state().waiting == 0   # the sixth took its place
    engine.run()
    assert all(r.end > 0 for r in requests[1:]) and engine.state().kv_blocks_used == 0 and engine.preemptions == 0


def test_short_cache_preempts_and_still_delivers_everything() -> None:
    config = _config(max_num_seqs=8, kv_tokens=160)
    result = simulate_level(config, LevelSpec(mode="burst", concurrency=8), WorkloadSpec(
        input_len=10, output_len=60), chunks=True)
    assert result.state.preemptions > 0
    assert all(len(r.chunk_ns) == 60 for r in result.records)


@pytest.mark.parametrize(("prompt", "max_tokens", "config"), [
    (10, 0, _config()),
    (5000, 10, _config()),
    (100, 100, _config(kv_tokens=128)),
    (10, 10, _config(max_num_seqs=0)),
])
def test_impossible_requests_are_rejected(prompt: int, max_tokens: int, config: EngineConfig) -> None:
    with pytest.raises(RequestRejected):
        Engine(config).submit(prompt, max_tokens)


def test_rejections_become_failed_records_not_hangs() -> None:
    result = simulate_level(_config(kv_tokens=64), LevelSpec(mode="steady", concurrency=2, duration_s=1.0),
                            WorkloadSpec(input_len=100, output_len=10))
    assert result.records and all(r.error == "http_4xx" and r.http_status == 400 for r in result.records)


def test_steady_mode_stops_sending_at_the_duration() -> None:
    result = simulate_level(_config(), LevelSpec(mode="steady", concurrency=4, duration_s=2.0),
                            WorkloadSpec(input_len=8, output_len=16))
    assert max(r.sent_ns for r in result.records) < 2_000_000_000
    assert max(r.end_ns for r in result.records) > 2_000_000_000 - 1


def test_rate_mode_with_max_concurrency_waits_on_the_client_side() -> None:
    result = simulate_level(_config(), LevelSpec(mode="rate", rate=1000.0, num_requests=50, max_concurrency=2),
                            WorkloadSpec(input_len=8, output_len=16))
    assert any(r.sent_ns > r.scheduled_ns for r in result.records)
    assert result.records[0].worker == -1


def test_abort_frees_the_cache() -> None:
    engine = Engine(_config())
    keep = engine.submit(8, 40)
    gone = engine.submit(8, 40)
    engine.run_until(0.005)
    engine.abort(gone)
    engine.run()
    assert keep.end > 0 and gone.end < 0
    assert engine.state().kv_blocks_used == 0 and engine.state().running == 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.lists(st.tuples(st.integers(0, 39), st.floats(0.0, 0.05)), max_size=8))
def test_aborts_at_any_time_leave_a_clean_engine(
        scenario: tuple[EngineConfig, LevelSpec, list[tuple[int, int]]], aborts: list[tuple[int, float]]) -> None:
    config, _, lengths = scenario
    engine = Engine(config, chunks=True)
    requests = [engine.submit(prompt, output) for prompt, output in lengths]
    for index, when in sorted(aborts, key=lambda a: a[1]):
        engine.run_until(when)
        if index < len(requests):
            engine.abort(requests[index])
    engine.run()
    aborted = {index for index, _ in aborts}
    for i, req in enumerate(requests):
        if req.end >= 0:
            # Finished (possibly before its abort came): every token exactly once.
            assert engine.sent_tokens(req) == req.output
            assert req.times is not None and len(req.times) == req.output
        else:
            assert i in aborted
    state = engine.state()
    assert state.running == 0 and state.waiting == 0 and state.kv_blocks_used == 0


def test_requests_finishing_in_the_same_step_end_in_request_order() -> None:
    finished: list[int] = []
    engine = Engine(_config(max_num_seqs=8), on_finish=lambda req: finished.append(req.rid))
    # Admitted together with equal lengths: they share a finish step; one leaves early.
    requests = [engine.submit(8, 30) for _ in range(6)]
    engine.run_until(0.01)
    engine.abort(requests[2])
    engine.run()
    assert finished == [0, 1, 3, 4, 5]
    assert len({requests[i].end for i in finished}) == 1


def test_a_rejected_request_does_not_stop_a_burst_worker() -> None:
    config = _config(max_model_len=100)
    lengths = [(8, 16), (200, 16), (8, 16)]
    result = simulate_level(config, LevelSpec(mode="burst", concurrency=1, num_requests=3), WorkloadSpec(),
                            lengths=lengths)
    assert [r.ok for r in result.records] == [True, False, True]
    assert result.records[1].http_status == 400
    assert result.records[2].sent_ns == result.records[0].end_ns


@pytest.mark.parametrize("enabled", [True, False])
def test_simulate_level_restores_the_garbage_collector(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        simulate_level(_config(), LevelSpec(mode="burst", concurrency=4), WorkloadSpec(input_len=8, output_len=8))
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
