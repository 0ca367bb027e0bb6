"""The verdict on synthetic levels built to carry one signature each (the twin scenarios live in tests/sim)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import ClientHealth, KernelTcp, Latency, LevelResult, ServerTelemetry

from support.builders import level_result


def level(c: int, tput: float, *, dec: float, peak: int, ttft: float, tpot: float, mode: str = "steady",
          wall: float = 10.0, failed: int = 0, errors: dict[str, int] | None = None,
          telemetry: dict[str, float] | None = None, client: dict[str, float] | None = None,
          achieved: float | None = None, itl_max: float | None = None) -> LevelResult:
    n = max(c, 10)
    return level_result(
        c, tput, mode=mode, num_requests=n, completed=n - failed, failed=failed,
        errors=errors or {}, dominant_error=next(iter(errors), None) if errors else None,
        decoding_concurrency=dec, peak_decoding=peak,
        achieved_concurrency=achieved if achieved is not None else float(c), wall_s=wall,
        ttft_ms=Latency(mean=ttft, p50=ttft, p99=ttft * 1.1), tpot_ms=Latency(mean=tpot, p50=tpot, p99=tpot),
        itl_ms=Latency(mean=tpot, p50=tpot, p99=tpot, max=itl_max or tpot * 1.5),
        telemetry=ServerTelemetry(**(telemetry or {})), client=ClientHealth(**(client or {})),
    )


def capped_levels(cap: int = 256, telemetry: bool = False) -> list[LevelResult]:
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        b = min(c, cap)
        tpot = 14 + 0.195 * b
        ttft = 50.0 if c <= cap else 50 + (c - cap) / cap * 33_000
        tel = ({"running_max": float(b), "waiting_mean": float(max(c - cap, 0)), "kv_usage_max": 0.41}
               if telemetry else {})
        out.append(level(c, b * 1000 / tpot, dec=b * 0.98, peak=b, ttft=ttft, tpot=tpot, telemetry=tel))
    return out


def test_admission_cap_client_only() -> None:
    v = diagnose(capped_levels())
    assert v.constraint == "admission_cap"
    assert v.estimated_cap == 256
    assert v.confidence == "high"
    assert any("TTFT p50 grew" in e for e in v.evidence)
    # The TPOT fit below the cap is exact here (14 + 0.195 b), so doubling the cap gives
    # 512/(14+99.8) / (256/(14+49.9)) = 1.125x the plateau.
    assert v.predicted_throughput_doubled_cap == pytest.approx(4006.3 * 1.125, rel=0.02)
    assert "--max-num-seqs" in v.suggestions[0] or "max-running-requests" in v.suggestions[0]


def test_the_cap_what_if_has_a_band_from_each_level_left_out_of_the_slope() -> None:
    exact = diagnose(capped_levels())
    assert exact.what_if_low == pytest.approx(exact.predicted_throughput_doubled_cap)   # an exact line: no spread
    assert exact.what_if_high == pytest.approx(exact.predicted_throughput_doubled_cap)
    assert exact.what_if_model is not None and exact.what_if_model.startswith(
        "TPOT slope (linear in the batch, measured below the cap on 8 levels); band ")
    levels = capped_levels()
    levels[5] = msgspec.structs.replace(levels[5], tpot_ms=Latency(mean=30.0, p50=30.0, p99=30.0))   # C=32 read slow
    noisy = diagnose(levels)
    assert noisy.what_if_low is not None and noisy.what_if_high is not None
    assert noisy.what_if_low < noisy.predicted_throughput_doubled_cap < noisy.what_if_high   # type: ignore[operator]
    assert noisy.what_if_high / noisy.what_if_low > 1.01
    two = diagnose([lv for lv in capped_levels() if lv.concurrency in (64, 128, 256, 512, 1024)])
    assert two.what_if_model is not None and two.what_if_model.endswith("; no band: two levels, none to leave out")
    assert two.what_if_low is None


def test_admission_cap_with_server_metrics_names_engine_flag() -> None:
    v = diagnose(capped_levels(telemetry=True), engine="vllm")
    assert v.constraint == "admission_cap" and v.confidence == "high"
    assert any("running max 256" in e for e in v.evidence)
    assert v.suggestions[0].startswith("try vllm serve --max-num-seqs 512")
    assert "KV usage peaked at 41%" in v.suggestions[0]


def test_a_tensorrt_llm_cap_is_raised_with_its_own_flag() -> None:
    v = diagnose(capped_levels(telemetry=True), engine="trtllm")
    assert v.constraint == "admission_cap" and v.estimated_cap == 256
    assert v.suggestions[0].startswith("try trtllm-serve --max_batch_size 512"), v.suggestions


def test_burst_waves_are_named() -> None:
    levels = [level(c, 3990.0 if c >= 256 else 3990.0 * c / 256, dec=min(c, 256), peak=min(c, 256),
                    ttft=50.0, tpot=64.0, mode="burst", wall=32.9 * max(1, c // 256))
              for c in (64, 128, 256, 512, 768, 1024)]
    v = diagnose(levels)
    assert v.constraint == "admission_cap"
    assert "burst mode: wall times are 1, 2, 3, 4 waves of 32.9 s" in v.evidence


def test_compute_saturation() -> None:
    levels = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128):
        tpot = 10 + (c * 2.0 if c >= 16 else 0.5 * c)
        levels.append(level(c, c * 1000 / tpot, dec=c * 0.97, peak=c, ttft=30, tpot=tpot))
    v = diagnose(levels)
    assert v.constraint == "compute"
    assert any("TPOT rose in proportion" in e for e in v.evidence)


def compute_levels() -> list[LevelResult]:
    levels = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128):
        tpot = 10 + (c * 2.0 if c >= 16 else 0.5 * c)
        levels.append(level(c, c * 1000 / tpot, dec=c * 0.97, peak=c, ttft=30, tpot=tpot))
    return levels


@pytest.mark.parametrize(("power_share", "clock_share", "evidence", "advice"), [
    (0.39, 1.0, "GPUs at 39 % of their power limit, SM clock at maximum: not power- or thermal-bound", None),
    (0.97, 0.82, "GPUs at 97 % of their power limit, SM clock at 82 % of its maximum: power-bound, the driver "
                 "lowers clocks to stay under the limit (throttled)", "raise the GPUs' power limit"),
    (0.55, 0.80, "GPUs at 55 % of their power limit, SM clock at 80 % of its maximum: clocks held down by "
                 "something other than power", "check the throttle reasons"),
])
def test_compute_verdict_reads_power_and_clock_headroom(power_share: float, clock_share: float, evidence: str,
                                                        advice: str | None) -> None:
    from plateau_bench.result import GpuMetrics

    levels = compute_levels()
    for lv in levels:
        lv.gpu_metrics = GpuMetrics(gpus=8, nodes=1, power_share=power_share, sm_active=0.92,
                                    sm_clock_share=clock_share, samples=20)
    v = diagnose(levels)
    assert v.constraint == "compute"
    assert any(line.startswith(evidence) for line in v.gpu_evidence), v.gpu_evidence
    suggested = [s for s in v.suggestions if advice is not None and s.startswith(advice)]
    assert len(suggested) == (0 if advice is None else 1), v.suggestions
    assert len(v.suggestions) == len(diagnose(compute_levels()).suggestions) + (advice is not None)


def test_kv_capacity_from_server_preemptions() -> None:
    levels = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        b = min(c, 20)
        tel = {"preemptions_delta": 40.0 if c >= 32 else 0.0, "kv_usage_max": 0.99 if c >= 16 else 0.5}
        levels.append(level(c, b * 100.0, dec=b * 0.7 if c >= 16 else b, peak=min(c, 28), ttft=30, tpot=10,
                            telemetry=tel, itl_max=200.0 if c >= 16 else 12.0))
    v = diagnose(levels)
    assert v.constraint == "kv_capacity"
    assert any("preemptions" in e for e in v.evidence)


def _pinned_at_a_full_cache(preempting: bool) -> list[LevelResult]:
    """Running pinned at a cap of 177 (/metrics), the KV cache 96 % full on average there."""
    levels = capped_levels(cap=177, telemetry=True)[:10]
    for lv in levels:
        at_cap = (lv.concurrency or 0) >= 177
        lv.telemetry = ServerTelemetry(
            running_max=float(min(lv.concurrency or 0, 177)), waiting_mean=float(max((lv.concurrency or 0) - 177, 0)),
            kv_usage_mean=0.965 if at_cap else 0.5, kv_usage_max=0.978 if at_cap else 0.55,
            preemptions_delta=30.0 if at_cap and preempting else 0.0)
    return levels


def test_a_cap_the_server_runs_at_without_preempting_binds_before_a_nearly_full_cache() -> None:
    v = diagnose(_pinned_at_a_full_cache(preempting=False))
    assert (v.constraint, v.estimated_cap, v.secondary) == ("admission_cap", 177, "kv_capacity")


def test_a_nearly_full_cache_that_preempts_binds_before_the_cap() -> None:
    v = diagnose(_pinned_at_a_full_cache(preempting=True))
    assert (v.constraint, v.secondary) == ("kv_capacity", "admission_cap")


@pytest.mark.parametrize(("preemptions", "confidence"), [(40.0, "high"), (0.0, "medium")])
def test_a_full_cache_is_sure_only_when_it_turned_requests_away(preemptions: float, confidence: str) -> None:
    levels = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        b = min(c, 20)
        tel = {"preemptions_delta": preemptions if c >= 32 else 0.0, "kv_usage_max": 0.99 if c >= 16 else 0.5,
               "kv_usage_mean": 0.97 if c >= 16 else 0.45}
        levels.append(level(c, b * 100.0, dec=b * 0.7 if c >= 16 else b, peak=min(c, 28), ttft=30, tpot=10,
                            telemetry=tel, itl_max=200.0 if c >= 16 else 12.0))
    v = diagnose(levels)
    assert (v.constraint, v.confidence) == ("kv_capacity", confidence)


def test_load_generator_is_named_when_it_holds_throughput_back() -> None:
    # The server is far from saturated; from C=256 the client cannot keep the requests in flight and the
    # throughput it delivers stalls above what the healthy levels reached.
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10, client={"cpu_pct_mean": 20.0, "cpu_pct_max": 40.0,
                                                                          "in_flight_mean": float(c)})
              for c in (16, 32, 64, 128)]
    for c in (256, 512, 1024):
        levels.append(level(c, 15_000.0, dec=150, peak=160, ttft=30, tpot=10, achieved=150.0,
                            client={"cpu_pct_mean": 97.0, "cpu_pct_max": 100.0, "loop_lag_ms_mean": 30.0,
                                    "loop_lag_ms_p99": 120.0, "in_flight_mean": 150.0, "in_flight_max": 170.0}))
    v = diagnose(levels)
    assert v.constraint == "load_generator" and v.confidence == "high"
    assert "C=256" in v.headline
    assert any("97 % of one core on average" in e for e in v.evidence)
    assert "--workers auto" in v.suggestions[0]


def test_the_load_generator_check_reads_the_busiest_of_several_processes() -> None:
    # Two load processes: one idle, one saturated. The level's figures are the busiest process's, so the
    # check fires as it would on one process, and the advice is more processes, not --workers itself.
    from plateau_bench.analysis.health import summarize_health
    from plateau_bench.records import HealthSample

    samples = [HealthSample(t_ns=t * 100_000_000, cpu_pct=cpu, loop_lag_ms=lag, in_flight=75, worker=w)
               for t in range(1, 30) for w, cpu, lag in ((0, 15.0, 0.5), (1, 98.0, 35.0))]
    health = summarize_health(samples, processes=2)
    assert health.cpu_pct_mean == 98.0 and health.loop_lag_ms_mean == 35.0 and health.in_flight_mean == 150.0
    assert [h.cpu_pct_mean for h in health.per_worker] == [15.0, 98.0] and health.processes == 2
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10, client={"cpu_pct_mean": 20.0, "in_flight_mean": c})
              for c in (16, 32, 64, 128)]
    starved = level(256, 15_000.0, dec=150, peak=160, ttft=30, tpot=10, achieved=150.0)
    starved.client = health
    v = diagnose([*levels, starved])
    assert v.constraint == "load_generator" and "C=256" in v.headline
    assert "busiest of the 2 load processes" in v.suggestions[0] and "--workers 4" in v.suggestions[0]


def test_a_client_that_delivers_the_plateau_is_not_the_limit() -> None:
    # One CPU and event-loop spike on the top level, in flight short only because its window is the whole
    # burst (ramp-up and drain): the cap is the limit, the client delivered it.
    levels = capped_levels()
    for lv in levels:
        lv.mode = "burst"
        lv.client = ClientHealth(cpu_pct_mean=12.0, cpu_pct_max=30.0, loop_lag_ms_mean=0.5, loop_lag_ms_p99=3.0,
                                 in_flight_mean=0.6 * (lv.concurrency or 0), in_flight_max=float(lv.concurrency or 0))
        lv.achieved_concurrency = 0.6 * (lv.concurrency or 0)
    levels[-1].client = ClientHealth(cpu_pct_mean=18.0, cpu_pct_max=97.0, loop_lag_ms_mean=1.0, loop_lag_ms_p99=75.0,
                                     in_flight_mean=150.0, in_flight_max=1024.0)
    assert diagnose(levels).constraint == "admission_cap"
    # Old results without means: a starved level that still delivers the plateau does not make it the client's.
    levels = capped_levels()
    levels[-1].client = ClientHealth(cpu_pct_max=99.0, loop_lag_ms_p99=180.0)
    levels[-1].achieved_concurrency = 300.0
    assert diagnose(levels).constraint == "admission_cap"


def test_slow_connections_are_named_with_their_figures() -> None:
    levels = capped_levels()
    levels[-1].connect_ms = Latency(p50=2.0, p99=1_100.0, max=3_050.0, count=1024)
    levels[-2].connect_ms = Latency(p50=1.0, p99=4.0, max=9.0, count=512)
    v = diagnose(levels)
    assert v.constraint == "load_generator" and v.confidence == "medium"
    assert "connections were slow to open from C=1024" in v.headline
    assert any("waited 1.1 s or more for a connection" in e for e in v.evidence)
    assert any("first SYN retransmission" in e for e in v.evidence)
    assert any("somaxconn" in s for s in v.suggestions)


@pytest.mark.parametrize(("kernel", "said", "first_advice"), [
    (KernelTcp(server_here=True), "this host's kernel counted no SYN retransmission and no listen overflow",
     "look at the client"),
    (KernelTcp(syn_retransmits=12, listen_overflows=3, server_here=True),
     "this host's kernel counted 24 SYN retransmission(s) and 6 listen queue overflow(s)", "somaxconn"),   # 2 levels
    (KernelTcp(syn_retransmits=0), "this host's kernel counted no SYN retransmission during", "look at the client"),
])
def test_slow_connections_claim_retransmissions_only_when_the_kernel_counted_them(
        kernel: KernelTcp, said: str, first_advice: str) -> None:
    """~1 s looks like a SYN retransmission; with the kernel's counters read, the verdict says what they
    counted (a busy client event loop makes the same wait, with no retransmission)."""
    levels = capped_levels()
    for lv in levels[-2:]:
        lv.connect_ms = Latency(p50=2.0, p99=1_100.0, max=3_050.0, count=1024)
        lv.kernel_tcp = kernel
    v = diagnose(levels)
    assert v.constraint == "load_generator" and any(e.startswith(said) for e in v.evidence), v.evidence
    assert not any("matches the first SYN retransmission" in e for e in v.evidence)
    assert first_advice in v.suggestions[0]


def test_errors_rate_limiting() -> None:
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)]
    levels += [level(16, 900.0, dec=8, peak=8, ttft=30, tpot=10, failed=6, errors={"http_429": 6})]
    v = diagnose(levels)
    assert v.constraint == "errors"
    assert v.headline == "errors / rate limiting from C=16 (429 rate limited)"
    assert "failures seen: 6 429 Too Many Requests (rate limited)" in v.evidence
    assert "rejects load above its limit" in v.suggestions[0]


@pytest.mark.parametrize(("errors", "named"), [({"http_5xx": 5}, "5xx"), ({"timeout": 5}, "timeouts"),
                                                ({"http_429": 3, "timeout": 2}, "429 rate limited, timeouts")])
def test_errors_name_the_statuses_they_saw(errors: dict[str, int], named: str) -> None:
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)]
    levels += [level(c, 900.0, dec=8, peak=8, ttft=30, tpot=10, failed=5, errors=errors) for c in (16, 32)]
    if "http_5xx" in errors:
        for lv in levels[-2:]:
            lv.http_statuses = {"503": 4, "500": 1}
    v = diagnose(levels)
    assert v.constraint == "errors" and v.headline.endswith(f"({named})")
    if "http_5xx" in errors:
        assert "HTTP statuses: 503 x8, 500 x2 (503: the server is overloaded and says so)" in v.evidence


@pytest.mark.parametrize(("errors", "headline", "advice"), [
    ({"protocol": 6}, "errors from C=16", "answers are malformed or break off from C=16"),
    ({"http_4xx": 6}, "errors from C=16", "refuses the requests themselves (4xx)"),
    ({"http_5xx": 6}, "errors from C=16 (5xx)", "fails requests under load (5xx) from C=16"),
    ({"connect": 6}, "errors from C=16 (refused connections)", "connection and backlog limits"),
])
def test_the_advice_fits_the_failure_class(errors: dict[str, int], headline: str, advice: str) -> None:
    """Rate limits are advice for 429s; a protocol error or a 4xx is not cured by them."""
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)]
    levels += [level(c, 900.0, dec=8, peak=8, ttft=30, tpot=10, failed=6, errors=errors) for c in (16, 32)]
    v = diagnose(levels)
    assert v.constraint == "errors" and v.headline == headline
    assert advice in v.suggestions[0] and not any("rate limit" in s for s in v.suggestions)


@pytest.mark.parametrize(("errors", "said", "advice"), [
    ({"server_error_event": 6}, "Context size has been exceeded.", "runs out of room for the requests' tokens"),
    ({"http_5xx": 6}, "CUDA out of memory. Tried to allocate 2.00 GiB", "runs out of room for the requests' tokens"),
    ({"server_error_event": 6}, "upstream worker restarted", "reports errors inside its streams"),
    ({"http_4xx": 6}, "This model's maximum context length is 2048 tokens", "refuses the requests themselves"),
])
def test_the_verdict_quotes_what_the_failed_requests_said(errors: dict[str, int], said: str, advice: str) -> None:
    """The server's own message is evidence; one saying it ran out of room under load (context, KV cache,
    memory) gets the advice for that. A 4xx about the context is the request's length, not the load."""
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)]
    levels += [level(c, 900.0, dec=8, peak=8, ttft=30, tpot=10, failed=6, errors=errors) for c in (16, 32)]
    for lv in levels[-2:]:
        lv.error_details = {said: 6}
    v = diagnose(levels)
    assert v.constraint == "errors"
    assert f"the failed requests said: '{said}' x12" in v.evidence, v.evidence
    assert advice in v.suggestions[0], v.suggestions


