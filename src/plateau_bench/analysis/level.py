"""One level's result from its raw run: the single place a ``LevelRun`` becomes a ``LevelResult``.

Both runners (real HTTP and the twin in virtual time) hand their raw records and samples here, so a
level measured either way is analysed identically: request metrics over the measurement window
(``metrics``), the server's telemetry and the GPUs over the same window (``telemetry.summary``), the
server's own time split from its histograms (``time_split``), and the load generator's health
(``health``). Notes say what happened to the level itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from plateau_bench.analysis.energy import per_output_token
from plateau_bench.analysis.gpu import gpu_metrics
from plateau_bench.analysis.health import summarize_health, with_requests
from plateau_bench.analysis.metrics import Window, compute_level, full_window, steady_window
from plateau_bench.analysis.time_split import server_time_split
from plateau_bench.analysis.turns import turn_metrics
from plateau_bench.analysis.warm_level import compute_warm_level
from plateau_bench.level_run import LevelRun
from plateau_bench.records import RequestRecord
from plateau_bench.result import GpuMetrics, LevelResult, ServerTelemetry, SimLevelInfo
from plateau_bench.telemetry.summary import summarize as summarize_telemetry

_TELEMETRY_FIELDS = frozenset(ServerTelemetry.__struct_fields__) - {"engine", "samples", "raw"}


def server_telemetry(values: Mapping[str, float], engine: str | None) -> ServerTelemetry:
    """Flat summary values as the typed record: known quantities in fields, the rest in ``raw``."""
    known = {k: float(v) for k, v in values.items() if k in _TELEMETRY_FIELDS}
    raw = {k: float(v) for k, v in values.items() if k not in _TELEMETRY_FIELDS and k != "samples"}
    return ServerTelemetry(engine=engine, samples=int(values.get("samples", 0)), raw=raw, **known)


def _gpu_metrics(run: LevelRun, window: Window, output_tokens: int) -> GpuMetrics | None:
    """DCGM exporters' figures, else this host's NVML readings when the server runs here; the energy per
    output token over the same window (``output_tokens``: the successful requests' tokens in it)."""
    samples = run.dcgm_samples or (run.gpu_samples if run.gpus_serve else [])
    m = gpu_metrics(samples, window.start_ns, window.end_ns) if samples else None
    return None if m is None else per_output_token(m, output_tokens)


def _telemetry(run: LevelRun, window: Window) -> ServerTelemetry:
    values: dict[str, float] = {}
    engine = run.engine
    if run.server_samples:
        summary = summarize_telemetry(run.server_samples, window.start_ns, window.end_ns)
        values.update(summary.values)
        engine = summary.engine or engine
    if engine == "llamacpp" and "prefix_cache_hit_rate" not in values:
        estimate = _llamacpp_hit_rate(run)
        if estimate is not None:
            values["prefix_cache_hit_rate"] = estimate
    if run.gpu_samples:
        gpu = summarize_telemetry(run.gpu_samples, window.start_ns, window.end_ns).values
        values.update({k: v for k, v in gpu.items() if k != "samples"})
    return server_telemetry(values, engine)


def _llamacpp_hit_rate(run: LevelRun) -> float | None:
    """llama.cpp states no cache counter, but its prompt-token counter counts the prompt tokens it
    evaluated (its prompt cache's reused tokens are not evaluated), once a prompt is done, just before
    the first token: one minus those over the prompt tokens of the requests whose first token came is
    the share it reused. Over the whole level, between its first and last scrapes, and not over the
    steady window: a counter that jumps by a whole prompt at once, interpolated between scrapes at the
    window's edges, is off by up to two prompts there, a quarter of a level of eight long requests."""
    times = sorted(s.t_ns for s in run.server_samples)
    if len(times) < 2:
        return None
    evaluated = summarize_telemetry(run.server_samples, times[0], times[-1]).values.get("prompt_tokens_delta")
    carried = sum(r.prompt_tokens for r in run.records
                  if r.first_token_ns is not None and times[0] <= r.first_token_ns <= times[-1])
    if evaluated is None or carried <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - evaluated / carried))


SLOW_CONNECT_MS = 1000.0   # a listen-backlog overflow costs SYN retries of 1, 3, 7 ... s
SHORT_SHARE = 0.05         # answers ending short of max_tokens in this share of a level's or more are said


