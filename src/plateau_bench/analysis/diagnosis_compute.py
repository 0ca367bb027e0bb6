"""When no admission limit holds requests out, the step time is the limit: decode or prefill work.

* **Compute / bandwidth saturation**: the decoding batch keeps rising with C but TPOT rises in
  proportion, so batch / TPOT (throughput) flattens.
* **Prefill-bound**: most of the engine's time goes to prompt tokens. The client measures it without
  /metrics (``prefill_estimate``): at the lowest level (C=1 or 2) a request's TTFT is its prefill plus about one
  step and its TPOT is one step, so ``(TTFT - TPOT) / prompt tokens`` is the cost of a prompt token;
  times the prompt tokens the plateau processes per second (total minus output throughput) it is the
  share of each second the engine spends on prefill. Decode stalls behind big prefill chunks (ITL
  spikes without preemption) and requests waiting for their prefill (a batch that looks short) are
  this, not a KV limit. Recomputation after preemption is invisible to this estimate, so it reads low
  when the KV cache thrashes. A fixed cost per request outside the engine (an API server, the network)
  is in that TTFT too, and reads as prompt cost: the check is TPOT. When prompts take a share ``p`` of
  the engine's time, decode tokens wait for them (in the same steps, or between decode steps), so TPOT on
  the plateau is about ``1 / (1 - p)`` times a step without them; a TPOT that moved less than half of that
  from the lowest level says the engine was not that busy with prompts (``tpot_disagrees``).
"""

from __future__ import annotations

from plateau_bench.analysis.diagnosis_common import (
    GENERIC_PREFILL,
    Prefill,
    Sweep,
    conc,
    flag,
    mean_lengths,
    ms,
    stall_ratio,
)
from plateau_bench.result import Confidence, LevelResult, Verdict

PREFILL_BOUND = 0.5       # prefill share of the engine's time that makes it the limit
ROSE = 1.1                # a decoding batch that grew less than this over the plateau did not rise
PREFILL_UNSURE = (0.35, 0.65)
LOWEST_C = 2              # the prefill cost is read from a level of at most this concurrency


def prefill_estimate(levels: list[LevelResult], top: list[LevelResult]) -> Prefill | None:
    """The prefill share, from the lowest level when it ran one or two requests at a time (else None:
    with more, requests arrive together and are prefilled together or queue, and TTFT says neither)."""
    low = levels[0]
    prompt, _ = mean_lengths(low)
    if prompt <= 0 or low.ttft_ms.p50 is None or not top or conc(low) > LOWEST_C:
        return None
    per_token_ms = max(0.0, low.ttft_ms.p50 - (low.tpot_ms.mean or 0.0)) / prompt
    last = top[-1]
    prompt_rate = max(0.0, last.total_throughput - last.output_throughput)
    p, o = mean_lengths(last)
    return Prefill(min(per_token_ms / 1000 * prompt_rate, 1.5), per_token_ms * 1000, p or prompt, o, conc(low))


STEPS_HELD = 0.03         # the server's mean tokens per step moving less than this between the last two levels ...
STEPS_GREW = 0.7          # ... after the lowest level's steps carried at most this share of it: the steps are full
STEPS_OVER_BATCH = 1.5    # ... and well over the running batch (one decode token each): not a batch held still


def full_steps(s: Sweep) -> tuple[float, LevelResult, LevelResult] | None:
    """The tokens every engine step carried on the plateau, when its steps stopped growing there: the server's
    iteration-token histogram (vLLM ``iteration_tokens_total``) with the same mean at the last two plateau levels,
    after the lowest level's steps carried far fewer, and many more than the sequences running (a batch that a cap
    holds still carries one token per sequence and the odd prompt). A mean that holds still while the load
    doubles is a per-step token budget (vLLM ``--max-num-batched-tokens``) that every step fills."""
    means = [(lv, lv.time_split.step_tokens.mean) for lv in s.levels
             if lv.time_split is not None and lv.time_split.step_tokens is not None
             and lv.time_split.step_tokens.mean]
    if len(means) < 3 or means[-1][0] not in s.top:
        return None
    (_, lowest), (before, held), (last, tokens) = means[0], means[-2], means[-1]
    batch = max(last.decoding_concurrency, last.telemetry.running_mean or 0.0)
    if abs(tokens / held - 1) > STEPS_HELD or lowest > STEPS_GREW * tokens or tokens < STEPS_OVER_BATCH * batch:
        return None
    return tokens, before, last