def test_not_saturated_keeps_going() -> None:
    v = diagnose([level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)])
    assert v.constraint == "not_saturated"
    assert "--max-concurrency 32" in v.suggestions[0]


def test_single_level_is_not_enough() -> None:
    v = diagnose([level(8, 800.0, dec=8, peak=8, ttft=30, tpot=10)])
    assert v.constraint == "insufficient_data"


def test_a_stalled_client_makes_every_figure_untrustworthy() -> None:
    levels = capped_levels()
    levels[5].client = ClientHealth(cpu_pct_max=60.0, loop_lag_ms_p99=850.0)
    v = diagnose(levels)
    assert v.constraint == "load_generator"
    assert "stalled" in v.headline and "850 ms" in v.headline


def test_a_server_that_died_is_not_called_rate_limiting() -> None:
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2)]
    levels.append(level(4, 10.0, dec=1, peak=2, ttft=30, tpot=10, failed=8, errors={"connect": 8}))
    v = diagnose(levels)
    assert v.constraint == "errors"
    assert v.headline == "the server stopped answering at C=4 (connections refused or reset)"


def test_kv_capacity_needs_the_servers_word_when_it_reports_kv() -> None:
    levels = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        b = min(c, 20)
        levels.append(level(c, b * 100.0, dec=b * 0.5 if c >= 16 else b, peak=min(c, 28), ttft=30, tpot=10,
                            telemetry={"preemptions_delta": 0.0, "kv_usage_max": 0.3}, itl_max=200.0))
    assert diagnose(levels).constraint != "kv_capacity"


