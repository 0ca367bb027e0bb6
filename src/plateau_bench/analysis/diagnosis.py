"""Why throughput stopped growing: a verdict with evidence, a confidence and what to try next.

The verdict is a pure function of the saved levels (client-side metrics, plus the server's
``/metrics`` summary and the load generator's health when they were recorded). Checks, in order,
because an earlier one makes the later figures meaningless:

1. **The load generator and its connections** (``diagnosis_client``): a stalled event loop, slow
   connects, or a client that could not keep the requested concurrency in flight, on sustained
   evidence and only when it held throughput below what a healthy client reached.
2. **A prefix cache the workload did not ask for** (``diagnosis_cache``): the server found far more of
   the prompt tokens cached than the workload repeats, so the levels measure cache hits.
3. **Errors / rate limiting**: failures grow with load; the verdict names the statuses it saw.
4. **Not saturated yet**: throughput still grows. Levels with no per-request times (level summaries: a
   table, another tool's report) are read by ``diagnosis_table`` from here on: the decoding batch by
   Little's law on tokens and the queue in front of it, weighed against the KV cache's size when known.
5. **Admission limits**, weighed together:

   * the *cap* signature (``diagnosis_cap``): decoding concurrency pinned at N while C grows;
   * the *KV-cache* evidence (``diagnosis_kv``): the server's KV usage and preemptions, or the
     client's signs (TPOT spread, throughput falling with C, recompute stalls, a sagging batch).

   A cap that is touched while the KV cache is full is not "the cap": with /metrics, the cache
   is the primary limit when it is full nearly all the time or preempts often, and the cap is
   named as the secondary one; otherwise the cap is primary and the KV cache secondary. Every
   what-if respects both: doubling the cap only grows the batch as far as the cache allows. Client
   alone, a pinned peak with KV signs cannot be told apart from a KV ceiling: the verdict says
   so, lowers its confidence and names the measurement that would separate them (``to_separate``).
6. **The front end** (``diagnosis_front_end``): the server counts far fewer requests than the client
   keeps in flight (or the TTFT is spent outside the engine): they wait in the API server, and the
   engine's running count and step time are not what binds. Checked before the engine's own limits,
   because a front end that feeds the engine slowly also pins its running count.
7. **Step time** (``diagnosis_compute``): prefill-bound when prompt tokens take most of the engine's
   time (measured from TTFT at the lowest level), else compute / bandwidth saturation.

GPU figures (DCGM), when recorded, are read by ``analysis.gpu`` into ``gpu_evidence`` for the constraint named.
When TTFT grew with load and the server published its own time split, the evidence says where that TTFT
went: queue, prefill, or outside the engine (``diagnosis_split``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from plateau_bench.analysis.diagnosis_budget import budget_sign
from plateau_bench.analysis.diagnosis_cache import cache_fault
from plateau_bench.analysis.diagnosis_cap import CapSign, cap_signature, cap_what_if
from plateau_bench.analysis.diagnosis_client import STALL_MS, errors, load_generator
from plateau_bench.analysis.diagnosis_common import (
    ENGINE_FLAGS,
    GENERIC_CAP,
    GENERIC_KV,
    GENERIC_PREFILL,
    Sweep,
    by_concurrency,
    conc,
    flag,
    mean_lengths,
)
from plateau_bench.analysis.diagnosis_compute import PREFILL_BOUND, compute_verdict, prefill_estimate, prefill_verdict
from plateau_bench.analysis.diagnosis_front_end import before_decoding, front_end_verdict
from plateau_bench.analysis.diagnosis_kv import KV_FULL_PEAK, KvSign, history_evidence, kv_needed, kv_signature
from plateau_bench.analysis.diagnosis_kv_room import KvRoom, Lengths
from plateau_bench.analysis.diagnosis_split import time_split_evidence
from plateau_bench.analysis.diagnosis_table import summaries_only, summary_verdict
from plateau_bench.analysis.gpu import gpu_evidence, gpu_suggestions
from plateau_bench.analysis.open_loop import open_loop_verdict
from plateau_bench.analysis.plateau import Point, find_knee, find_plateau
from plateau_bench.analysis.roofline_place import place_on_roofline
from plateau_bench.analysis.unmeasured import counted
from plateau_bench.result import Confidence, Knee, LevelResult, Plateau, RateSummary, Verdict
from plateau_bench.roofline import Roofline

__all__ = ["ENGINE_FLAGS", "STALL_MS", "diagnose"]

PREFILL_FIRST = 0.7    # client alone: prefill above this share explains a pinned peak and stalls
PREFILL_UNSURE = 0.35  # prefill above this share: a token budget may hold the running count, not a cap
PROMPT_TOKENS_UNSURE = 2 / 3   # prompts this share of a step's tokens: the same, counted in tokens ...
SMALLEST_BUDGET = 512          # ... in steps this large at least (llama.cpp's -ub; vLLM and SGLang default higher)
WHAT_IF_RANGE = 0.25   # client alone: the largest gain a cap what-if states as one number
STILL_GROWING = 0.10   # a last doubling gaining this much leaves the plateau unsure
FULL_BATCH = 0.90      # a server time-average running count this share of its stated cap: the batch stayed full


def _try_cap(s: Sweep, sign: CapSign) -> str:
    flags = ENGINE_FLAGS.get(s.engine or "")
    return flags["cap"].format(n=2 * sign.cap) if flags else GENERIC_CAP.format(n=2 * sign.cap)


def _budget_step_tokens(s: Sweep, sign: CapSign) -> float | None:
    """The tokens a step carries at the cap, when prompts are most of them (None otherwise).

    A step's token budget (vLLM ``--max-num-batched-tokens``) counts prompt and decode tokens alike. Where
    prompts are most of a step's tokens, a budget they fill admits a steady number of requests per step, and
    the running count settles at exactly the figure a cap of that size would give: N decodes plus the
    prompts of the N / output requests that end per step. Cheap as prompt tokens may be in time (the
    prefill share), it is their count that fills the budget. Steps smaller than any engine's default budget
    (``SMALLEST_BUDGET``) are not taken for one.
    """
    prompt, output = mean_lengths(s.top[-1])
    if sign.stated or prompt + output <= 0 or prompt / (prompt + output) < PROMPT_TOKENS_UNSURE:
        return None
    tokens = sign.cap * (1 + prompt / max(output, 1.0))
    return tokens if tokens >= SMALLEST_BUDGET else None


def _cap_verdict(s: Sweep, sign: CapSign, kv: KvSign, confidence: Confidence, *, kv_unsure: bool = False) -> Verdict:
    """The cap as the primary limit; ``kv_unsure``: client alone, with signs that the KV cache may hold it."""
    v = Verdict("admission_cap", f"admission cap at {sign.cap} running requests", confidence, sign.evidence(s),
                estimated_cap=sign.cap)
    step_tokens = _budget_step_tokens(s, sign)
    if step_tokens is not None:
        budget = flag(s.engine, "prefill") or GENERIC_PREFILL
        v.to_separate.append(f"the server's configured cap against its token budget ({budget}): steps of "
                             f"~{step_tokens:,.0f} tokens, mostly prompts, would hold the running count at "
                             f"{sign.cap} just as a cap does; if its cap is above {sign.cap}, the budget binds")
    what = cap_what_if(s, sign)
    if kv.full or kv_unsure:
        v.secondary = "kv_capacity"
        v.secondary_evidence = kv.server_evidence() + kv.hints
    # Without /metrics the KV cache's room is unknown: the answer lies between today's plateau and the
    # prediction, so a prediction is only given when that whole range is within 25 % of it.
    kv_unsure = kv_unsure or (not kv.reported and what is not None
                              and what.predicted > (1 + WHAT_IF_RANGE) * s.plateau.throughput)
    if what and not kv_unsure:
        v.predicted_throughput_doubled_cap, v.what_if_batch = what.predicted, what.batch
        v.what_if_model = f"TPOT slope (linear in the batch, measured below the cap on {what.levels} levels)"
        if what.low is not None and what.high is not None:
            v.what_if_low, v.what_if_high = what.low, what.high
            v.what_if_model += (f"; band {what.low:,.0f} to {what.high:,.0f} tok/s with each of those levels left "
                                "out of the slope in turn")
        else:
            v.what_if_model += "; no band: two levels, none to leave out"
        v.what_if.append(what.text)
    elif what:   # the cache may hold the batch as well: give the range, not a number
        gain = what.predicted / s.plateau.throughput - 1
        v.what_if.append(f"raising the cap to {2 * sign.cap} gives between +0 % (if the KV cache holds no more "
                         f"sequences) and ~{gain:+.0%} (if it holds {2 * sign.cap}): {what.text}")
        v.to_separate.append(_kv_room_check(s))
        if v.secondary == "kv_capacity":
            v.to_separate.append("sweep with shorter outputs: a KV limit moves up with them, a fixed cap does not")
    elif not kv.reported:
        v.to_separate.append("enable /metrics to check the KV cache has room for twice the sequences"
                             if not s.telemetry else _kv_room_check(s))
    if s.prefill_share >= PREFILL_BOUND and v.secondary is None:
        v.secondary = "prefill"
        v.secondary_evidence = [f"prompt tokens take ~{min(s.prefill_share, 1.0):.0%} of the engine's time"]
    if kv.kv_mean is not None:
        headroom = f"KV usage {kv.kv_mean:.0%} on average, peaking at {kv.kv_max or kv.kv_mean:.0%}"
    elif kv.kv_max is not None:
        headroom = f"KV usage peaked at {kv.kv_max:.0%}: check it has room for twice the sequences"
    else:
        headroom = "check the KV cache has room for twice the sequences"
    v.suggestions.append(f"try {_try_cap(s, sign)} ({headroom})")
    return _held_by_budget(s, sign, v)


def _held_by_budget(s: Sweep, sign: CapSign, v: Verdict) -> Verdict:
    """The verdict when the server's prefill shows a full step budget holding the count (``diagnosis_budget``):
    said in the headline and the evidence, raising the budget advised first, and never high confidence."""
    full = budget_sign(s, sign.pinned)
    if full is None:
        return v
    budget = flag(s.engine, "prefill") or GENERIC_PREFILL
    v.headline = (f"admission held at {sign.cap} running requests by a full step token budget "
                  f"(~{full.budget:,.0f} tokens or a little more), not a cap" if not sign.stated else
                  f"admission cap at {sign.cap} running requests, its step token budget full as well")
    v.evidence.append(full.evidence(sign.cap))
    if v.confidence == "high":
        v.confidence = "medium"
    advice = (f"raise the step token budget above ~{full.budget:,.0f} ({budget}): "
              + ("a larger running cap alone admits no more while every step is full" if not sign.stated else
                 "raising the cap alone would leave the steps full"))
    if not sign.stated:   # the cap's own advice would change nothing: said as a check instead
        v.suggestions = [t for t in v.suggestions if not t.startswith("try ")]
        v.to_separate.append(f"if the server's running cap is {sign.cap} as well, raise both")
    v.suggestions.insert(0, advice)
    if v.what_if:
        v.what_if.append(f"{2 * sign.cap} running needs a step budget about twice as large (~{2 * full.budget:,.0f} "
                         "tokens), not only a larger running cap")
    v.to_separate.append(f"sweep with shorter prompts: a full budget then holds more than {sign.cap} running, "
                         "a cap does not move")
    return v


def _kv_room_check(s: Sweep) -> str:
    """How to learn the KV cache's room when the levels do not show it."""
    if not s.telemetry:
        return "enable /metrics: KV-cache usage at the cap says how many more sequences fit"
    # /metrics was read, and holds no KV usage (llama.cpp publishes none): only the cache's size tells
    return ("the server's /metrics reports no KV-cache usage: its cache's size over the tokens a sequence "
            "holds says how many more sequences fit (llama.cpp: --ctx-size, split across --parallel slots)")


