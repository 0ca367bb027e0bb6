"""The verdict on synthetic levels built to carry one signature each (the twin scenarios live in tests/sim)."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.result import ClientHealth, Latency, LevelResult, ServerTelemetry


def level(c: int, tput: float, *, dec: float, peak: int, ttft: float, tpot: float, mode: str = "steady",
          wall: float = 10.0, failed: int = 0, errors: dict[str, int] | None = None,
          telemetry: dict[str, float] | None = None, client: dict[str, float] | None = None,
          achieved: float | None = None, itl_max: float | None = None) -> LevelResult:
    n = max(c, 10)
    return LevelResult(
        label=f"C={c}", mode=mode, concurrency=c, num_requests=n, completed=n - failed, failed=failed,
        errors=errors or {}, dominant_error=next(iter(errors), None) if errors else None,
        output_throughput=tput, decoding_concurrency=dec, peak_decoding=peak,
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


def test_admission_cap_with_server_metrics_names_engine_flag() -> None:
    v = diagnose(capped_levels(telemetry=True), engine="vllm")
    assert v.constraint == "admission_cap" and v.confidence == "high"
    assert any("running max 256" in e for e in v.evidence)
    assert v.suggestions[0].startswith("try vllm serve --max-num-seqs 512")
    assert "0.41" in v.suggestions[0]


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


def test_load_generator_is_named_first() -> None:
    levels = capped_levels()
    starved = levels[-1]
    starved.client = ClientHealth(cpu_pct_max=99.0, loop_lag_ms_p99=180.0)
    starved.achieved_concurrency = 300.0
    v = diagnose(levels)
    assert v.constraint == "load_generator"
    assert "C=1024" in v.headline


def test_errors_rate_limiting() -> None:
    levels = [level(c, 100.0 * c, dec=c, peak=c, ttft=30, tpot=10) for c in (1, 2, 4, 8)]
    levels += [level(16, 900.0, dec=8, peak=8, ttft=30, tpot=10, failed=6, errors={"http_429": 6})]
    v = diagnose(levels)
    assert v.constraint == "errors"
    assert "429" in v.headline


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
