"""Why throughput stopped growing: a verdict with evidence, a confidence and what to try next.

The verdict is a pure function of the saved levels (client-side metrics, plus the server's
``/metrics`` summary and the load generator's health when they were recorded). It checks the
signatures below in order, because an earlier one makes the later figures meaningless:

1. **Load generator**: in-flight requests below the requested concurrency while the client's
   CPU is near one core or its event loop lags; or an event loop so stalled (p99 lag >= 200 ms) that
   no chunk time can be trusted. Every other number is then wrong, so it comes first.
2. **Errors / rate limiting**: failures (429/503/timeouts) grow with load.
3. **Admission cap** (max-num-seqs, max-running-requests, --parallel): the most requests past
   their first token at one instant (``peak_decoding``) stays at one value N while concurrency
   grows past it; TTFT grows with C - N (queueing) while TPOT stays flat; in burst mode the end-to-end
   latencies and the wall time come in whole waves. The server's ``running`` == N and ``waiting`` > 0
   confirm it, and a stated cap (llama.cpp ``total_slots``) makes it exact.
4. **KV-cache capacity**: fewer requests decode than the cap allows and their number swings (time
   average well below the peak), preemptions rise, KV usage near 100 %, ITL spikes from recomputation.
5. **Compute / bandwidth saturation**: decoding concurrency keeps rising with C but TPOT rises in
   proportion, so batch / TPOT (throughput) flattens.
6. **Not saturated yet**: throughput still grows.

What-if for a cap: TPOT is fitted against the decoding batch on the levels below the cap
(``TPOT = t0 + a * batch``, least squares), and the throughput with the cap doubled is the measured
plateau scaled by ``(2N / TPOT(2N)) / (N / TPOT(N))``: ratios cancel the prefill share that the
simple fit does not model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from plateau_bench.analysis.open_loop import open_loop_verdict
from plateau_bench.analysis.plateau import Point, find_knee, find_plateau
from plateau_bench.result import Confidence, Knee, LevelResult, Plateau, RateSummary, Verdict

ENGINE_FLAGS: dict[str, dict[str, str]] = {
    "vllm": {"cap": "vllm serve --max-num-seqs {n}", "batch": "--max-num-batched-tokens",
             "kv": "--gpu-memory-utilization (more KV blocks) or a smaller --max-model-len"},
    "sglang": {"cap": "--max-running-requests {n}", "batch": "--num-continuous-decode-steps, CUDA graphs",
               "kv": "--mem-fraction-static (more KV pool)"},
    "llamacpp": {"cap": "llama-server --parallel {n} (and raise --ctx-size: it is split across slots)",
                 "batch": "-b/-ub batch sizes", "kv": "--ctx-size (split across --parallel slots)"},
    "tgi": {"cap": "--max-concurrent-requests / --max-batch-total-tokens",
            "batch": "--max-batch-prefill-tokens", "kv": "--max-batch-total-tokens"},
}
KV_FILL_THRESHOLD = 0.65
GENERIC_CAP = ("the server's running-request cap: vLLM --max-num-seqs {n}, SGLang --max-running-requests {n}, "
               "llama.cpp --parallel {n}, TGI --max-concurrent-requests")


def _ms(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v / 1000:.1f} s" if v >= 10_000 else f"{v:.0f} ms"


def _c(level: LevelResult) -> int:
    return level.concurrency or 0


def _levels(levels: Sequence[LevelResult]) -> list[LevelResult]:
    by_c: dict[int, LevelResult] = {}
    for lv in levels:
        if lv.concurrency and lv.num_requests > 0:
            by_c[lv.concurrency] = lv
    return [by_c[c] for c in sorted(by_c)]


STALL_MS = 200.0   # event-loop lag (p99) beyond which client timings cannot be trusted at all


def _load_generator(levels: list[LevelResult]) -> Verdict | None:
    stalled = [lv for lv in levels if (lv.client.loop_lag_ms_p99 or 0.0) >= STALL_MS]
    if stalled:
        worst = max(stalled, key=lambda lv: lv.client.loop_lag_ms_p99 or 0.0)
        return Verdict(
            "load_generator",
            f"load generator stalled: its event loop lagged {worst.client.loop_lag_ms_p99 or 0.0:.0f} ms (p99) "
            f"at C={_c(worst)}, so chunk times, TPOT and concurrency are not measurable",
            "high",
            [f"event-loop lag p99 >= {STALL_MS:.0f} ms at " + ", ".join(f"C={_c(lv)}" for lv in stalled),
             f"load generator CPU peaked at {worst.client.cpu_pct_max or float('nan'):.0f} % of one core"],
            suggestions=["run the load generator on a machine (or cores) the server does not share",
                         "re-run the affected levels: every figure from them understates or distorts the server"],
        )
    for lv in levels:
        cpu = lv.client.cpu_pct_max
        lag = lv.client.loop_lag_ms_p99
        starved = (cpu is not None and cpu >= 90.0) or (lag is not None and lag >= 50.0)
        short = lv.mode != "rate" and _c(lv) > 0 and lv.achieved_concurrency < 0.85 * _c(lv)
        # A server holding (running or queued) far fewer requests than the client means to send
        # has spare room: the requests are stuck in the client.
        held = (lv.telemetry.running_mean or 0.0) + (lv.telemetry.waiting_mean or 0.0)
        server_idle = lv.telemetry.running_mean is None or held < 0.8 * _c(lv)
        if starved and short and server_idle:
            ev = [f"at C={_c(lv)} only {lv.achieved_concurrency:.1f} requests were in flight on average"]
            if cpu is not None:
                ev.append(f"load generator CPU peaked at {cpu:.0f} % of one core")
            if lag is not None:
                ev.append(f"event-loop lag p99 {lag:.0f} ms")
            if lv.telemetry.running_mean is not None:
                ev.append(f"the server held only {held:.1f} requests on average (running + waiting): "
                          "it had spare room")
            return Verdict(
                "load_generator", f"load generator bound from C={_c(lv)}: the client, not the server, is the limit",
                "high" if cpu is not None and lag is not None else "medium", ev,
                suggestions=["run the load from a faster or less busy machine, or spread it over several",
                             "every figure at and above this level understates the server"],
            )
    return None


def _at(level: LevelResult) -> str:
    return f"C={level.concurrency}" if level.concurrency else level.label


def _errors(levels: list[LevelResult]) -> Verdict | None:
    bad = [lv for lv in levels if lv.num_requests and lv.failed / lv.num_requests >= 0.05]
    if not bad:
        return None
    first = bad[0]
    worst = max(bad, key=lambda lv: lv.failed / lv.num_requests)
    ev = [f"from {_at(first)}: {first.failed}/{first.num_requests} requests failed "
          f"(mostly {first.dominant_error})",
          f"worst at {_at(worst)}: {worst.failed / worst.num_requests:.0%} failed"]
    hung = sum(lv.hung for lv in bad)
    if hung:
        ev.append(f"{hung} request(s) hung: still unanswered after the level's grace period")
    ok_below = [lv for lv in levels if lv.failed == 0 and _c(lv) < _c(first)]
    if ok_below:
        ev.append(f"no failures up to {_at(ok_below[-1])}")
    if first.dominant_error == "connect" and first is levels[-1]:
        return Verdict(
            "errors", f"the server stopped answering at {_at(first)} (connections refused or reset)", "high", ev,
            suggestions=["check the server's log: it may have crashed or been restarted (out of memory?)",
                         "the levels before it are valid; resume the sweep once the server is back"],
        )
    rate_limited = any(k in ("http_429", "http_5xx") for lv in bad for k in lv.errors)
    what = "requests hang" if first.dominant_error == "hung" else "errors / rate limiting"
    return Verdict(
        "errors", f"{what} from {_at(first)}" + (" (429/5xx)" if rate_limited else "")
        + (f"; {hung} hung" if hung and first.dominant_error != "hung" else ""),
        "high" if len(bad) >= 2 or rate_limited or first.failed / first.num_requests >= 0.5 else "medium", ev,
        suggestions=["raise the server's queue or rate limits, or keep concurrency below "
                     f"{_at(first)}", "check the server log for the rejected or unanswered requests"],
    )


def _fit_tpot(levels: list[LevelResult], below: float) -> tuple[float, float] | None:
    pts = [(lv.decoding_concurrency, lv.tpot_ms.mean) for lv in levels
           if lv.tpot_ms.mean is not None and lv.decoding_concurrency < below * 0.98]
    if len(pts) < 2 or len({round(b, 1) for b, _ in pts}) < 2:
        return None
    b = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    slope, intercept = np.polyfit(b, t, 1)
    return float(intercept), float(max(slope, 0.0))


def _waves(levels: list[LevelResult], cap: int) -> str | None:
    burst = [lv for lv in levels if lv.mode == "burst" and _c(lv) >= cap]
    if len(burst) < 2:
        return None
    base = burst[0].wall_s / max(1, round(_c(burst[0]) / cap))
    ratios = [lv.wall_s / base for lv in burst]
    if all(abs(r - round(r)) < 0.15 for r in ratios):
        waves = ", ".join(str(round(r)) for r in ratios)
        return f"burst mode: wall times are {waves} waves of {base:.1f} s"
    return None


def _admission_cap(levels: list[LevelResult], plateau: Plateau, engine: str | None) -> Verdict | None:
    top = [lv for lv in levels if _c(lv) >= plateau.concurrency]
    if len(top) < 2:
        return None
    stated = next((int(lv.telemetry.cap) for lv in top if lv.telemetry.cap), None)
    client_peak = max(lv.peak_decoding for lv in top)
    server_peak = max((int(lv.telemetry.running_max) for lv in top if lv.telemetry.running_max),
                      default=0)
    # The server's own running count is exact; the client's view can overlap a request's last token
    # with the next one's first by network jitter, so it may read one or two above the cap. A client
    # peak far above the server's means preempted requests (past their first token, no longer
    # running): not a fixed cap.
    if server_peak and server_peak < 0.9 * client_peak:
        return None
    cap = stated or server_peak or client_peak
    if cap <= 0:
        return None
    # From the cap upwards the decoding peak must sit at the cap, on at least two levels.
    top = [lv for lv in levels if _c(lv) >= cap]
    pinned = [lv for lv in top if _c(lv) > cap * 1.05]
    peaks = [lv.peak_decoding for lv in top]
    if len(top) < 2 or not pinned or max(peaks) > cap * 1.05 + 1 or min(peaks) < 0.9 * cap:
        return None
    # KV-bound servers also touch the cap now and then, but their decoding batch sags far below it
    # as sequences grow; under a cap the slots are refilled at once (a prefill-first scheduler
    # leaves some slots waiting for their first token, hence the margin).
    fill = [lv.decoding_concurrency / cap for lv in pinned]
    if min(fill) < KV_FILL_THRESHOLD:
        return None
    first, last = top[0], top[-1]
    ev = [f"most requests decoding at once: {cap} at every level from C={_c(first)} to C={_c(last)} "
          f"(time-average {first.decoding_concurrency:.1f} -> {last.decoding_concurrency:.1f})"]
    t0, t1 = first.ttft_ms.p50, last.ttft_ms.p50
    ev.append(f"TTFT p50 grew {_ms(t0)} -> {_ms(t1)} (queueing) while TPOT stayed "
              f"{_ms(first.tpot_ms.mean)} -> {_ms(last.tpot_ms.mean)}")
    running_max = [lv.telemetry.running_max for lv in top if lv.telemetry.running_max is not None]
    waiting = [lv.telemetry.waiting_mean for lv in pinned if lv.telemetry.waiting_mean is not None]
    server_agrees = bool(running_max) and all(abs(r - cap) <= max(1.0, 0.02 * cap) for r in running_max)
    if running_max:
        ev.append(f"server: running max {max(running_max):.0f}, waiting "
                  f"{max(waiting or [0.0]):.0f} on average at C={_c(last)} (/metrics)")
    if stated:
        ev.append(f"the server states its cap: {stated}")
    waves = _waves(levels, cap)
    if waves:
        ev.append(waves)
    tpot_flat = (first.tpot_ms.mean or 0) > 0 and (last.tpot_ms.mean or 0) / (first.tpot_ms.mean or 1) < 1.25
    clear = server_agrees or stated or (len(pinned) >= 2 and tpot_flat and min(fill) >= 0.8)
    confidence: Confidence = "high" if clear else "medium"
    verdict = Verdict("admission_cap", f"admission cap at {cap} running requests", confidence, ev,
                      estimated_cap=cap)
    _cap_what_if(verdict, levels, plateau, cap)
    kv = [lv.telemetry.kv_usage_max for lv in top if lv.telemetry.kv_usage_max is not None]
    flags = ENGINE_FLAGS.get(engine or "")
    try_cap = flags["cap"].format(n=2 * cap) if flags else GENERIC_CAP.format(n=2 * cap)
    headroom = f" (check KV headroom: KV usage peaked at {max(kv or [0]):.2f})" if kv else \
        " (check the KV cache has room for twice the sequences)"
    verdict.suggestions.append(f"try {try_cap}{headroom}")
    return verdict


def _cap_what_if(verdict: Verdict, levels: list[LevelResult], plateau: Plateau, cap: int) -> None:
    """Doubling the cap, from the TPOT-vs-batch fit below it (see the module docstring)."""
    fit = _fit_tpot(levels, cap)
    if not fit:
        return
    intercept, slope = fit
    tpot_n = intercept + slope * cap
    tpot_2n = intercept + slope * 2 * cap
    if tpot_n <= 0:
        return
    gain = (2 * cap / tpot_2n) / (cap / tpot_n)
    predicted = plateau.throughput * gain
    verdict.predicted_throughput_doubled_cap = predicted
    verdict.what_if.append(
        f"raising the cap to {2 * cap} would give ~{predicted:,.0f} tok/s ({gain - 1:+.0%}) at "
        f"~{tpot_2n / tpot_n:.1f}x the per-token latency (from the TPOT-vs-batch slope measured "
        f"below the cap: {intercept:.1f} ms + {slope:.3f} ms per sequence)")


def _kv_capacity(levels: list[LevelResult], plateau: Plateau, engine: str | None) -> Verdict | None:
    top = [lv for lv in levels if _c(lv) >= plateau.concurrency]
    if not top:
        return None
    preempt = sum(lv.telemetry.preemptions_delta or 0.0 for lv in top)
    kv_max = max((lv.telemetry.kv_usage_max or 0.0 for lv in top), default=0.0)
    swing = [lv.decoding_concurrency / lv.peak_decoding for lv in top if lv.peak_decoding]
    # A median ITL of (near) zero means chunks arrived bunched: no ratio against it means anything.
    spikes = [(lv.itl_ms.max or 0.0) / (lv.itl_ms.p50 or 1.0) for lv in top if (lv.itl_ms.p50 or 0.0) >= 0.1]
    # Something other than a fixed cap stops admission: the decoding batch no longer grows with C,
    # yet it stays well below its own peak (the running count falls as sequences grow).
    first, last = top[0], top[-1]
    stalled = (_c(last) >= 2 * _c(first) and first.decoding_concurrency > 0
               and last.decoding_concurrency / first.decoding_concurrency < 1.3)
    # Preempted requests still look "decoding" to a client (they had their first token), so the sag
    # can hide; what cannot hide is the recompute stall each one suffers: an ITL far above the median,
    # on levels whose decoding peak keeps moving (a fixed cap would pin it).
    peaks = [lv.peak_decoding for lv in top if lv.peak_decoding]
    moving_peak = bool(peaks) and max(peaks) > 1.1 * min(peaks)
    recompute_stalls = bool(spikes) and max(spikes) > 20 and moving_peak
    client_sig = (bool(swing) and min(swing) < KV_FILL_THRESHOLD and (stalled or (bool(spikes) and max(spikes) > 5))
                  ) or recompute_stalls
    server_sig = preempt > 0 or kv_max >= 0.95
    server_reports_kv = any(lv.telemetry.kv_usage_max is not None or lv.telemetry.preemptions_delta is not None
                            for lv in top)
    if server_reports_kv and not server_sig:
        return None  # the server says its cache never filled: the client-side sag has another cause
    if not (client_sig or server_sig):
        return None
    ev = []
    if swing and min(swing) < KV_FILL_THRESHOLD:
        lv = top[-1]
        ev.append(f"decoding batch swings: time-average {lv.decoding_concurrency:.1f} against a peak of "
                  f"{lv.peak_decoding} at C={_c(lv)} (the running count falls as sequences grow)")
    if stalled:
        ev.append(f"the decoding batch stopped growing: {first.decoding_concurrency:.1f} at C={_c(first)}, "
                  f"{last.decoding_concurrency:.1f} at C={_c(last)}")
    if spikes and max(spikes) > 5:
        ev.append(f"ITL max reaches {max(spikes):.0f}x its median (recomputation after preemption)")
    if moving_peak:
        ev.append(f"the most requests decoding at once moves between levels ({min(peaks)}-{max(peaks)}): "
                  "no fixed cap")
    if preempt > 0:
        ev.append(f"server: {preempt:.0f} preemptions during the plateau levels (/metrics)")
    if kv_max > 0:
        ev.append(f"server: KV-cache usage peaked at {kv_max:.0%}")
    flags = ENGINE_FLAGS.get(engine or "")
    return Verdict(
        "kv_capacity", "KV-cache capacity: sequences outgrow the cache before the cap binds",
        "high" if server_sig and client_sig else "medium", ev,
        suggestions=[f"give the KV cache more memory: {flags['kv']}" if flags else
                     "give the KV cache more memory (vLLM --gpu-memory-utilization, SGLang "
                     "--mem-fraction-static, llama.cpp --ctx-size)",
                     "shorter outputs or a smaller max model length free blocks"],
    )


def _compute(levels: list[LevelResult], plateau: Plateau, engine: str | None) -> Verdict:
    top = [lv for lv in levels if _c(lv) >= plateau.concurrency]
    first, last = top[0], top[-1]
    batch_ratio = last.decoding_concurrency / max(first.decoding_concurrency, 1e-9)
    tpot_ratio = (last.tpot_ms.mean or 0) / max(first.tpot_ms.mean or 0, 1e-9)
    ev = [f"decoding concurrency kept rising: {first.decoding_concurrency:.0f} -> {last.decoding_concurrency:.0f} "
          f"from C={_c(first)} to C={_c(last)}",
          f"TPOT rose in proportion: {_ms(first.tpot_ms.mean)} -> {_ms(last.tpot_ms.mean)} "
          f"({tpot_ratio:.1f}x for {batch_ratio:.1f}x the batch)",
          f"throughput flat at ~{plateau.throughput:,.0f} tok/s"]
    if any(lv.telemetry.waiting_mean is not None for lv in top):
        ev.append(f"server waiting queue ~{last.telemetry.waiting_mean or 0.0:.1f}: requests are admitted")
    proportional = batch_ratio > 1.3 and 0.6 < tpot_ratio / batch_ratio < 1.5
    flags = ENGINE_FLAGS.get(engine or "")
    return Verdict(
        "compute", "compute / bandwidth saturation: larger batches only make each step slower",
        "high" if proportional else "low", ev,
        suggestions=["more or faster GPUs, more tensor/expert parallelism, or quantization",
                     f"tune step efficiency: {flags['batch']}" if flags else
                     "tune the engine's batching (CUDA graphs, batched tokens per step)"],
    )


def diagnose(levels: Sequence[LevelResult], *, engine: str | None = None, plateau_gain: float = 0.05,
             plateau: Plateau | None = None, knee: Knee | None = None,
             open_loop: RateSummary | None = None) -> Verdict:
    """The verdict for a sweep's levels (see the module docstring for the signatures and their order).

    The load-generator and error checks read every level, one alone included: a single level that
    failed or whose client stalled says so. ``open_loop`` (a rate sweep's summary) ends with what an
    open loop can show when neither fired.
    """
    measured = [lv for lv in levels if lv.num_requests > 0]
    lvls = _levels(levels)
    for check in (_load_generator, _errors):
        v = check(measured if open_loop is not None else lvls or measured)
        if v:
            return v
    if open_loop is not None:
        return open_loop_verdict(levels, open_loop)
    if len(lvls) < 2:
        return Verdict("insufficient_data", "one level is not enough to say why throughput stops growing",
                       "low", [f"{len(lvls)} usable level(s)"],
                       suggestions=["run a sweep: plateau sweep --url ..."])
    lvls = [lv for lv in lvls if not lv.level_failed and lv.completed > 0]
    if len(lvls) < 2:
        return Verdict("insufficient_data", "fewer than two levels succeeded: not enough to say why", "low",
                       [f"{len(lvls)} successful level(s)"], suggestions=["fix the failures, then sweep again"])
    points = [Point(_c(lv), lv.output_throughput, lv.throughput_ci_rel) for lv in lvls]
    plateau = plateau or find_plateau(points, plateau_gain)
    if plateau is None:
        last = lvls[-1]
        prev = lvls[-2]
        gain = last.output_throughput / max(prev.output_throughput, 1e-9) - 1
        return Verdict(
            "not_saturated", f"not saturated yet: throughput still grows at C={_c(last)}", "high",
            [f"C={_c(prev)} -> C={_c(last)}: {prev.output_throughput:,.0f} -> {last.output_throughput:,.0f} tok/s "
             f"({gain:+.0%})"],
            suggestions=[f"keep going: plateau sweep --max-concurrency {_c(last) * 4}"],
        )
    knee = knee or find_knee(points, plateau)
    for check_at in (_admission_cap, _kv_capacity):
        v = check_at(lvls, plateau, engine)
        if v:
            v.evidence.insert(0, f"plateau ~{plateau.throughput:,.0f} tok/s from C={plateau.concurrency}, "
                                 f"knee at C~{knee.concurrency:.0f}")
            return v
    v = _compute(lvls, plateau, engine)
    v.evidence.insert(0, f"plateau ~{plateau.throughput:,.0f} tok/s from C={plateau.concurrency}, "
                         f"knee at C~{knee.concurrency:.0f}")
    return v