def _kv_verdict(s: Sweep, kv: KvSign, sign: CapSign | None, confidence: Confidence) -> Verdict:
    headline = ("KV-cache capacity: sequences outgrow the cache before the cap binds" if sign is None else
                f"KV-cache capacity, with the running count also at {sign.cap}: the cache binds first")
    v = Verdict("kv_capacity", headline, confidence, kv.server_evidence() + kv.hints,
                suggestions=[f"give the KV cache more memory: {flag(s.engine, 'kv')}" if flag(s.engine, "kv")
                             else GENERIC_KV, "shorter outputs or a smaller max model length free blocks"])
    v.what_if.append(kv_needed(s, 2 * sign.cap if sign else None))
    history, tips = history_evidence(s)
    v.evidence.extend(history)
    v.suggestions[:0] = tips
    if sign is not None:
        v.secondary, v.estimated_cap = "admission_cap", sign.cap
        v.secondary_evidence = sign.evidence(s)
        v.predicted_throughput_doubled_cap = s.plateau.throughput
        v.what_if.insert(0, f"raising the cap to {2 * sign.cap} alone would give little (~{s.plateau.throughput:,.0f} "
                            "tok/s): the cache cannot hold more sequences")
    if not kv.reported:
        v.to_separate.append("enable /metrics (KV-cache usage, preemptions) to confirm")
        if sign is not None:
            v.to_separate.append("sweep with shorter outputs: a KV limit moves up with them, a fixed cap does not")
    return v


