"""A verdict from level summaries alone: what a table of results (or an imported summary) can show.

A summary has no per-request times, so the most requests decoding at once and the recompute stalls the
other checks read are unknown (``analysis.unmeasured``). What survives is the decoding batch by Little's law
and the queue in front of it:

* **Little's law on tokens**: a table of tok/s and mean TPOT (or ITL) holds the decoding batch, output
  tok/s x the time per output token (sequences decoding at once), per level.
* **held batch** (a cap): over the plateau's last levels (two or more; the first may still be filling up)
  the batch stops growing with C (within 15 %, below 80 % of C) while TTFT grows and TPOT stays flat
  (within 20 %): the extra requests wait before they decode, and
  the batch is where they are admitted up to. The batch is a time average, at most the cap, and close to it
  once requests wait: a freed slot is refilled at the next step, and the first token's step makes up for
  the one TPOT leaves out. The cap is read as the largest held batch.
* **growing batch** (compute): the batch keeps growing over the plateau's levels (>= 1.3x) while throughput
  stays flat (within 10 %). As batch = tok/s x TPOT, TPOT then rises in proportion: larger batches only make
  each step slower. With the batch keeping up with C (>= 70 % of its growth) no one waits: compute, at
  medium confidence (no per-request spread to read); a batch that lags C leaves the queue unexplained: low.
* **waves** (burst mode): from the plateau's first level N upwards, the wall times are whole multiples of
  the first one, ``wall(C) / wall(N) ~ C / N``: the server admitted N at a time.
* **Little's law on requests**: the concurrency a level achieved (stated, or completed x mean E2E /
  duration) stays well below the C that was sent: the rest waited outside the server.

A held batch, waves or a short concurrency point to an admission cap; a table cannot tell a cap from a KV
cache that holds a fixed number of sequences, so the confidence is at most medium (two signs, or waves on
three or more levels), else low, and the verdict says what would settle it. Given the KV cache's size
(``diagnosis_kv_room``: the roofline's estimate), the held batch's tokens against it say whether the cache
may hold the batch instead (then the verdict names the KV cache, at low confidence) or has room for twice
it (then a held batch and a queue are medium confidence). With none of these, the verdict says the
summaries cannot tell, rather than guess. Every figure an evidence line states was measured or follows
from measured ones by the law it names.
"""

from __future__ import annotations

from dataclasses import dataclass

from plateau_bench.analysis.diagnosis_common import GENERIC_CAP, GENERIC_KV, Sweep, conc, flag, mean_lengths
from plateau_bench.analysis.diagnosis_kv_room import KvRoom, KvWeight, Lengths, weigh_kv
from plateau_bench.analysis.unmeasured import from_summary
from plateau_bench.result import Confidence, LevelResult, Verdict

WAVE_TOLERANCE = 0.15    # a wall time within 15 % of a whole number of waves
QUEUED_SHARE = 0.8       # achieved concurrency below 80 % of C: requests waited
BATCH_FLAT = 0.15        # the decoding batch held within 15 % over the plateau's levels
TPOT_FLAT = 0.20         # ... while the time per token moved less than this: the extra requests queued
BATCH_GROWS = 1.3        # the batch grew at least this much over the plateau's levels: not held
THROUGHPUT_FLAT = 0.10   # ... while throughput moved less than this: each step got slower in proportion
TRACKS_C = 0.7           # the batch grew by at least this share of C's growth: every request decodes


def token_batch(level: LevelResult) -> float | None:
    """Sequences decoding at once by Little's law on tokens: output tok/s x the mean time per output token
    (TPOT, else ITL; the median where a summary states no mean). None when the summary has neither."""
    step_ms = _step_ms(level)
    if not step_ms or level.output_throughput <= 0:
        return None
    return level.output_throughput * step_ms / 1000.0


def _step_ms(level: LevelResult) -> float | None:
    return level.tpot_ms.mean or level.itl_ms.mean or level.tpot_ms.p50 or level.itl_ms.p50