def test_one_level_of_errors_is_named_not_sent_back_to_sweep() -> None:
    only = level(1, 0.0, dec=0, peak=0, ttft=0, tpot=0, failed=10, errors={"http_5xx": 10})
    v = diagnose([only])
    assert v.constraint == "errors" and v.confidence == "high"


def test_one_level_with_a_stalled_client_is_flagged() -> None:
    lv = level(64, 3000.0, dec=60, peak=64, ttft=50, tpot=20)
    lv.client = ClientHealth(cpu_pct_max=100.0, loop_lag_ms_p99=389.0)
    assert diagnose([lv]).constraint == "load_generator"


def test_hung_requests_are_named_in_the_verdict() -> None:
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4)]
    levels.append(level(8, 640.0, dec=7, peak=8, ttft=30, tpot=10, failed=1, errors={"hung": 1}))
    levels[-1].hung = 1
    levels[-1].num_requests = 10
    v = diagnose(levels)
    assert v.constraint == "errors" and "hang" in v.headline
    assert any("hung" in e for e in v.evidence)


def kv_bound_at_a_reachable_cap(telemetry: bool) -> list[LevelResult]:
    """A cap of 64 the running count touches, while the KV cache is full and preempts (family 1 of the gauntlet)."""
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        b = min(c, 64)
        sat = c >= 64
        tel = ({"running_mean": 40.0 if sat else float(b), "running_max": float(b),
                "waiting_mean": float(max(c - 40, 0)), "kv_usage_mean": 0.99 if sat else 0.4,
                "kv_usage_max": 1.0 if sat else 0.5, "preemptions_delta": 300.0 if sat else 0.0} if telemetry else {})
        lv = level(c, 40 * 1000 / 22.0 if sat else b * 1000 / (14 + 0.1 * b), dec=0.62 * b if sat else b, peak=b,
                   ttft=50.0 if not sat else 4_000.0 * c / 64, tpot=22.0 if sat else 14 + 0.1 * b, telemetry=tel)
        spread = 2.2 if sat else 1.0
        lv.tpot_ms = Latency(mean=lv.tpot_ms.mean, p50=lv.tpot_ms.p50, p99=(lv.tpot_ms.p50 or 0) * spread)
        lv.input_tokens, lv.output_tokens, lv.completed = 128 * lv.completed, 512 * lv.completed, lv.completed
        out.append(lv)
    return out