def _cap_confidence(s: Sweep, sign: CapSign, *, client: bool) -> Confidence:
    """High when the cap is stated or clear; client alone, only when a KV limit could not look the same.

    A request is admitted when its prompt's blocks fit; when outputs are longer than prompts, a cache
    that is the real limit lets more requests in at ramp-up than it can keep, so the peak overshoots and
    moves. With prompts longer than outputs, a cache can hold a fixed count just like a cap: then only
    /metrics tell them apart.
    """
    prompt, output = mean_lengths(s.top[-1])
    fill = 0.85 if client else 0.8
    clear = sign.server_agrees or sign.stated or (len(sign.pinned) >= 2 and sign.tpot_flat and sign.fill >= fill
                                                  and (not client or output >= prompt))
    if (s.prefill_share >= PREFILL_UNSURE and not sign.stated) or _budget_step_tokens(s, sign) is not None:
        clear = False   # a token budget spent on prompts also holds the running count
    return "high" if clear else "medium"


def _prefill_first(s: Sweep, sign: CapSign | None) -> Verdict | None:
    """Prompts take most of the engine's time: a pinned batch and decode stalls follow from it."""
    if s.prefill is None or s.prefill_share < PREFILL_FIRST:
        return None
    v = prefill_verdict(s, s.prefill)
    held = sign.cap if sign is not None else _held_at_top_only(s)
    if sign is not None:
        v.secondary, v.estimated_cap = "admission_cap", sign.cap
        v.secondary_evidence = sign.evidence(s)
    if held is not None:
        v.confidence = "medium"
        v.to_separate.append(f"sweep with shorter prompts: a cap at {held} stays, a prefill limit moves")
    return v