def short_answers(records: Sequence[RequestRecord]) -> str | None:
    """A note when successful answers ended before the tokens they asked for (sent with ``ignore_eos``, an
    answer is as long as asked unless the server stops it: a context limit per request or per slot, or an
    end-of-sequence token it does not skip), so the workload served is shorter than the one asked; None when
    fewer than ``SHORT_SHARE`` did, or no record keeps what it asked."""
    asked = [r for r in records if r.error is None and not r.warmup and r.asked_tokens]
    short = sorted((r.output_tokens, r.asked_tokens or 0) for r in asked if r.output_tokens < (r.asked_tokens or 0))
    if not short or len(short) < SHORT_SHARE * len(asked):
        return None
    served, wanted = short[len(short) // 2]
    return (f"{len(short)} of {len(asked)} answers ended short of the tokens asked (the median of them {served} of "
            f"{wanted}): the server stopped them early (a context limit per request or slot, or an end-of-sequence "
            "token it does not skip), so the workload it served is shorter than the one asked")


def _notes(run: LevelRun, result: LevelResult) -> list[str]:
    notes = list(run.notes)
    if (result.connect_ms.p99 or 0.0) >= SLOW_CONNECT_MS:
        notes.append(f"connections were slow to open: p99 {(result.connect_ms.p99 or 0.0) / 1000:.1f} s, max "
                     f"{(result.connect_ms.max or 0.0) / 1000:.1f} s (a full listen backlog or connection limit: "
                     "this time is inside TTFT)")
    if result.hung:
        notes.append(f"{result.hung} request(s) still unanswered after the level's grace period: counted as "
                     "hung failures")
    if result.token_mismatches:
        notes.append(f"{result.token_mismatches} request(s) had a usage report claiming more output tokens than "
                     "they streamed or than max_tokens allowed: counted as streamed, the claims kept on the records "
                     "(usage_tokens)")
    short = short_answers(run.records)
    if short is not None:
        notes.append(short)
    if run.cut_off_at_stop:
        notes.append(f"{run.cut_off_at_stop} request(s) in flight were cut off when the level was aborted")
    if run.target_gone:
        notes.append("stopped: connections refused again and again, the target is gone")
    if run.prompts is not None and run.prompts.exhausted:
        notes.append(f"the dataset ran out of prompts after {run.prompts.requests} request(s) of this level: nothing "
                     "more was sent (--allow-reuse repeats its prompts, each repeat counted)")
    if run.lost_workers:
        notes.append("a load process died during this level: its figures are incomplete (--resume measures it "
                     "again)")
    return notes


def build_level(run: LevelRun) -> LevelResult:
    """Every figure of one level from its raw run (pure)."""
    level = run.level
    if run.window_ns is not None:
        window = Window(run.window_ns[0], run.window_ns[1], run.window_note)
        result = compute_warm_level(run.records, run.in_flight, label=run.label, concurrency=level.concurrency,
                                    window=window, level_start_ns=run.level_start_ns)
    else:
        window = steady_window(run.records) if level.mode == "steady" else full_window(run.records)
        result = compute_level(run.records, label=run.label, mode=level.mode, concurrency=level.concurrency,
                               rate=level.rate, window=window)
    sim = (SimLevelInfo(preemptions=run.sim_preemptions or 0, virtual_end_s=run.sim_virtual_end_s or 0.0)
           if run.sim_preemptions is not None else None)
    result = msgspec.structs.replace(
        result,
        started_at=run.started_at,
        t0_monotonic_ns=run.t0_monotonic_ns,
        telemetry=_telemetry(run, window),
        time_split=server_time_split(run.server_samples, window.start_ns, window.end_ns,
                                     client_ttft_mean_ms=result.ttft_ms.mean, engine=run.engine),
        client=with_requests(summarize_health(run.health_samples, window.start_ns, window.end_ns,
                                              run.load_processes), run.records),
        gpu_note=None if run.gpu_samples else run.gpu_note,
        benchmark_s=run.benchmark_s,
        cut_off_at_stop=run.cut_off_at_stop,
        cancelled_at_end=run.cancelled_at_end,
        gpu_metrics=_gpu_metrics(run, window, result.output_tokens),
        sim=sim,
        worker_clocks=list(run.worker_clocks),
        turns=turn_metrics(run.records),
        prompts=run.prompts,
        kernel_tcp=run.kernel_tcp,
        warm=run.warm,
    )
    result.notes = _notes(run, result)
    if run.target_gone or run.lost_workers:
        result.level_failed = True
    return result
