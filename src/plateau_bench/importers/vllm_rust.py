"""What vLLM's Rust benchmark client (``vllm-bench``, in vLLM's ``rust/src/bench``; before that the
standalone vllm-project/vllm-bench) adds to the ``vllm bench serve`` result keys it otherwise shares
(``output/json.rs``), and what newer ``vllm bench serve`` files carry beside the level's figures.

* ``steady_state``: null, or the window during which at least ``threshold`` x ``--max-concurrency``
  requests were in flight (closed loop only): ``window`` {``start_s``, ``end_s``, ``duration_s``,
  ``target_concurrency``, ``threshold``, ``threshold_abs``, ``observed_peak``,
  ``requests_started_in_window``, ``requests_completed_in_window``, ``requests_total``, ``warning``},
  and over it ``request_throughput``, ``input_throughput``, ``output_throughput``,
  ``total_token_throughput``, ``mean_/median_ttft_ms``, ``percentiles_ttft_ms`` ([[p, ms], ...]),
  ``mean_/median_/p90_/p99_tpot_ms``. Said in the level's notes (the level stays the whole run).
* ``failed_requests``: one object per failed request (``index``, ``error``, ...), written whenever some
  failed, with or without ``--save-detailed``: their error classes when the ``errors`` list is absent.
* ``--multi-turn`` writes another document (``"mode": "multi_turn"``): ``num_conversations``,
  ``turns_per_conversation``, ``multi_turn_concurrency`` (conversations at once), ``inter_turn_delay_ms``,
  ``conversations_completed``/``_failed``, ``avg_turns_completed``, ``avg_conversation_duration_ms``, the
  run's ``completed``/``failed`` turns, token totals, throughputs and ``{mean,median,std,pNN}_{ttft,tpot,
  itl,e2el}_ms``, and ``per_turn_metrics`` (per ``turn_index``: ``num_samples``, ``completed``,
  ``failed``, ``total_input_tokens``, ``total_output_tokens``, throughputs, the same statistics). No
  per-request lists: it becomes a summary level at C = the conversations at once, with its turns.
* goodput (``request_goodput``, non-null with ``--goodput``), ``vllm bench serve``'s client-side queueing
  under ``--max-concurrency`` (``*_client_queue_time_ms``) and ramp-up (``ramp_up_*``): notes and fields.
"""

from __future__ import annotations

from typing import Any

import msgspec

from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    error_class,
    integer,
    level_label,
    number,
    summary_level,
)
from plateau_bench.importers.lists import ms_stats
from plateau_bench.result import TurnMetrics

MARKS = ("steady_state", "failed_requests", "num_conversations", "per_turn_metrics", "turns_per_conversation",
         "conversations_completed", "multi_turn_concurrency", "max_model_len")


def is_multi_turn(o: dict[str, Any]) -> bool:
    return o.get("mode") == "multi_turn" or "per_turn_metrics" in o


def failed_errors(o: dict[str, Any]) -> dict[str, int]:
    """Error classes of ``failed_requests`` (the Rust client's failure log)."""
    out: dict[str, int] = {}
    failures = o.get("failed_requests")
    if isinstance(failures, list):
        for f in failures:
            cls = str(error_class(str(f.get("error") or "") if isinstance(f, dict) else str(f)))
            out[cls] = out.get(cls, 0) + 1
    return out


def notes(o: dict[str, Any], where: Where) -> list[str]:
    """What the run says beside its level's figures (module docstring)."""
    out: list[str] = []
    steady = o.get("steady_state")
    if isinstance(steady, dict) and isinstance(steady.get("window"), dict):
        out.append(_steady_note(steady, steady["window"], where))
    queued = ms_stats(o, "client_queue_time", where)
    if queued is not None and queued.mean is not None:
        out.append(f"client-side queueing (waiting for a --max-concurrency slot before the send): mean "
                   f"{queued.mean:,.1f} ms" + (f", p99 {queued.p99:,.1f} ms" if queued.p99 is not None else ""))
    if o.get("ramp_up_strategy"):
        out.append(f"request rate ramped up ({o['ramp_up_strategy']}) from {o.get('ramp_up_start_rps')} to "
                   f"{o.get('ramp_up_end_rps')} req/s: the level's rate is not one figure")
    return out