def _held_at_top_only(s: Sweep) -> int | None:
    """The count the widest level held its decoding batch at, when it alone stopped growing (None otherwise).

    A cap needs two levels at or above it to be told (``cap_signature``); a sweep that ended one doubling past
    it shows one held level, which a cap and a prompt-bound engine's steady state produce alike.
    """
    if len(s.levels) < 2:
        return None
    below, top = s.levels[-2], s.levels[-1]
    peak = int(top.telemetry.running_max or top.peak_decoding)
    grew = below.peak_decoding >= 0.9 * conc(below)
    return peak if grew and 0 < peak < 0.9 * conc(top) else None


def _with_metrics(s: Sweep, sign: CapSign | None, kv: KvSign) -> Verdict | None:
    # The cache is sure only when it turned requests away (preempted them, or cannot hold the next prompt):
    # one full to 96 % that evicts nothing may be holding exactly what something else admits.
    turned_away = kv.preemptions > 0 or kv.blocked
    if sign is not None and kv.full:
        # Running pinned at the cap with nothing preempted and room for the next prompt: the cap is what
        # holds the queue out now; the full cache says doubling it would give little (secondary).
        pinned = sign.server_agrees and not turned_away
        if kv.dominant and not pinned:
            return _kv_verdict(s, kv, sign, "high" if (kv.kv_mean or 0) >= 0.95 and turned_away else "medium")
        return _cap_verdict(s, sign, kv, "medium")
    if kv.full:
        return _kv_verdict(s, kv, None, "high" if kv.dominant and turned_away and _full_from_start(s) else "medium")
    v = _prefill_first(s, sign)
    if v is None and sign is not None:
        v = _cap_verdict(s, sign, kv, _cap_confidence(s, sign, client=False))
    return v


