"""The prefix-cache hit rate on a level's result: llama.cpp's, estimated from what it evaluated."""

from __future__ import annotations

from plateau_bench.analysis.level import build_level
from plateau_bench.level_run import LevelRun
from plateau_bench.records import RequestRecord, TelemetrySample
from plateau_bench.spec import LevelSpec

S = 1_000_000_000


def _run(engine: str, raw: list[dict[str, float]]) -> LevelRun:
    records = [RequestRecord(index=i, worker=0, scheduled_ns=i * S // 10, sent_ns=i * S // 10,
                             first_token_ns=i * S // 10 + 1000, end_ns=i * S // 10 + 2000, prompt_tokens=100,
                             output_tokens=4) for i in range(10)]
    samples = [TelemetrySample(t_ns=t, engine=engine, values=v) for t, v in zip((0, S), raw, strict=True)]
    return LevelRun(level=LevelSpec(mode="burst", concurrency=1, num_requests=10), label="C=1", records=records,
                    server_samples=samples, engine=engine)


def test_llamacpp_hit_rate_is_one_minus_evaluated_over_sent_prompt_tokens() -> None:
    # 10 requests of 100 prompt tokens; the server evaluated 250 of those 1,000 (its cache reused the rest)
    level = build_level(_run("llamacpp", [{"prompt_tokens": 0.0}, {"prompt_tokens": 250.0}]))
    assert level.telemetry.prefix_cache_hit_rate is not None
    assert abs(level.telemetry.prefix_cache_hit_rate - 0.75) < 0.03


def test_vllm_states_its_own_and_no_estimate_is_made_without_counters() -> None:
    level = build_level(_run("vllm", [{"prompt_tokens": 0.0}, {"prompt_tokens": 250.0}]))
    assert level.telemetry.prefix_cache_hit_rate is None


def _long_prompts(evaluated_per_request: float) -> LevelRun:
    """A steady level of 8 prompts of 960 tokens, each prefilled for 2.5 s before its first token, and a
    counter scraped every second that grows by ``evaluated_per_request`` at each first token."""
    firsts = [int((2.5 + 0.7 * i) * S) for i in range(8)]
    records = [RequestRecord(index=i, worker=i % 2, scheduled_ns=f - int(2.5 * S), sent_ns=f - int(2.5 * S),
                             first_token_ns=f, end_ns=f + S // 10, prompt_tokens=960, output_tokens=8)
               for i, f in enumerate(firsts)]
    samples = [TelemetrySample(t_ns=t * S, engine="llamacpp",
                               values={"prompt_tokens": evaluated_per_request * sum(f <= t * S for f in firsts)})
               for t in range(10)]
    return LevelRun(level=LevelSpec(mode="steady", concurrency=2, duration_s=5.0), label="C=2", records=records,
                    server_samples=samples, engine="llamacpp")


def test_long_prompts_straddling_the_window_are_counted_where_they_were_evaluated() -> None:
    # Counted by send time over the steady window, this read 0.82 for the cached level; against llama.cpp,
    # levels of eight new 960-token prompts read 0.18 and 0.25.
    fresh = build_level(_long_prompts(960.0)).telemetry.prefix_cache_hit_rate
    cached = build_level(_long_prompts(96.0)).telemetry.prefix_cache_hit_rate
    assert fresh == 0.0
    assert cached is not None and abs(cached - 0.9) < 1e-9