def _full_steps_lines(s: Sweep) -> tuple[list[str], list[str]]:
    """The evidence and the suggestion when every step on the plateau was full (``full_steps``), else none."""
    full = full_steps(s)
    if full is None:
        return [], []
    tokens, before, last = full
    budget = flag(s.engine, "prefill") or GENERIC_PREFILL
    lowest = next(lv for lv in s.levels if lv.time_split is not None and lv.time_split.step_tokens is not None
                  and lv.time_split.step_tokens.mean)
    return ([f"the server's steps carried ~{tokens:,.0f} tokens on average at C={conc(before)} and C={conc(last)} "
             f"(its tokens-per-step histogram), against {lowest.time_split.step_tokens.mean:,.0f} at "  # type: ignore[union-attr]
             f"C={conc(lowest)}: every step is full, so a per-step token budget of ~{tokens:,.0f} binds"],
            [f"raise the per-step token budget above ~{tokens:,.0f} ({budget}): every step on the plateau is full"])


def _prefill_evidence(s: Sweep, pre: Prefill) -> list[str]:
    low, last = s.levels[0], s.top[-1]
    ev = [f"prompt tokens take ~{min(pre.share, 1.0):.0%} of the engine's time on the plateau: a prompt token costs "
          f"~{pre.us_per_token:.1f} us (TTFT {ms(low.ttft_ms.p50)} - TPOT {ms(low.tpot_ms.mean)} at "
          f"C={pre.measured_at}, ~{pre.prompt_tokens:,.0f}-token prompts) and the plateau processes "
          f"{max(0.0, last.total_throughput - last.output_throughput):,.0f} prompt tokens/s",
          f"~{pre.prompt_tokens / max(pre.output_tokens, 1):.0f} prompt tokens per output token "
          f"({pre.prompt_tokens:,.0f} in, {pre.output_tokens:,.0f} out)",
          f"TTFT p50 {ms(s.top[0].ttft_ms.p50)} -> {ms(last.ttft_ms.p50)} from C={conc(s.top[0])} to C={conc(last)}"]
    stalls = stall_ratio(s.top)
    if stalls > 5:
        ev.append(f"decode stalls behind prefill chunks: ITL max {stalls:.0f}x its median")
    kv = [lv.telemetry.kv_usage_max for lv in s.top if lv.telemetry.kv_usage_max is not None]
    pre_delta = sum(lv.telemetry.preemptions_delta or 0.0 for lv in s.top)
    if kv:
        ev.append(f"server: KV-cache usage peaked at {max(kv):.0%}, {pre_delta:.0f} preemptions: not a KV limit")
    return ev


def tpot_disagrees(s: Sweep, pre: Prefill) -> bool:
    """The plateau's TPOT moved too little for prompts to take ``pre.share`` of the engine (module docstring)."""
    low, last = s.levels[0].tpot_ms.mean, s.top[-1].tpot_ms.mean
    if not low or not last:
        return False
    return last / low < 0.5 / (1 - min(pre.share, 0.9))


def prefill_verdict(s: Sweep, pre: Prefill) -> Verdict:
    disagrees = tpot_disagrees(s, pre)
    unsure = pre.share < PREFILL_UNSURE[1] or pre.measured_at > 1 or disagrees
    confidence: Confidence = "medium" if unsure else "high"
    budget = flag(s.engine, "prefill") or GENERIC_PREFILL
    full, raise_budget = _full_steps_lines(s)
    v = Verdict(
        "prefill", "prefill-bound: prompt processing, not decoding, takes most of each step", confidence,
        [*_prefill_evidence(s, pre), *full],
        suggestions=[*raise_budget,
                     f"tune the chunked-prefill budget: {budget} (larger batches more prompt tokens per step; "
                     "smaller keeps decode steps short)",
                     "split prefill and decode (prefill/decode disaggregation) so long prompts stop delaying decodes",
                     "prefix caching, when prompts share a prefix, skips their recomputation"])
    if unsure:
        v.to_separate.append("sweep with shorter prompts (e.g. a quarter of --input-len): a prefill-bound plateau "
                             "rises with them, a decode-bound one barely moves")
    if disagrees:
        v.to_separate.append(f"TPOT moved only {ms(s.levels[0].tpot_ms.mean)} -> {ms(s.top[-1].tpot_ms.mean)}: the "
                             "TTFT at the lowest level may be a cost outside the engine (API server, network); "
                             "/metrics (process CPU, requests running vs in flight) or the server's time split "
                             "would say")
    if pre.measured_at > 1:
        v.to_separate.append(f"measure C=1 too: the per-token prefill cost was read at C={pre.measured_at}")
    return v