def _full_from_start(s: Sweep) -> bool:
    """Whether the cache was already full where the plateau began: one that fills only on wider levels, while
    throughput had stopped growing before it, is not what stopped it (compute, or the step, came first)."""
    first = s.top[0].telemetry.kv_usage_max
    return first is None or first >= KV_FULL_PEAK


def _client_only(s: Sweep, sign: CapSign | None, kv: KvSign) -> Verdict | None:
    if not kv.strong:
        v = _prefill_first(s, sign)
        if v is not None:
            return v
    if sign is not None:
        points = kv.client.points(sign.fill) if kv.client else 0
        thrash = bool(kv.client and kv.client.thrash)
        if sign.stated and sign.server_agrees:
            # The server states its cap and its running count sits there: its word outweighs the spread and
            # stalls, which a prompt joining the batch produces too. Falling throughput overturns it, unless
            # the server's own time-average running count stayed at the cap: no slot was emptied by a
            # preemption, so the fall is not the cache's recomputation.
            full = _ran_full(s, sign)
            if thrash and full is not None:
                v = _cap_verdict(s, sign, kv, "medium", kv_unsure=True)
                v.evidence.append(full)
                v.to_separate.append(f"measure the falling levels again (--repeat 3): a fall while all {sign.cap} "
                                     "slots stay busy is the machine's or the client's noise, not the cache")
                return v
            if not thrash:
                points = min(points, 1)
        if points >= 2:
            return _kv_verdict(s, kv, sign, "medium")
        if points:
            return _cap_verdict(s, sign, kv, "medium", kv_unsure=True)
        return _cap_verdict(s, sign, kv, _cap_confidence(s, sign, client=True))
    if kv.strong:
        return _kv_verdict(s, kv, None, "medium")
    return None


def _ran_full(s: Sweep, sign: CapSign) -> str | None:
    """The server's time-average running count on every level past its stated cap, where it stayed at the cap
    (>= 90 %): a batch held full throughout, which preemption would have emptied (None: not reported, or not
    full)."""
    past = [lv.telemetry.running_mean for lv in s.top if conc(lv) > sign.cap]
    if not past or any(m is None or m < FULL_BATCH * sign.cap for m in past):
        return None
    low = min(m for m in past if m is not None)
    return (f"server: its time-average running count stayed at {low:.1f} or more of its {sign.cap} slots on every "
            "level past the cap (/metrics): a full batch throughout, which preemption would have emptied")


def _limits(s: Sweep) -> Verdict:
    sign = cap_signature(s)
    kv = kv_signature(s)
    v = front_end_verdict(s)
    if v is None:
        v = _with_metrics(s, sign, kv) if s.telemetry and kv.reported else _client_only(s, sign, kv)
    if v is None:
        v = prefill_verdict(s, s.prefill) if s.prefill and s.prefill_share >= PREFILL_BOUND else compute_verdict(s)
    if v.constraint == "prefill":
        v = before_decoding(s, v) or v
    v.evidence.insert(0, s.plateau_line())
    split = time_split_evidence(s)
    if split is not None:
        v.evidence.append(split)
    _still_growing(s, v)
    return v


class KvCheck(NamedTuple):
    """What level summaries weigh a held batch against: the KV cache's size and the run's stated lengths."""

    room: KvRoom | None
    lengths: Lengths | None


def _still_growing(s: Sweep, v: Verdict) -> None:
    """A plateau whose last doubling still gained >= 10 % (within its noise) is not a sure one."""
    last = s.levels[-1]
    half = [lv for lv in s.levels if 2 * conc(lv) <= conc(last)]
    if not half or half[-1].output_throughput <= 0:
        return
    gain = last.output_throughput / half[-1].output_throughput - 1
    if gain < STILL_GROWING:
        return
    if v.confidence == "high":
        v.confidence = "medium"
    v.evidence.append(f"throughput still grew {gain:+.0%} from C={conc(half[-1])} to C={conc(last)}")
    v.to_separate.append(f"measure higher concurrency (plateau sweep --max-concurrency {4 * conc(last)}): the "
                         "plateau may not be reached yet")


