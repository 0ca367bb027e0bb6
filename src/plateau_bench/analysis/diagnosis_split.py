"""The verdict's evidence from the server's own time split: where the TTFT went when it grew with load.

When the mean TTFT at the widest level is at least ``TTFT_GROWTH`` times the narrowest level's, the line
reads, from that level's split (``analysis.time_split``), ``TTFT 2.2 s = 2.0 s queue + 95 ms prefill +
105 ms outside the engine``: queueing behind a cap or a full cache shows as queue, prompts competing for
step time as prefill, and a slow front end or network as time outside the engine. Nothing is said when
the server published no split or the window held too few requests for its means.

Under preemption the queue reads short while requests wait: vLLM stamps a request's queue time at its first
scheduling and ignores later ones (``scheduled_ts`` is set once, "ignore preemptions", in its v1 stats), so
a preempted request's wait to be scheduled again counts as prefill (before its first token) or decode. The
twin stamps it the same way. The line says so when the server counted preemptions in the window.
"""

from __future__ import annotations

from plateau_bench.analysis.diagnosis_common import Sweep, at

TTFT_GROWTH = 2.0


def _fmt(v: float) -> str:
    """Each part in its own unit: a 2 ms prefill beside a 2.3 s queue reads 2 ms, not 0.0 s."""
    return f"{v / 1000:.1f} s" if abs(v) >= 1000 else f"{v:.0f} ms"


def time_split_evidence(s: Sweep) -> str | None:
    """``at C=64: TTFT 2.2 s = 2.0 s queue + 0.1 s prefill + 0.1 s outside the engine (...)``, or None."""
    first, last = s.levels[0], s.levels[-1]
    split = last.time_split
    base, top = first.ttft_ms.mean, last.ttft_ms.mean
    if split is None or base is None or top is None or base <= 0 or top < TTFT_GROWTH * base:
        return None
    queue, prefill = split.queue_ms, split.prefill_ms
    client, outside = split.client_ttft_mean_ms, split.outside_engine_ms
    if queue is None or prefill is None or queue.mean is None or prefill.mean is None or client is None \
            or outside is None:
        return None
    preempted = last.telemetry.preemptions_delta
    caveat = (f"; {preempted:,.0f} preemptions in the window: the server stamps queue time at a request's first "
              "scheduling, so a preempted request's wait counts as prefill or decode") if preempted else ""
    return (f"at {at(last)}: TTFT {_fmt(client)} = {_fmt(queue.mean)} queue + {_fmt(prefill.mean)} prefill + "
            f"{_fmt(outside)} outside the engine (means, by the server's own histograms; TTFT {_fmt(base)} at "
            f"{at(first)}{caveat})")
