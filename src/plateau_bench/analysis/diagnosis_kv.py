"""KV-cache capacity: the server's word when it gives one, the client's signs when it does not.

Server (/metrics): the cache is full on the plateau (time-average usage >= 85 % with a peak >= 95 %), it
preempts (>= 1 request in 20), or its free part (with the size the server states) cannot hold one more
prompt while requests wait; with multi-turn sessions, a peak >= 95 % with preemptions and a queue (the
time-average sits lower, as each conversation's context grows and starts small again). It *dominates*
(is the primary limit even when the running count also touches a cap) when it is full nearly all the
time (>= 95 %), when it preempts at >= 90 %, or when it cannot hold the next prompt; but not when the
server's running count sits at the cap with nothing preempted and room for the next prompt: then the cap
holds the queue out, and the full cache is the secondary limit (doubling the cap would give little).

Client alone (each sign is also produced by something else, so they are weighed together):

* **spread**: per-request TPOT p99 well above p50. In one batch every request gets a token per step,
  so TPOT is the same for all; a preempted request waits in the queue and is recomputed, and its TPOT
  carries that wait.
* **thrash**: throughput *falls* as concurrency grows (>= 15 % on steady windows, >= 50 % on whole-level
  ones, and beyond both levels' intervals): more requests, more preemption, more recomputation. A cap or a
  compute limit keeps it flat.
* **stalls**: an inter-token gap hundreds of times the median (the recompute wait, seen in chunk times).
* **sag**: requests queue (the most decoding at once stays well below C) yet the time-average batch
  sits far below its own peak, and the peak moves between levels: no fixed cap holds it.
* **queued**: requests wait >= 100 steps for their first token: some admission limit binds.

Strong alone: thrash; or spread with any of queued / sag / moving / stalls; queued with a milder spread
(median >= 1.25) or stalls; or a median spread >= 1.6 (a shared batch keeps TPOT alike: compute-bound
plateaus stay below ~1.45).
Against a pinned batch (a cap signature) ``ClientSigns.points`` weighs them: thrash 2 (1 when no request
shows a preemption's wait: no spread, no stall), spread 1-2, a time-average batch under 85 % of the peak 1,
stalls 1.

A prefill-heavy workload produces spread, stalls and sag too (decode steps wait behind big prefill
chunks), so when prompts take most of the engine's time only thrash counts.

What would help: ``kv_needed`` says how many tokens the cache holds now (stated by the server, or
estimated as running requests x their mean context) and how many the target batch needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from plateau_bench.analysis.diagnosis_common import Sweep, at, conc, mean_lengths, stall_ratio
from plateau_bench.result import LevelResult

KV_FULL_MEAN = 0.85
KV_FULL_PEAK = 0.95
THRASHING = 0.5     # preemptions per completed request on the plateau: the cache binds, not a cap
LOW_HIT_RATE = 0.2   # multi-turn history found cached less often than this: the cache is off or too small


@dataclass(frozen=True)
class KvSign:
    reported: bool                 # the server reported KV usage or preemptions
    full: bool                     # ... and they say the cache was full
    kv_mean: float | None
    kv_max: float | None
    preemptions: float
    per_request: float             # preemptions per completed request on the plateau
    blocked: bool = False          # the free cache (stated size) cannot hold one more prompt
    client: ClientSigns | None = None

    @property
    def hints(self) -> list[str]:
        return self.client.hints if self.client else []

    @property
    def strong(self) -> bool:
        """The client's signs alone make the case."""
        return self.client is not None and self.client.strong

    @property
    def dominant(self) -> bool:
        """The server says the cache, not a slot limit, is what requests wait for most of the time."""
        mean = self.kv_mean if self.kv_mean is not None else (self.kv_max or 0.0)
        # A cap never preempts: half the requests evicted and recomputed is the cache binding, whatever its
        # time-average (preemption frees blocks, so a thrashing cache averaged 89 % on a real vLLM).
        return self.full and (self.blocked or (mean >= 0.9 and self.preemptions > 0) or mean >= KV_FULL_PEAK
                              or self.per_request >= THRASHING)

    def server_evidence(self) -> list[str]:
        ev = []
        if self.preemptions > 0:
            ev.append(f"server: {self.preemptions:.0f} preemptions during the plateau levels "
                      f"({self.per_request:.2f} per request) (/metrics)")
        if self.kv_max is not None:
            ev.append(f"server: KV-cache usage {self.kv_mean or 0.0:.0%} on average, peaking at {self.kv_max:.0%}")
        return ev