def _fine(v: float) -> str:
    return f"{v:,.0f}" if v >= 20 else f"{v:.1f}"


def _fine_ms(v: float | None) -> str:
    """A time per token, in ms with three significant figures below 100 ms (TPOTs can be fractions of one)."""
    return ms(v) if v is None or v >= 100 else f"{v:.3g} ms"


def compute_verdict(s: Sweep) -> Verdict:
    top = s.top
    first, last = top[0], top[-1]
    batch_ratio = last.decoding_concurrency / max(first.decoding_concurrency, 1e-9)
    tpot_ratio = (last.tpot_ms.mean or 0) / max(first.tpot_ms.mean or 0, 1e-9)
    # Each line says what the figures did: a batch that held still is not called rising.
    rose = "kept rising" if batch_ratio >= ROSE else "did not rise"
    in_step = batch_ratio >= ROSE and 0.75 < tpot_ratio / batch_ratio < 1.33
    ev = [f"decoding concurrency {rose}: {_fine(first.decoding_concurrency)} -> {_fine(last.decoding_concurrency)} "
          f"from C={conc(first)} to C={conc(last)}",
          f"TPOT {'rose in proportion' if in_step else 'moved'}: {_fine_ms(first.tpot_ms.mean)} -> "
          f"{_fine_ms(last.tpot_ms.mean)} ({tpot_ratio:.1f}x for {batch_ratio:.1f}x the batch)",
          f"throughput flat at ~{s.plateau.throughput:,.0f} tok/s"]
    if any(lv.telemetry.waiting_mean is not None for lv in top):
        waiting = last.telemetry.waiting_mean or 0.0
        ev.append(f"server waiting queue ~{waiting:.1f}: " + ("requests are admitted" if waiting < 1.0 else
                  "requests wait to be admitted, so something holds the running count"))
    if s.prefill is not None and s.prefill_share >= PREFILL_UNSURE[0]:
        ev.append(f"prompt tokens take ~{s.prefill_share:.0%} of the engine's time (from TTFT at C="
                  f"{s.prefill.measured_at})")
    flat = max(lv.output_throughput for lv in top) <= 1.1 * min(lv.output_throughput for lv in top)
    proportional = batch_ratio > 1.3 and 0.75 < tpot_ratio / batch_ratio < 1.33 and flat
    spreads = sorted((lv.tpot_ms.p99 or 0.0) / lv.tpot_ms.p50 for lv in top if lv.tpot_ms.p50)
    shared = not spreads or spreads[len(spreads) // 2] < 1.3   # one batch: every request sees the same steps
    confidence: Confidence = "high" if proportional and shared else "medium" if proportional else "low"
    v = Verdict(
        "compute", "compute / bandwidth saturation: larger batches only make each step slower", confidence, ev,
        suggestions=["more or faster GPUs, more tensor/expert parallelism, or quantization",
                     f"tune step efficiency: {flag(s.engine, 'batch')}" if flag(s.engine, "batch") else
                     "tune the engine's batching (CUDA graphs, batched tokens per step)"])
    if batch_ratio < ROSE:
        v.to_separate.append("the decoding batch did not grow over the plateau: something that holds it (a cap, the "
                             "KV cache) may bind instead; the running count on /metrics would show it")
    if not shared:
        v.evidence.append(f"per-request TPOT spreads (p99 {spreads[len(spreads) // 2]:.1f}x the median): requests do "
                          "not all share one batch")
        if not any(lv.telemetry.preemptions_delta is not None for lv in top):
            v.to_separate.append("enable /metrics: preemptions would show the KV cache evicting requests")
    full, raise_budget = _full_steps_lines(s)
    v.evidence += full
    v.suggestions[:0] = raise_budget
    if s.prefill_share >= PREFILL_UNSURE[0]:
        v.confidence = "medium" if proportional else "low"
        v.secondary = "prefill"
        v.to_separate.append("sweep with shorter prompts: if the plateau rises, prefill is the larger part")
    return v