@pytest.mark.parametrize("telemetry", [True, False], ids=["metrics", "client-only"])
def test_kv_binding_below_a_reachable_cap_is_not_the_cap(telemetry: bool) -> None:
    v = diagnose(kv_bound_at_a_reachable_cap(telemetry), engine="vllm" if telemetry else None)
    assert v.constraint == "kv_capacity"
    assert v.secondary == "admission_cap" and v.estimated_cap == 64
    assert v.confidence == ("high" if telemetry else "medium")
    assert v.secondary_evidence and "most requests decoding at once: 64" in v.secondary_evidence[0]
    # Raising the cap when the cache is full predicts (almost) nothing, and the what-if says why.
    assert v.predicted_throughput_doubled_cap == pytest.approx(40 * 1000 / 22.0, rel=0.01)
    assert "the cache cannot hold more sequences" in v.what_if[0]
    assert "need up to" in v.what_if[1]
    assert not any("--max-num-seqs" in s for s in v.suggestions)
    if not telemetry:
        assert any("enable /metrics" in t for t in v.to_separate)
        assert any("shorter outputs" in t for t in v.to_separate)


def test_a_cap_what_if_stops_where_the_kv_cache_is_full() -> None:
    levels = capped_levels(telemetry=True)
    for lv in levels:
        lv.telemetry = msgspec.structs.replace(lv.telemetry, kv_usage_mean=0.8, kv_usage_max=0.85)
    v = diagnose(levels, engine="vllm")
    assert v.constraint == "admission_cap" and v.secondary is None
    # The cache holds 256 * 0.97 / 0.8 = 310 sequences, not 512; preempting, a quarter of the way more run.
    fits = 256 * 0.97 / 0.8
    batch = fits + 0.25 * (512 - fits)
    gain = (batch / (14 + 0.195 * batch)) / (256 / (14 + 0.195 * 256))
    assert v.predicted_throughput_doubled_cap == pytest.approx(4006.3 * gain, rel=0.02)
    assert "holds ~310 such sequences (preempting, the scheduler keeps ~361 running)" in v.what_if[0]