def _thrash(s: Sweep) -> str | None:
    """Throughput falling as concurrency grows on the plateau: >= 15 % on a steady window, >= 50 % on a whole
    level (its window includes ramp-up and drain, which long prompts stretch: with a prefill-heavy workload
    only steady windows count)."""
    best = max(s.top, key=lambda lv: lv.output_throughput)
    for lv in reversed(s.top):
        if conc(lv) <= conc(best):
            break
        steady = lv.mode == "steady" and "whole level" not in lv.window_note
        if not steady and s.prefill_share >= 0.5:
            continue
        if best.output_throughput >= (1.15 if steady else 1.5) * lv.output_throughput and _apart(best, lv):
            return (f"throughput falls as concurrency grows: {best.output_throughput:,.0f} tok/s at C={conc(best)}, "
                    f"{lv.output_throughput:,.0f} at C={conc(lv)} (preemption and recomputation)")
    return None


def _apart(best: LevelResult, lv: LevelResult) -> bool:
    """The two levels' 95 % intervals do not overlap. A fall inside them is within what each level's own
    measurement allows (a short level on a noisy server), and the cache's recomputation is not the only
    reading of it. Levels without an interval (burst) are taken at their figures."""
    return (best.output_throughput * (1 - (best.throughput_ci_rel or 0.0))
            > lv.output_throughput * (1 + (lv.throughput_ci_rel or 0.0)))


def _spread(lv: LevelResult) -> float:
    return (lv.tpot_ms.p99 or 0.0) / lv.tpot_ms.p50 if lv.tpot_ms.p50 else 0.0


@dataclass(frozen=True)
class ClientSigns:
    """The client's KV signs on the plateau (see the module docstring), each with its figure."""

    hints: list[str]
    thrash: bool
    spread: float          # TPOT p99/p50 on the top level
    spread_median: float   # ... the median over the plateau's levels
    queued: bool           # some plateau level kept requests waiting >= 100 steps for their first token
    stalls: float
    sag: bool
    moving: bool

    @property
    def strong(self) -> bool:
        spreads = self.spread >= 1.5 or self.spread_median >= 1.4
        waits = self.queued and (self.spread_median >= 1.25 or self.stalls >= 200)
        return self.thrash or waits or (spreads and (self.queued or self.sag or self.moving or self.stalls >= 200)) or (
            self.spread_median >= 1.6)

    def points(self, fill: float) -> int:
        """How strongly the signs speak for KV against a pinned batch whose time-average fill is ``fill``."""
        return ((self._thrash_points() if self.thrash else 0) + (1 if fill < 0.85 else 0) + (2 if self.spread >= 1.5
                else 1 if self.spread >= 1.3 else 0) + (1 if self.stalls >= 200 else 0))

    def _thrash_points(self) -> int:
        """A fall the requests themselves show preemption in (TPOT spread, a recompute stall) weighs 2. Alone,
        with every request keeping the same pace, it weighs 1: preempted requests wait for their recompute
        while the others decode, so the cache's fall spreads TPOT; a client sharing the server's cores (a real
        llama.cpp with 6 slots read 475 tok/s at C=8 and 412 at C=32, TPOT p99 1.1x its median) does not."""
        return 2 if max(self.spread, self.spread_median) >= 1.3 or self.stalls >= 200 else 1