def _first_token_ms(level: LevelResult) -> float | None:
    return level.ttft_ms.mean or level.ttft_ms.p50


def _t(ms: float) -> str:
    """A time per token or to the first token: three significant figures (TPOTs can be fractions of a ms)."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


@dataclass(frozen=True)
class BatchRow:
    """One plateau level as its summary shows it: the Little's-law batch, TPOT and TTFT."""

    level: LevelResult
    batch: float
    step_ms: float
    first_ms: float

    @property
    def at(self) -> str:
        shown = f"{self.batch:,.0f}" if self.batch >= 20 else f"{self.batch:.1f}"   # small batches: a tenth counts
        return f"{shown} at C={conc(self.level)}"


def batch_rows(top: list[LevelResult]) -> list[BatchRow]:
    """The plateau's levels whose summary gives the batch (tok/s and TPOT or ITL) and a TTFT."""
    rows = []
    for lv in top:
        batch, step, first = token_batch(lv), _step_ms(lv), _first_token_ms(lv)
        if batch is not None and step is not None and first is not None:
            rows.append(BatchRow(lv, batch, step, first))
    return rows


def _batch_line(rows: list[BatchRow], said: str) -> str:
    return ("decoding batch by Little's law on tokens (output tok/s x TPOT): " + ", ".join(r.at for r in rows)
            + f": {said}")


def _flat_tail(rows: list[BatchRow]) -> list[BatchRow]:
    """The plateau's last levels over which the batch held (within ``BATCH_FLAT``): the plateau may begin at
    a level whose batch was still filling up."""
    for start in range(len(rows) - 1):
        batches = [r.batch for r in rows[start:]]
        if max(batches) <= (1 + BATCH_FLAT) * min(batches):
            return rows[start:]
    return []


def _held_batch(top: list[LevelResult]) -> tuple[float, list[str]] | None:
    """The decoding batch the plateau's levels hold, and the evidence, when it stopped growing while the
    first token waited longer and the time per token did not move."""
    rows = _flat_tail(batch_rows(top))
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    batches = [r.batch for r in rows]
    if last.batch >= QUEUED_SHARE * conc(last.level):
        return None
    if abs(last.step_ms / first.step_ms - 1) > TPOT_FLAT or last.first_ms <= first.first_ms * (1 + TPOT_FLAT):
        return None
    ev = [_batch_line(rows, f"it did not rise from C={conc(first.level)} to C={conc(last.level)}, and stayed "
                            "below C"),
          f"TTFT {_t(first.first_ms)} -> {_t(last.first_ms)} ms while TPOT stayed at {_t(first.step_ms)} -> "
          f"{_t(last.step_ms)} ms from C={conc(first.level)} to C={conc(last.level)}: the extra requests waited "
          "before decoding, they did not slow the batch"]
    return max(batches), ev


@dataclass(frozen=True)
class Growing:
    """A batch that kept growing over the plateau: whether it kept up with C, the last one, and the evidence."""

    keeps_up: bool
    batch: float
    evidence: list[str]


def _growing_batch(top: list[LevelResult]) -> Growing | None:
    """The batch that kept growing over the plateau while throughput stayed flat: each step slower in
    proportion to the batch."""
    rows = batch_rows(top)
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    tput = [r.level.output_throughput for r in rows]
    grew, slower = last.batch / first.batch, last.step_ms / first.step_ms
    if grew < BATCH_GROWS or max(tput) > (1 + THROUGHPUT_FLAT) * min(tput):
        return None
    c_grew = conc(last.level) / max(conc(first.level), 1)
    tracks = grew - 1 >= TRACKS_C * (c_grew - 1)
    ev = [_batch_line(rows, f"it kept rising, {grew:.1f}x for {c_grew:.1f}x the concurrency"),
          f"TPOT rose in proportion: {_t(first.step_ms)} -> {_t(last.step_ms)} ms ({slower:.1f}x for {grew:.1f}x "
          "the batch)",
          f"throughput flat at {min(tput):,.0f}-{max(tput):,.0f} tok/s"]
    if not tracks:
        ev.append(f"TTFT {_t(first.first_ms)} -> {_t(last.first_ms)} ms: the batch grew less than C, so some "
                  "requests waited")
    return Growing(tracks, last.batch, ev)