def prefill_heavy(telemetry: bool) -> list[LevelResult]:
    """4,096-token prompts, 32-token outputs: a prompt costs ~250 ms of a step time that it dominates."""
    out = []
    for c in (1, 2, 4, 8, 16, 32, 64, 128):
        rate = min(c, 12) * 3.8                       # requests/s: prefill work saturates near C=12
        lv = level(c, rate * 32, dec=min(c, 12) * 0.25, peak=min(c, 6), ttft=260.0 * max(1.0, c / 12), tpot=9.0,
                   telemetry={"running_max": float(min(c, 14)), "running_mean": float(min(c, 12)),
                              "kv_usage_max": 0.04, "kv_usage_mean": 0.03, "preemptions_delta": 0.0}
                   if telemetry else {}, itl_max=260.0)
        lv.request_throughput = rate
        lv.total_throughput = rate * (4096 + 32)
        lv.completed, lv.input_tokens, lv.output_tokens = lv.num_requests, 4096 * lv.num_requests, 32 * lv.num_requests
        out.append(lv)
    return out


@pytest.mark.parametrize("telemetry", [True, False], ids=["metrics", "client-only"])
def test_a_prefill_heavy_workload_is_prefill_bound_not_kv(telemetry: bool) -> None:
    v = diagnose(prefill_heavy(telemetry), engine="vllm")
    assert v.constraint == "prefill", v
    assert "prompt tokens take ~" in v.evidence[1] and "61.3 us" in v.evidence[1]
    assert any("--max-num-batched-tokens" in s for s in v.suggestions)
    assert any("disaggregation" in s for s in v.suggestions)