def client_signs(s: Sweep) -> ClientSigns:
    top = s.top
    thrash = _thrash(s)
    hints = [thrash] if thrash else []
    if s.prefill_share >= 0.5:   # prefill chunks stall decodes and spread TPOT too: only thrash counts
        return ClientSigns(hints, thrash is not None, 0.0, 0.0, False, 0.0, False, False)
    spreads = sorted(_spread(lv) for lv in top)
    spread, median = _spread(top[-1]), spreads[len(spreads) // 2]
    if max(spread, median) >= 1.3:
        hints.append(f"per-request TPOT spreads: p99 {max(spread, median):.1f}x the median (requests preempted and "
                     "recomputed wait while the others decode)")
    stalls = stall_ratio(top)
    if stalls >= 200:
        hints.append(f"inter-token gaps reach {stalls:.0f}x their median (recomputation after preemption)")
    queued = any((lv.ttft_ms.p50 or 0.0) >= 100 * (lv.tpot_ms.mean or float("inf")) for lv in top)
    last = top[-1]
    peaks = [lv.peak_decoding for lv in top if lv.peak_decoding]
    below = last.peak_decoding < 0.6 * conc(last)
    sag = below and last.peak_decoding > 0 and last.decoding_concurrency / last.peak_decoding < 0.65
    moving = bool(peaks) and max(peaks) > 1.1 * min(peaks) and below
    if sag:
        hints.append(f"decoding batch sags: time-average {last.decoding_concurrency:.1f} against a peak of "
                     f"{last.peak_decoding} at C={conc(last)} (the running count falls as sequences grow)")
    if moving:
        hints.append(f"the most requests decoding at once moves between levels ({min(peaks)}-{max(peaks)}), below C: "
                     "no fixed cap")
    return ClientSigns(hints, thrash is not None, spread, median, queued, stalls, sag, moving)


def kv_signature(s: Sweep) -> KvSign:
    top = s.top
    means = [lv.telemetry.kv_usage_mean for lv in top if lv.telemetry.kv_usage_mean is not None]
    maxes = [lv.telemetry.kv_usage_max for lv in top if lv.telemetry.kv_usage_max is not None]
    pre = [lv.telemetry.preemptions_delta for lv in top if lv.telemetry.preemptions_delta is not None]
    preemptions = sum(pre)
    per_request = preemptions / max(1, sum(lv.completed for lv in top))
    last = top[-1].telemetry.kv_usage_mean   # the most loaded level says how full the cache stays
    kv_mean = last if last is not None else (max(means) if means else None)
    kv_max = max(maxes) if maxes else None
    capacity = next((lv.telemetry.kv_capacity_tokens for lv in top if lv.telemetry.kv_capacity_tokens), None)
    prompt = mean_lengths(top[-1])[0]
    blocked = bool(capacity and kv_mean is not None and (1.0 - kv_mean) * capacity < prompt
                   and (top[-1].telemetry.waiting_mean or 0.0) > 0)
    full = blocked or per_request >= 0.05 or ((kv_max or 0.0) >= KV_FULL_PEAK and (kv_mean or 0.0) >= KV_FULL_MEAN)
    # Multi-turn: a conversation's context grows turn by turn and starts small again with the next one, so
    # the cache's time-average sits lower than under uniform requests even when admission waits on it; a
    # full peak, preemptions and a queue are the sign then.
    full = full or bool(top[-1].turns and (kv_max or 0.0) >= KV_FULL_PEAK and preemptions > 0
                        and (top[-1].telemetry.waiting_mean or 0.0) > 0)
    return KvSign(bool(means or maxes or pre), full, kv_mean, kv_max, preemptions, per_request, blocked,
                  client_signs(s))


def kv_needed(s: Sweep, target: int | None) -> str:
    """How much KV the plateau's batch holds now and what ``target`` running requests would need."""
    last = s.top[-1]
    prompt, output = mean_lengths(last)
    context = prompt + output / 2      # a running request holds its prompt and half its output, on average
    running = last.telemetry.running_mean if last.telemetry.running_mean is not None else last.decoding_concurrency
    stated = last.telemetry.kv_capacity_tokens
    if context <= 0 and not stated:
        return "more KV blocks let more sequences run at once: doubling the running batch needs about twice the cache"
    holds = (f"the cache holds {stated:,.0f} tokens" if stated else
             f"the cache holds ~{running * context:,.0f} tokens (~{running:.0f} running requests of ~{context:.0f} "
             "tokens on average)")
    if not target or running <= 0:
        return f"{holds}; every doubling of the running batch needs about twice that"
    need = target * (prompt + output)
    have = stated or running * context
    return (f"{holds}; {target} running requests of up to {prompt + output:.0f} tokens need up to ~{need:,.0f} tokens "
            f"(~{need / have:.1f}x)")


def history_evidence(s: Sweep) -> tuple[list[str], list[str]]:
    """Multi-turn sessions on the plateau: (evidence, suggestions) about KV that grows with each turn.

    Turn k carries the history of the turns before it, so a running conversation holds more of the
    cache with every turn: a known way to fill it. The prefix cache's hit rate (when the server states
    one) says whether the history is reused or computed again.
    """
    last = s.top[-1]
    evidence: list[str] = []
    tips: list[str] = []
    if len(last.turns) >= 2:
        opening, final = last.turns[0], last.turns[-1]
        evidence.append(f"multi-turn sessions: the prompt grows with the history, ~{opening.prompt_tokens_mean:,.0f} "
                        f"tokens at turn 1 to ~{final.prompt_tokens_mean:,.0f} at turn {final.turn + 1}: every running "
                        "conversation holds more of the cache as it goes on")
        tips.append("fewer conversations at once, or shorter histories (drop or summarise old turns): a session's "
                    "KV grows with every turn")
    rates = [lv.telemetry.prefix_cache_hit_rate for lv in s.top if lv.telemetry.prefix_cache_hit_rate is not None]
    if not rates:
        return evidence, tips
    rate = sum(rates) / len(rates)
    lowest = next((lv for lv in s.levels if lv.telemetry.prefix_cache_hit_rate is not None), None)
    low_load = lowest.telemetry.prefix_cache_hit_rate if lowest is not None else None
    if low_load is not None and lowest is not None and low_load >= 2 * max(rate, LOW_HIT_RATE / 2):
        evidence.append(f"server: the prefix cache found {low_load:.0%} of the prompt tokens cached at {at(lowest)} "
                        f"but {rate:.0%} on the plateau levels: conversations evict each other's history")
        if last.turns:
            tips.append("a larger KV cache keeps the histories cached: each turn then computes only its new message")
    else:
        evidence.append(f"server: prefix cache hit rate {rate:.0%} on the plateau levels")
        if last.turns and rate < LOW_HIT_RATE:
            tips.append("turn prefix caching on (vLLM --enable-prefix-caching, SGLang's radix cache): each turn then "
                        "computes only its new message")
    return evidence, tips