def summaries_only(sweep: Sweep) -> bool:
    """The plateau's levels carry no per-request decoding figures (a table or an imported summary)."""
    return all(from_summary(lv) or (lv.peak_decoding == 0 and lv.decoding_concurrency == 0) for lv in sweep.top)


def _waves(top: list[LevelResult], n: int) -> list[float] | None:
    burst = [lv for lv in top if lv.mode == "burst" and lv.wall_s > 0]
    if len(burst) < 2 or conc(burst[0]) != n:
        return None
    ratios = [lv.wall_s / burst[0].wall_s for lv in burst]
    expected = [conc(lv) / n for lv in burst]
    if all(abs(r - e) <= WAVE_TOLERANCE * e for r, e in zip(ratios, expected, strict=True)):
        return ratios
    return None


def _queued(top: list[LevelResult]) -> list[LevelResult]:
    return [lv for lv in top if 0 < lv.achieved_concurrency < QUEUED_SHARE * conc(lv)]


def _kv_weight(sweep: Sweep, batch: float, room: KvRoom | None,
               lengths: Lengths | None) -> tuple[KvWeight | None, str | None]:
    """The held batch against the KV cache's size, or why it could not be weighed (None, None: no size)."""
    stated = next((lv.telemetry.kv_capacity_tokens for lv in sweep.top if lv.telemetry.kv_capacity_tokens), None)
    room = KvRoom(stated, "stated by the server") if stated else room
    if room is None:
        return None, None
    prompt, output = mean_lengths(sweep.top[-1])   # the level's own, else the lengths stated for the run
    if lengths is not None:
        prompt, output = prompt or lengths.prompt or 0.0, output or lengths.output or 0.0
    weight = weigh_kv(batch, prompt, output, room)
    if weight is None:
        return None, (f"KV cache: {room.tokens:,.0f} tokens ({room.source}), but the summaries do not give the "
                      "prompt and output lengths to weigh the batch against it (plateau import --input-len "
                      "--output-len)")
    return weight, None