def test_a_cap_with_kv_signs_client_only_says_what_would_separate_them() -> None:
    levels = capped_levels()
    for lv in levels[-3:]:
        lv.tpot_ms = Latency(mean=lv.tpot_ms.mean, p50=lv.tpot_ms.p50, p99=(lv.tpot_ms.p50 or 0) * 1.35)
    v = diagnose(levels)
    assert v.constraint == "admission_cap" and v.confidence == "medium" and v.secondary == "kv_capacity"
    assert v.predicted_throughput_doubled_cap is None
    assert "between +0 %" in v.what_if[0]
    assert any("enable /metrics" in t for t in v.to_separate)


def test_a_cap_whose_metrics_report_no_kv_usage_asks_for_the_cache_size_not_for_metrics() -> None:
    # llama.cpp: /metrics scraped (running 4, a queue), no KV usage in it; doubling the cap predicts +90 %,
    # so the what-if is a range, and what would narrow it is the cache's size, not the /metrics already read.
    levels = capped_levels(cap=4, telemetry=True)
    for lv in levels:
        lv.telemetry = msgspec.structs.replace(lv.telemetry, kv_usage_max=None)
    v = diagnose(levels, engine="llamacpp")
    assert v.constraint == "admission_cap" and v.estimated_cap == 4
    assert "between +0 %" in v.what_if[0]
    assert not any("enable /metrics" in t for t in v.to_separate), v.to_separate
    assert any("reports no KV-cache usage" in t and "--ctx-size" in t for t in v.to_separate)


