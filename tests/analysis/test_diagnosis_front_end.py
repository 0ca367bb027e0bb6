"""The front-end verdict (``analysis.diagnosis_front_end``): requests wait in the API server, not in the engine."""

from __future__ import annotations

import msgspec
import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import Latency, LevelResult, ServerPhase, ServerTelemetry, ServerTimeSplit

from support.builders import level_result

CAP = 256


def _level(c: int, tput: float, *, batch: float, ttft: float, tpot: float, telemetry: ServerTelemetry) -> LevelResult:
    return level_result(
        c, tput, num_requests=max(c, 10), completed=max(c, 10), decoding_concurrency=batch * 0.98,
        peak_decoding=round(batch), achieved_concurrency=float(c), wall_s=10.0,
        ttft_ms=Latency(mean=ttft, p50=ttft, p99=ttft * 1.1), tpot_ms=Latency(mean=tpot, p50=tpot, p99=tpot),
        itl_ms=Latency(mean=tpot, p50=tpot, p99=tpot, max=tpot * 1.5), telemetry=telemetry)


def front_end_bound(cpu: float | None = 0.97, *, metrics: bool = True) -> list[LevelResult]:
    """An API server that hands the engine at most 40 requests' worth of work: the batch stays at 40 of 256."""
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        b = min(c, 40)
        tpot = 14 + 0.195 * b
        ttft = 60.0 if c <= 40 else 60 + (c - 40) * 25.0   # queueing in the front end, one request at a time
        raw = {"process_cpu_rate": min(1.0, c / 40) * cpu} if cpu is not None else {}
        telemetry = (ServerTelemetry(running_mean=b * 0.97, running_max=float(b), waiting_mean=0.3, cap=float(CAP),
                                     kv_usage_max=0.2, kv_usage_mean=0.15, raw=raw, samples=20)
                     if metrics else ServerTelemetry())
        out.append(_level(c, b * 1000 / tpot, batch=b, ttft=ttft, tpot=tpot, telemetry=telemetry))
    return out


def engine_capped(cpu: float = 0.2) -> list[LevelResult]:
    """The engine's own cap binds; the API server has CPU to spare and every request is inside the engine."""
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        b = min(c, CAP)
        tpot = 14 + 0.195 * b
        ttft = 50.0 if c <= CAP else 50 + (c - CAP) / CAP * 33_000
        telemetry = ServerTelemetry(running_mean=b * 0.99, running_max=float(b), waiting_mean=float(max(c - CAP, 0)),
                                    kv_usage_max=0.41, kv_usage_mean=0.3, raw={"process_cpu_rate": cpu},
                                    samples=20)
        out.append(_level(c, b * 1000 / tpot, batch=b, ttft=ttft, tpot=tpot, telemetry=telemetry))
    return out


def test_a_front_end_at_one_core_with_the_engine_below_its_cap_is_named() -> None:
    v = diagnose(front_end_bound(), engine="vllm")
    assert v.constraint == "front_end" and v.confidence == "high"
    assert any("512 requests in flight at the client" in e and "wait outside it" in e for e in v.evidence)
    assert any("0.97 CPU s per second" in e for e in v.evidence)
    assert any("running at most 40 of the cap of 256" in e for e in v.evidence)
    assert v.suggestions[0].startswith("try vllm serve --api-server-count 2")
    assert "replicas" in v.suggestions[0]


def test_sglang_is_told_its_own_flag() -> None:
    v = diagnose(front_end_bound(), engine="sglang")
    assert "--tokenizer-worker-num 2" in v.suggestions[0]


def test_without_the_process_cpu_the_verdict_is_medium_and_says_what_to_check() -> None:
    v = diagnose(front_end_bound(cpu=None), engine="vllm")
    assert v.constraint == "front_end" and v.confidence == "medium"
    assert any("process_cpu_seconds_total" in t for t in v.to_separate)


def test_an_idle_api_server_points_elsewhere_at_low_confidence() -> None:
    v = diagnose(front_end_bound(cpu=0.1), engine="vllm")
    assert v.constraint == "front_end" and v.confidence == "low"
    assert any("network or a proxy" in e for e in v.evidence)


def test_the_engines_cap_is_not_a_front_end() -> None:
    v = diagnose(engine_capped(), engine="vllm")
    assert v.constraint == "admission_cap"
    assert v.estimated_cap == CAP


@pytest.mark.parametrize("cpu", [0.2, 0.99])
def test_a_busy_api_server_alone_does_not_make_the_verdict(cpu: float) -> None:
    # Every request the client has in flight is inside the engine: whatever the CPU, the wait is the cap's.
    assert diagnose(engine_capped(cpu=cpu), engine="vllm").constraint == "admission_cap"


def _split_only(cpu: float | None) -> list[LevelResult]:
    """The front-end-bound sweep as a server without running/waiting gauges shows it: its time split, and the
    API server's CPU when given."""
    levels = front_end_bound(metrics=False)
    for i, lv in enumerate(levels):
        if cpu is not None:
            lv.telemetry = ServerTelemetry(raw={"process_cpu_rate": cpu}, samples=20)
        if i in (0, len(levels) - 1):
            ttft = lv.ttft_ms.mean or 0.0
            lv.time_split = ServerTimeSplit(
                engine="vllm", queue_ms=ServerPhase(observations=500, mean=2.0),
                prefill_ms=ServerPhase(observations=500, mean=30.0), client_ttft_mean_ms=ttft,
                outside_engine_ms=ttft - 32.0)
    return levels