def diagnose(levels: Sequence[LevelResult], *, engine: str | None = None, plateau_gain: float = 0.05,
             plateau: Plateau | None = None, knee: Knee | None = None,
             open_loop: RateSummary | None = None, roofline: Roofline | None = None,
             kv_room: KvRoom | None = None, lengths: Lengths | None = None) -> Verdict:
    """The verdict for a sweep's levels (see the module docstring for the signatures and their order).

    The load-generator and error checks read every level, one alone included: a single level that
    failed or whose client stalled says so. ``open_loop`` (a rate sweep's summary) ends with what an
    open loop can show when neither fired. ``roofline``: say where the plateau sits against the
    hardware's ceiling and keep the what-if under it (``analysis.roofline_place``). ``kv_room``: the KV
    cache's size, which level summaries weigh a held batch against (``diagnosis_kv_room``); the
    roofline's estimate when not given. ``lengths``: the prompt and output lengths stated for the run
    (``stated_lengths``), for levels that do not carry their own.
    """
    if kv_room is None and roofline is not None:
        kv_room = KvRoom.of_roofline(roofline)
    v = _verdict(levels, engine, plateau_gain, plateau, knee, open_loop, KvCheck(kv_room, lengths))
    v.gpu_evidence = gpu_evidence(levels, v.constraint)
    v.suggestions.extend(gpu_suggestions(levels, v.constraint))
    return place_on_roofline(levels, plateau, v, roofline) if roofline is not None else v


def _verdict(levels: Sequence[LevelResult], engine: str | None, plateau_gain: float, plateau: Plateau | None,
             knee: Knee | None, open_loop: RateSummary | None, kv: KvCheck) -> Verdict:
    measured = [lv for lv in levels if lv.num_requests > 0 or counted(lv)]   # a table may count no request
    lvls = by_concurrency(levels)
    for check in (load_generator, cache_fault, errors):
        v = check(measured if open_loop is not None else lvls or measured)
        if v:
            return v
    if open_loop is not None:
        return open_loop_verdict(levels, open_loop)
    if len(lvls) < 2:
        return Verdict("insufficient_data", "one level is not enough to say why throughput stops growing",
                       "low", [f"{len(lvls)} usable level(s)"],
                       suggestions=["run a sweep: plateau sweep --url ..."])
    lvls = [lv for lv in lvls if not lv.level_failed and counted(lv)]
    if len(lvls) < 2:
        return Verdict("insufficient_data", "fewer than two levels succeeded: not enough to say why", "low",
                       [f"{len(lvls)} successful level(s)"], suggestions=["fix the failures, then sweep again"])
    points = [Point(conc(lv), lv.output_throughput, lv.throughput_ci_rel) for lv in lvls]
    plateau = plateau or find_plateau(points, plateau_gain)
    if plateau is None:
        last, prev = lvls[-1], lvls[-2]
        gain = last.output_throughput / max(prev.output_throughput, 1e-9) - 1
        return Verdict(
            "not_saturated", f"not saturated yet: throughput still grows at C={conc(last)}", "high",
            [f"C={conc(prev)} -> C={conc(last)}: {prev.output_throughput:,.0f} -> {last.output_throughput:,.0f} tok/s "
             f"({gain:+.0%})"],
            suggestions=[f"keep going: plateau sweep --max-concurrency {conc(last) * 4}"],
        )
    top = [lv for lv in lvls if conc(lv) >= plateau.concurrency] or lvls[-1:]
    sweep = Sweep(lvls, plateau, knee or find_knee(points, plateau), engine, top, prefill_estimate(lvls, top))
    if summaries_only(sweep):
        v = summary_verdict(sweep, kv.room, kv.lengths)
        _still_growing(sweep, v)
        return v
    return _limits(sweep)
