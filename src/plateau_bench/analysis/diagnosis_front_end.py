"""The front end: requests wait outside the engine, in the API server process, while the engine has room.

vLLM and SGLang put an API server in front of the engine (HTTP, chat template, tokenizer, detokenizer):
one Python process by default. When it cannot turn requests around as fast as the engine finishes them,
the engine runs below its cap and its step-time limit while the client's requests wait outside it. The
client sees what a cap shows (throughput flat, TTFT growing with load, TPOT flat), so only the server can
tell them apart. Evidence, whatever the levels carry:

* **requests outside the engine**: the client keeps C requests in flight (Little's law,
  ``achieved_concurrency``) while the server counts far fewer, running + waiting, on its ``/metrics``
  (a request is counted once the engine core has it); at least ``OUTSIDE_SHARE`` of them outside on the
  sweep's top level, and more than twice as many as at its lowest level (they pile up with load);
* **the time split** (``analysis.time_split``): the client's TTFT less the server's queue + prefill, the
  time outside the engine, is most of the TTFT at the top level and more than doubled with load; read only
  where the gauges cannot count the requests, and only with the API server at least half busy (time
  outside the engine alone could be the network, a proxy or the client);
* **the API server at one core**: ``process_cpu_seconds_total``'s rate (``process_cpu_rate``) at or above
  ``ONE_CORE`` CPU seconds per second. A process below ``IDLE_CPU`` is not what holds requests: the wait is
  elsewhere (network, a proxy), and the verdict says so at a lower confidence.

The verdict needs the requests (or the TTFT) outside the engine; the CPU raises it to high confidence.

**The client alone** (no gauges) sees one more thing (``before_decoding``): a level that reads as
prefill-bound (a lone request's TTFT, spread over its prompt, puts prompts at ``SERIAL_SHARE`` or more of
the engine's time on the plateau) while decoding did not slow with load (TPOT at most ``UNSLOWED`` times
its lowest level's, none stalled behind a prompt: ITL max at most ``STALLS`` times its median). Prompts
that took that share of the engine's steps would slow every decode sharing those steps by 1 / (1 -
share), 3.3x at 70 %; a plateau whose TPOT held is waiting in a stage before the engine decodes, that
does not share its steps: the API server, or prefill on other GPUs (disaggregated serving). The
verdict names the front end first and prefill second at medium confidence, with the sweeps that
separate them.
"""

from __future__ import annotations

from plateau_bench.analysis.diagnosis_common import Sweep, at, mean_lengths, ms, stall_ratio
from plateau_bench.level_run import GAUGE_SCRAPES
from plateau_bench.result import Confidence, LevelResult, Verdict

OUTSIDE_SHARE = 0.5   # of the client's requests in flight, the server does not count them
ONE_CORE = 0.8        # CPU seconds per second: a single-threaded process near its core
IDLE_CPU = 0.5        # below this the API server has CPU to spare
MIN_SCRAPES = GAUGE_SCRAPES   # scrapes inside a level's window before its gauges compare with the client's
SERIAL_SHARE = 0.7    # client alone: the prefill share (from C=1's TTFT) a waiting stage shows as
UNSLOWED = 2.0        # client alone: TPOT on the plateau at most this times the lowest level's: decoding held
STALLS = 5.0          # ... and no decode stalled behind a prompt (ITL max over its median, as the prefill verdict)

FRONT_END_FIX = {
    "vllm": "vllm serve --api-server-count {n} (more API server processes in front of the engine)",
    "sglang": "--tokenizer-worker-num {n} (more tokenizer processes in front of the scheduler)",
}
GENERIC_FRONT_END = ("more API server processes: vLLM --api-server-count {n}, SGLang --tokenizer-worker-num {n}")
REPLICAS = "or more replicas behind a load balancer, each with its own API server"


def outside_share(level: LevelResult) -> float | None:
    """Share of the client's requests in flight that the server's /metrics do not count (None: unknown)."""
    t = level.telemetry
    if t.running_mean is None or t.waiting_mean is None or level.achieved_concurrency <= 0:
        return None   # both gauges count the requests in the engine: one alone would miss some
    if t.samples < MIN_SCRAPES:
        return None   # a burst shorter than a few scrapes: its gauges are a moment, the client's count a mean
    inside = t.running_mean + t.waiting_mean
    return max(0.0, 1.0 - inside / level.achieved_concurrency)


def process_cpu(level: LevelResult) -> float | None:
    """The API server's CPU seconds per second over the level (``process_cpu_seconds_total``'s rate)."""
    return level.telemetry.raw.get("process_cpu_rate")


def _split_outside(level: LevelResult) -> tuple[float, float] | None:
    """(time outside the engine, client TTFT), means in ms, from the server's time split."""
    split = level.time_split
    if split is None or split.outside_engine_ms is None or not split.client_ttft_mean_ms:
        return None
    return split.outside_engine_ms, split.client_ttft_mean_ms


def _outside_count(level: LevelResult) -> float | None:
    share = outside_share(level)
    return None if share is None else share * level.achieved_concurrency