def _steady_note(steady: dict[str, Any], window: dict[str, Any], where: Where) -> str:
    duration = number(window, "duration_s", where) or 0.0
    start = number(window, "start_s", where) or 0.0
    parts = [f"steady-state window (vllm-bench): {duration:.2f} s from {start:.2f} s with at least "
             f"{integer(window, 'threshold_abs', where)} of {integer(window, 'target_concurrency', where)} in "
             f"flight (peak {integer(window, 'observed_peak', where)}), "
             f"{integer(window, 'requests_completed_in_window', where)} requests ended in it"]
    figures = (("output_throughput", "{:,.0f} output tok/s"), ("request_throughput", "{:.2f} req/s"),
               ("median_ttft_ms", "TTFT p50 {:,.1f} ms"), ("median_tpot_ms", "TPOT p50 {:,.2f} ms"))
    for key, fmt in figures:
        value = number(steady, key, where)
        if value is not None:
            parts.append(fmt.format(value))
    warning = window.get("warning")
    return ", ".join(parts) + (f" (the client warns: {warning})" if warning else "")


def multi_turn_level(o: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    """A ``--multi-turn`` run as one summary level with its turns (module docstring)."""
    conversations = integer(o, "multi_turn_concurrency", where) or opts.concurrency
    if conversations is None:
        raise where.missing("multi_turn_concurrency", "or give --concurrency")
    s = Summary(level_label("burst", conversations, None), "burst", concurrency=conversations,
                completed=integer(o, "completed", where, required=True), failed=integer(o, "failed", where),
                errors=failed_errors(o), duration_s=number(o, "duration", where, required=True))
    s.output_tokens, s.input_tokens = number(o, "total_output_tokens", where), number(o, "total_input_tokens", where)
    s.output_throughput = number(o, "output_throughput", where)
    s.input_throughput = number(o, "input_throughput", where)
    s.total_throughput = number(o, "total_token_throughput", where)
    s.request_throughput = number(o, "request_throughput", where)
    s.ttft, s.tpot = ms_stats(o, "ttft", where), ms_stats(o, "tpot", where)
    s.itl, s.e2e = ms_stats(o, "itl", where), ms_stats(o, "e2el", where)
    s.notes.append(
        f"multi-turn (vllm-bench --multi-turn): {integer(o, 'num_conversations', where)} conversations of "
        f"{integer(o, 'turns_per_conversation', where)} turns, {conversations} at once (each with one turn in "
        f"flight), {number(o, 'inter_turn_delay_ms', where) or 0:g} ms between turns; "
        f"{integer(o, 'conversations_completed', where)} conversations completed, "
        f"{integer(o, 'conversations_failed', where) or 0} failed")
    lv = summary_level(s, f"vllm-bench multi-turn: {where}")
    lv.level.turns = turns(o, where)
    return lv


def turns(o: dict[str, Any], where: Where) -> list[TurnMetrics]:
    """``per_turn_metrics`` as the level's turns (turn 0: each conversation's first message)."""
    raw = o.get("per_turn_metrics")
    if not isinstance(raw, list):
        return []
    out = []
    for i, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise where.fail(f"field 'per_turn_metrics' entry {i} is not an object")
        done = integer(turn, "completed", where) or 0
        prompt = number(turn, "total_input_tokens", where)
        stats = {key: msgspec.structs.replace(v, count=done) for key, v in
                 (("ttft_ms", ms_stats(turn, "ttft", where)), ("e2e_ms", ms_stats(turn, "e2el", where)))
                 if v is not None}
        out.append(TurnMetrics(turn=integer(turn, "turn_index", where) or i, requests=done,
                               prompt_tokens_mean=prompt / done if prompt is not None and done else 0.0, **stats))
    return out