def _stated_cap_with_spread(falling: bool) -> list[LevelResult]:
    """A stated cap of 4 the server's running count sits at, its KV cache unreported, TPOT p99 1.9x the median."""
    levels = capped_levels(cap=4)[:7]
    for lv in levels:
        lv.telemetry = ServerTelemetry(running_max=float(min(lv.concurrency, 4)), cap=4.0)
        if lv.concurrency >= 4:
            lv.tpot_ms = Latency(mean=lv.tpot_ms.mean, p50=lv.tpot_ms.p50, p99=(lv.tpot_ms.p50 or 0) * 1.9)
    if falling:
        levels[-1].output_throughput *= 0.6
    return levels


def test_a_stated_cap_the_server_runs_at_is_not_overturned_by_the_spread_alone() -> None:
    v = diagnose(_stated_cap_with_spread(falling=False))
    assert (v.constraint, v.estimated_cap, v.secondary) == ("admission_cap", 4, "kv_capacity")
    assert any("states its cap: 4" in e for e in v.evidence)


def test_falling_throughput_still_names_the_cache_over_a_stated_cap() -> None:
    v = diagnose(_stated_cap_with_spread(falling=True))
    assert (v.constraint, v.secondary) == ("kv_capacity", "admission_cap")


@pytest.mark.parametrize(("running_mean", "constraint"), [(3.8, "admission_cap"), (2.9, "kv_capacity")])
def test_a_fall_with_every_slot_busy_throughout_does_not_overturn_a_stated_cap(running_mean: float,
                                                                               constraint: str) -> None:
    """Preemption empties slots: a server whose time-average running count stayed at its stated cap past it ran
    a full batch throughout, so a throughput fall there is noise, not the cache; one that sagged may be."""
    levels = _stated_cap_with_spread(falling=True)
    for lv in levels:
        lv.telemetry = msgspec.structs.replace(lv.telemetry, running_mean=min(float(lv.concurrency), running_mean))
    v = diagnose(levels)
    assert v.constraint == constraint
    if constraint == "admission_cap":
        assert (v.confidence, v.estimated_cap, v.secondary) == ("medium", 4, "kv_capacity")
        assert any("stayed at 3.8 or more of its 4 slots" in e for e in v.evidence), v.evidence
        assert any("--repeat 3" in t for t in v.to_separate), v.to_separate
        assert any("throughput falls" in e for e in v.secondary_evidence), v.secondary_evidence