def _outside_evidence(s: Sweep) -> list[str]:
    """Requests (or TTFT) outside the engine, growing with load; empty when the levels do not show it.

    Growth is read on the count, not the share: at C=1 a request may spend most of its short life in the
    front end, so the share is high at every level, but only a saturated front end piles requests up.
    """
    first, last = s.levels[0], s.levels[-1]
    share, count, base = outside_share(last), _outside_count(last), _outside_count(first)
    if share is not None and count is not None and share >= OUTSIDE_SHARE and (base is None or count > 2 * base):
        t = last.telemetry
        return [f"at {at(last)}: {last.achieved_concurrency:.0f} requests in flight at the client, "
                f"{last.achieved_concurrency - count:.0f} in the engine ({t.running_mean or 0:.0f} running, "
                f"{t.waiting_mean or 0:.0f} waiting, /metrics): {share:.0%} wait outside it"
                + (f" ({base:.1f} at {at(first)})" if base is not None else "")]
    if share is not None:
        return []   # the server's own gauges count the client's requests: they wait in the engine, not before it
    cpu = process_cpu(last)
    if cpu is None or cpu < IDLE_CPU:
        # TTFT outside the engine alone could be the network, a proxy, the client or a server lagging for any
        # reason (a preempted request's recompute has been seen to read as outside in the twin's split): it
        # names the front end only with the API server busy.
        return []
    split, split_base = _split_outside(last), _split_outside(first)
    if split is not None and split[0] >= OUTSIDE_SHARE * split[1] and (
            split_base is None or split[0] > 2 * split_base[0]):
        before = f" ({ms(split_base[0])} at {at(first)})" if split_base is not None else ""
        return [f"at {at(last)}: {ms(split[0])} of the {ms(split[1])} TTFT is spent outside the engine (client TTFT "
                f"less the server's queue + prefill){before}"]
    return []


def front_end_verdict(s: Sweep) -> Verdict | None:
    """The front-end verdict when requests wait outside the engine on the plateau (module docstring), else None."""
    outside = _outside_evidence(s)
    if not outside:
        return None
    last = s.levels[-1]
    cpu = process_cpu(last)
    evidence = list(outside)
    confidence: Confidence = "medium"
    to_separate: list[str] = []
    if cpu is not None and cpu >= ONE_CORE:
        confidence = "high"
        evidence.append(f"the API server process used {cpu:.2f} CPU s per second at {at(last)}: one core, full")
    elif cpu is not None and cpu < IDLE_CPU:
        confidence = "low"
        evidence.append(f"the API server process used only {cpu:.2f} CPU s per second: the wait may be in the "
                        "network or a proxy in front of it")
    else:
        to_separate.append("check the API server's CPU (process_cpu_seconds_total on /metrics): near one core "
                           "confirms the front end")
    t = last.telemetry
    if t.cap and t.running_max is not None and t.running_max < t.cap:
        evidence.append(f"running at most {t.running_max:.0f} of the cap of {t.cap:.0f}")
    n = 2 if cpu is None else max(2, int(cpu + 1.5))
    fix = FRONT_END_FIX.get(s.engine or "", GENERIC_FRONT_END).format(n=n)
    return Verdict("front_end", "front end: requests wait in the API server while the engine has room",
                   confidence, evidence, to_separate=to_separate,
                   suggestions=[f"try {fix}, {REPLICAS}",
                                "cheaper requests for the front end: shorter prompts to tokenize, no chat template, "
                                "fewer streamed chunks (stream_options or larger chunks)"])


def before_decoding(s: Sweep, prefill: Verdict) -> Verdict | None:
    """Client alone: the front end (or prefill elsewhere) where a prefill-bound reading's TPOT held (module
    docstring); None when the levels do not show it. ``prefill`` is that reading, kept as the secondary."""
    low, last = s.levels[0], s.top[-1]
    tpot_low, tpot_top = low.tpot_ms.mean, last.tpot_ms.mean
    if (s.telemetry or s.prefill is None or s.prefill.share < SERIAL_SHARE or not tpot_low or not tpot_top
            or tpot_top > UNSLOWED * tpot_low or stall_ratio(s.top) > STALLS):
        return None
    _, output = mean_lengths(last)
    evidence = [f"TTFT p50 {ms(low.ttft_ms.p50)} -> {ms(last.ttft_ms.p50)} from {at(low)} to {at(last)} while TPOT "
                f"went {ms(tpot_low)} -> {ms(tpot_top)} ({tpot_top / tpot_low:.1f}x): decoding did not slow",
                f"prompts at ~{min(s.prefill.share, 1.0):.0%} of the engine's time (a lone request's TTFT over its "
                f"prompt) would slow the decodes sharing their steps ~{1 / (1 - min(s.prefill.share, 0.9)):.0f}x: "
                "the requests wait in a stage that does not share them"]
    if output > 0 and last.output_throughput > 0 and low.ttft_ms.p50:
        every_ms = 1000 * output / last.output_throughput
        evidence.append(f"the plateau finishes a request every {ms(every_ms)}; a lone request waited "
                        f"{ms(low.ttft_ms.p50)} for its first token at {at(low)}")
    fix = FRONT_END_FIX.get(s.engine or "", GENERIC_FRONT_END).format(n=2)
    # A fed-slowly engine pins its batch as a cap does: the prefill reading may have named one second.
    held = ([f"the decoding batch held at {prefill.estimated_cap}: an admission cap there would hold it too, and "
             "/metrics' running count at the cap with a queue would say so"]
            if prefill.secondary == "admission_cap" and prefill.estimated_cap else [])
    return Verdict(
        "front_end", "front end: requests wait before the engine decodes them, and decoding does not slow",
        "medium", evidence, secondary="prefill", secondary_evidence=prefill.evidence[:1],
        to_separate=[*held,
                     "read the server's /metrics (running + waiting): far fewer than the client keeps in flight "
                     "is the front end (API server), all of them is the engine's prefill",
                     f"sweep with prompts half as long: a front end keeps its requests per second (one every "
                     f"~{ms(1000 * output / last.output_throughput) if last.output_throughput else '?'}), "
                     "prefill serves about twice as many",
                     "with prefill on other GPUs (disaggregated serving), the prefill workers' load says which"],
        suggestions=[f"if the API server: {fix}, {REPLICAS}", *prefill.suggestions[:1]])