def summary_verdict(sweep: Sweep, kv_room: KvRoom | None = None, lengths: Lengths | None = None) -> Verdict:
    """The verdict from level summaries (module docstring); ``kv_room``: the KV cache's size, when known;
    ``lengths``: the prompt and output lengths stated for the run, for levels that do not carry them."""
    n = sweep.plateau.concurrency
    top = sweep.top
    held = _held_batch(top)
    growing = None if held else _growing_batch(top)
    how = "; the decoding batch from tok/s and TPOT" if held or growing else ", so the decoding batch is unknown"
    ev = [f"plateau ~{sweep.plateau.throughput:,.0f} tok/s from C={n} (from level summaries: no per-request "
          f"times{how})"]
    waves = _waves(top, n)
    queued = _queued(top)
    if held is None and growing is not None:
        return _compute(sweep, ev + growing.evidence, growing, _kv_weight(sweep, growing.batch, kv_room, lengths))
    if held is not None:
        ev += held[1]
    if waves:
        ev.append(f"burst mode: wall times are {', '.join(f'{r:.2f}' for r in waves)} x the first "
                  f"({top[0].wall_s:.1f} s) for {', '.join(f'{conc(lv) / n:g}' for lv in top if lv.mode == 'burst')} "
                  f"x its {n} requests: waves of {n}")
    for lv in queued:
        ev.append(f"at C={conc(lv)} only {lv.achieved_concurrency:,.0f} requests were in flight on average "
                  f"(Little's law): the other {conc(lv) - lv.achieved_concurrency:,.0f} waited")
    if not waves and not queued and held is None:
        return Verdict("insufficient_data", "the summaries cannot say why throughput stopped growing", "low", ev,
                       to_separate=["import per-request results (e.g. vLLM's detailed results) or measure with "
                                    "plateau sweep: the decoding batch tells a cap from compute"])
    signs = sum(bool(s) for s in (waves and len(waves) >= 3, queued, held))
    confidence: Confidence = "medium" if signs >= 2 or (waves and len(waves) >= 3) else "low"
    cap = round(held[0]) if held is not None and not waves else n
    weight, unweighed = _kv_weight(sweep, held[0] if held is not None else float(cap), kv_room, lengths)
    if weight is not None and weight.reading == "full":
        return _kv_may_hold(sweep, [*ev, weight.evidence + ": the cache is (nearly) full at the held batch, so it "
                                                           "may be what holds it rather than a cap"], cap)
    if weight is not None:
        ev.append(weight.evidence + (": room for twice the held batch, so the cache is not what holds it"
                                     if weight.reading == "room" else ": the cache may bind too as the batch grows"))
    if weight is not None and weight.reading == "room" and held is not None:
        confidence = "medium"   # the queue before a held batch, and the cache has room: what is left is a cap
    try_cap = (flag(sweep.engine, "cap") or GENERIC_CAP).format(n=2 * cap)
    v = Verdict(
        "admission_cap", f"admission cap at about {cap} running requests (from level summaries)", confidence, ev,
        estimated_cap=cap, suggestions=[f"try {try_cap} (check the KV cache has room for twice the sequences)"])
    if weight is None or weight.reading != "room":
        v.to_separate.append("per-request results or /metrics: a KV cache holding a fixed number of sequences "
                             "queues requests the same way; the running count or the decoding batch tells them apart")
    if unweighed:
        v.to_separate.append(unweighed)
    return v


def _kv_may_hold(sweep: Sweep, ev: list[str], cap: int) -> Verdict:
    """The held batch nearly fills the KV cache: the cache may hold it rather than a cap."""
    return Verdict(
        "kv_capacity", f"KV-cache capacity may hold the batch at about {cap} sequences, rather than an admission "
                       "cap (from level summaries)", "low", ev, estimated_cap=cap, secondary="admission_cap",
        secondary_evidence=[f"a cap at about {cap} running requests queues requests the same way"],
        suggestions=[f"give the KV cache more memory: {flag(sweep.engine, 'kv')}" if flag(sweep.engine, "kv")
                     else GENERIC_KV, "shorter outputs or a smaller max model length free blocks"],
        to_separate=["sweep with shorter outputs: a KV limit lets the batch grow with them, a fixed cap does not",
                     "per-request results or /metrics (KV-cache usage, preemptions, the running count)"])


def _compute(sweep: Sweep, ev: list[str], growing: Growing,
             kv: tuple[KvWeight | None, str | None]) -> Verdict:
    """The batch kept growing and each step slowed with it: the step time binds. A KV cache nearly full at the
    last batch may be slowing the steps as well (preemption, recomputation): then the confidence is low."""
    weight, unweighed = kv
    full = weight is not None and weight.reading == "full"
    if weight is not None:
        ev.append(weight.evidence + (": the cache is (nearly) full at the last batch: preemption may slow the "
                                     "steps as well" if full else ""))
    v = Verdict(
        "compute", "compute / bandwidth saturation: larger batches only make each step slower (from level "
                   "summaries)", "medium" if growing.keeps_up and not full else "low", ev,
        suggestions=["more or faster GPUs, more tensor/expert parallelism, or quantization",
                     f"tune step efficiency: {flag(sweep.engine, 'batch')}" if flag(sweep.engine, "batch") else
                     "tune the engine's batching (CUDA graphs, batched tokens per step)"],
        to_separate=["per-request results or /metrics: a per-request TPOT spread or preemptions would point to the "
                     "KV cache instead"])
    if unweighed:
        v.to_separate.append(unweighed)
    return v