def test_the_terminal_and_html_verdicts_show_both_limits() -> None:
    from rich.console import Console

    from plateau_bench.report.html import _verdict
    from plateau_bench.report.terminal import verdict_text
    from plateau_bench.result import ResultFile
    from plateau_bench.run_view import ReportRun

    v = diagnose(kv_bound_at_a_reachable_cap(False))
    v.gpu_evidence = ["GPUs at 39 % of their power limit"]
    console = Console(width=200, record=True, color_system=None)
    console.print(verdict_text(v))
    text = console.export_text()
    assert "Also binding: admission cap" in text and "    - most requests decoding at once: 64" in text
    assert "GPU: GPUs at 39 % of their power limit" in text
    assert "To separate them: enable /metrics" in text
    page = _verdict(ReportRun(name="r", path=Path("r"), result=ResultFile(verdict=v)))
    assert "also binding: admission cap" in page and "What would separate them" in page and "<h4>GPUs</h4>" in page


def test_gpu_figures_reach_the_verdict() -> None:
    from plateau_bench.result import GpuMetrics

    levels = capped_levels()
    for lv in levels[-4:]:
        lv.gpu_metrics = GpuMetrics(gpus=8, nodes=1, power_w_mean=235.0, power_limit_w=600.0, power_share=0.39,
                                    sm_active=0.30, gpu_util=0.55, samples=20)
    v = diagnose(levels)
    assert v.constraint == "admission_cap"
    assert v.gpu_evidence and any("39" in line for line in v.gpu_evidence), v.gpu_evidence
    assert diagnose(capped_levels()).gpu_evidence == []


def _falling_cap(ci_rel: float, spread: float) -> list[LevelResult]:
    """Client alone, a cap of 256 whose last level reads 20 % below the plateau, every level's interval
    ``ci_rel`` and the top levels' TPOT p99 ``spread`` times the median."""
    levels = capped_levels()
    levels[-1].output_throughput *= 0.8
    for lv in levels:
        lv.throughput_ci_rel = ci_rel
    for lv in levels[-3:]:
        lv.tpot_ms = Latency(mean=lv.tpot_ms.mean, p50=lv.tpot_ms.p50, p99=(lv.tpot_ms.p50 or 0) * spread)
    return levels


@pytest.mark.parametrize(("ci_rel", "constraint"), [(0.02, "kv_capacity"), (0.12, "admission_cap")])
def test_a_fall_inside_the_levels_intervals_is_not_taken_for_the_caches_recomputation(ci_rel: float,
                                                                                      constraint: str) -> None:
    """With intervals of +-2 % the fall (and a TPOT spread of 1.35x) points at the cache; with +-12 % on each
    (a short level on a noisy server) the two intervals overlap: no fall is read, and the cap stands."""
    v = diagnose(_falling_cap(ci_rel, spread=1.35))
    assert v.constraint == constraint, v
    if constraint == "kv_capacity":
        assert any("throughput falls" in e for e in v.evidence), v.evidence
    else:
        assert not any("throughput falls" in e for e in [*v.evidence, *v.secondary_evidence])


def test_a_fall_no_request_shows_a_preemption_in_leaves_the_cap_first() -> None:
    """The same fall with every request at one pace (TPOT p99 = p50, no stall): a preempted request waits for
    its recompute while the others decode, so the cache's fall would spread TPOT. The cap is named first, the
    cache second, with the sweep that separates them."""
    v = diagnose(_falling_cap(0.02, spread=1.0))
    assert (v.constraint, v.estimated_cap, v.confidence, v.secondary) == ("admission_cap", 256, "medium",
                                                                         "kv_capacity"), v
    assert any("throughput falls" in e for e in v.secondary_evidence), v.secondary_evidence


def test_a_cache_that_preempts_half_its_requests_binds_before_the_cap_it_pins() -> None:
    """vLLM-CPU with eight KV blocks: running pinned at 5, 0.98 preemptions per request, usage 89 % on average
    (preemption frees blocks): a cap never preempts, so the cache is named first."""
    levels = capped_levels(cap=5, telemetry=True)[:7]
    for lv in levels:
        b = min(lv.concurrency, 5)
        lv.telemetry = ServerTelemetry(running_max=float(b), running_mean=b * 0.9, waiting_mean=float(max(
            lv.concurrency - 5, 0)), kv_usage_mean=0.89 if lv.concurrency >= 5 else 0.3,
            kv_usage_max=1.0 if lv.concurrency >= 5 else 0.4,
            preemptions_delta=float(lv.completed) if lv.concurrency >= 5 else 0.0)
    v = diagnose(levels, engine="vllm")
    assert (v.constraint, v.secondary) == ("kv_capacity", "admission_cap"), v