def test_the_time_split_places_the_wait_outside_the_engine_with_the_api_server_busy() -> None:
    v = diagnose(_split_only(cpu=0.95), engine="vllm")
    assert v.constraint == "front_end" and v.confidence == "high"
    assert any("outside the engine (client TTFT less the server's queue + prefill)" in e for e in v.evidence)


@pytest.mark.parametrize("cpu", [None, 0.2])
def test_time_outside_the_engine_alone_does_not_name_the_front_end(cpu: float | None) -> None:
    # Without a busy API server the time outside the engine may be the network, a proxy or the client.
    assert diagnose(_split_only(cpu=cpu), engine="vllm").constraint != "front_end"


def test_gauges_that_count_the_requests_overrule_the_split() -> None:
    levels = _split_only(cpu=0.95)
    for lv in levels:   # running + waiting hold every request the client has in flight
        lv.telemetry = ServerTelemetry(running_mean=min(lv.concurrency or 0, 40) * 1.0,
                                       waiting_mean=max(0.0, (lv.concurrency or 0) - 40.0), running_max=40.0,
                                       raw={"process_cpu_rate": 0.95}, samples=20)
    assert diagnose(levels, engine="vllm").constraint != "front_end"


def test_the_client_alone_without_the_prompts_cost_cannot_place_the_queue() -> None:
    # The same sweep without /metrics, a time split or prompt lengths: a pinned batch with TTFT growing reads as a cap.
    assert diagnose(front_end_bound(metrics=False), engine="vllm").constraint != "front_end"


PROMPT, OUTPUT = 1000, 100


def _client_alone(front_end_ms: float, tpot_growth: float) -> list[LevelResult]:
    """A stage costing ``front_end_ms`` per request, one at a time, ahead of an engine whose TPOT grows
    ``tpot_growth``-fold as the stage fills (from 10 ms); 1,000-token prompts, 100-token answers."""
    out = []
    rate = 1000 / front_end_ms                   # requests per second through the stage
    for c in (1, 2, 4, 8, 16, 32, 64):
        e2e_s = (front_end_ms + 20 + OUTPUT * 10.0) / 1000
        served = min(c / e2e_s, rate)
        tpot = 10.0 * (1 + (tpot_growth - 1) * (served / rate) ** 2)
        ttft = front_end_ms + 20 + max(0.0, c / served - e2e_s) * 1000
        lv = _level(c, served * OUTPUT, batch=min(c, served * OUTPUT * tpot / 1000), ttft=ttft, tpot=tpot,
                    telemetry=ServerTelemetry())
        out.append(msgspec.structs.replace(lv, request_throughput=served, total_throughput=served * (PROMPT + OUTPUT)))
    return out


def test_the_client_alone_names_the_front_end_where_decoding_held_and_prefill_would_have_slowed_it() -> None:
    # 80 ms per request before the engine: 12.5 requests/s; a lone request's TTFT (100 ms) spread over its prompt
    # reads as 12.5 prompt tokens/s-worth of engine time, 100 % of it, while TPOT rose only 1.3x.
    v = diagnose(_client_alone(80.0, tpot_growth=1.3), engine="vllm")
    assert v.constraint == "front_end" and v.confidence == "medium" and v.secondary == "prefill"
    assert any("decoding did not slow" in e and "(1.3x)" in e for e in v.evidence)
    assert any("finishes a request every 80 ms" in e for e in v.evidence), v.evidence
    assert any("prompts half as long" in t for t in v.to_separate)
    # the slowly fed batch held at 16, as a cap would hold it: said, with what would tell them apart
    assert v.to_separate[0].startswith("the decoding batch held at 16: an admission cap there")
    assert v.suggestions[0].startswith("if the API server: vllm serve --api-server-count 2")


def test_the_client_alone_keeps_prefill_where_decoding_slowed_as_prompts_would_slow_it() -> None:
    v = diagnose(_client_alone(80.0, tpot_growth=6.0), engine="vllm")
    assert v.constraint == "prefill"


def test_gauges_keep_the_client_alone_reading_out() -> None:
    levels = _client_alone(80.0, tpot_growth=1.3)
    for lv in levels:   # the server counts every request the client has in flight: they wait in the engine
        c = float(lv.concurrency or 0)
        lv.telemetry = ServerTelemetry(running_mean=min(c, 8.0), waiting_mean=max(0.0, c - 8), running_max=8.0,
                                       kv_usage_max=0.2, kv_usage_mean=0.1, samples=20)
    assert diagnose(levels, engine="vllm").constraint != "front_end"


def test_too_few_scrapes_in_a_level_say_nothing_about_requests_outside() -> None:
    # A short burst's gauges are the moment of one or two scrapes; the client's count is a mean over the window.
    levels = [msgspec.structs.replace(lv, telemetry=msgspec.structs.replace(lv.telemetry, samples=2))
              for lv in front_end_bound()]
    assert diagnose(levels, engine="vllm").constraint != "front_end"
