"""When a warm level has been measured long enough, and over which window.

A warm level (``sweep.loop``: the server is never emptied between steady levels) starts with the
requests of the level before it still streaming. Its concurrency changes at the level's start: new
workers join (spread over a short stagger, so they do not start in lock step) or workers retire when
their current request ends. The window cannot open before the new concurrency is in flight
(``settled_ns``), and after that the token rate still moves while the new requests go through their
first prefill and the batch settles.

Where the rate has settled is read from the data, not assumed: the **MSER-5 rule** (White, 1997;
"Marginal Standard Error Rule", the usual truncation rule for a simulation's warm-up) buckets the
output-token arrivals since ``settled_ns``, groups them by five, and drops the leading groups that
minimise the standard error of the mean of the rest (at most half of them). The window is what is
left, up to now: tokens are counted by their arrival time, those of requests still in flight
included (their partial records), so the window may be shorter than one request.

The estimate and its interval are the same batch means as a cold level's (``convergence``): ten
sub-windows, or whole waves where first tokens come in waves (``metrics.steady_batches``), a server
that admits in waves; or, where the window holds 3 to 10 periods, whole periods back from its end
(``cycle_edges``): like requests in a closed loop keep their phases, so the rate repeats with the time a
request spends in the batch (``measured_cycle_s``).
The level is done when the interval's half-width is within the precision after
at least ``min_s`` of window, or at ``max_s`` since the level started, whatever the interval. While
the adaptive search grows, a level need only show that it beats its doubling partner by more than the
plateau gain (``clear_above``, ``sweep.loop``), or that it does not (``clear_below``): it is done as
soon as its interval lies wholly on one side. A level whose time runs out before its window reached
``min_s`` is measured over the whole level instead (``level_run.WHOLE_LEVEL_NOTE``): a window of a few
steps, opened just before the limit, read one level at twice its rate with a 137 % interval.

A level of the doubling chain past a cap has nothing to show but a queue: once the server's own gauges,
scraped since its concurrency was reached, show the running count held at the level it doubled, the
engine's queue holding most of the rest and the KV cache not full (``analysis.plateau.queued_behind``), it
ends once its window holds ``min_s`` and one period of that batch (the time a request spent in it at the
level below), however long its queue makes a request's cycle, and its rate's interval is within twice the
precision (``QUEUED_PRECISION``): the batch, and so the rate, is the one measured below, read again over
that period. An engine whose rate swings within the period (a prefill-first one admitting in rounds) reads
no such interval there and goes on as any level.

Stretching (``bound_s`` above ``max_s``, ``--max-level-time auto``): a level whose window has not reached
``min_s`` by ``max_s`` (joins spread over a request cycle longer than the level, as on Run B's engine at
its cap) goes on while tokens keep arriving (one within the last ``STRETCH_ALIVE`` of ``max_s``), until it is
precise or its window holds ``min_s`` and ``STRETCH_WINDOW_CYCLES`` request cycles, or ``bound_s``; it then
ends as above.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from plateau_bench.analysis.convergence import STRETCH_ALIVE, STRETCH_WINDOW_CYCLES
from plateau_bench.analysis.metrics import (
    Window,
    counts_between,
    phase_edges,
    sorted_first_tokens,
    sorted_tokens,
    steady_batches,
)
from plateau_bench.analysis.stats import FloatArray, batch_means_ci_rel
from plateau_bench.level_run import WarmCheck
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

MSER_GROUP = 5            # buckets per group (MSER-5)
QUEUED_PRECISION = 2.0    # a level ended on the gauges: its interval within this many times the precision
MSER_BUCKETS = 200        # about this many buckets over the span read (at least ``MIN_BUCKET_S`` each)
MIN_BUCKET_S = 0.05


def mser_start(times: FloatArray, cumulative: FloatArray, start_ns: int, end_ns: int) -> int:
    """Where the token rate in ``[start_ns, end_ns]`` has settled (MSER-5, see the module docstring)."""
    span_s = (end_ns - start_ns) / NS
    if span_s <= 0:
        return start_ns
    bucket_s = max(MIN_BUCKET_S, span_s / MSER_BUCKETS)
    groups = int(span_s / (bucket_s * MSER_GROUP))
    if groups < 4:
        return start_ns
    group_ns = bucket_s * MSER_GROUP * NS
    edges = start_ns + np.arange(groups + 1, dtype=np.float64) * group_ns
    y = counts_between(times, cumulative, edges)
    best_d, best = 0, float("inf")
    for d in range(groups // 2 + 1):
        rest = y[d:]
        score = float(((rest - rest.mean()) ** 2).sum()) / rest.size ** 2
        if score < best:
            best_d, best = d, score
    return int(start_ns + best_d * group_ns)


def measured_cycle_s(streams: Sequence[RequestRecord], since_ns: int, now_ns: int, workers: int) -> float | None:
    """How long a request stays in the server's batch, from the requests sent since ``since_ns`` and
    finished before ``now_ns``: the median time from first token to end. The batch's make-up repeats with
    it, below a cap and above one (where requests also wait in the queue, which does not change the
    batch). Its prefill is left out: a batch a little shorter than the period only widens the interval.
    None before a turnover's worth (``workers``) have finished (fewer would favour the short)."""
    spans = sorted(r.end_ns - r.first_token_ns for r in streams
                   if r.sent_ns >= since_ns and r.end_ns < now_ns and r.first_token_ns is not None)
    return spans[len(spans) // 2] / NS if spans and len(spans) >= max(3, workers) else None


def cycle_edges(w: Window, cycle_s: float, batches: int) -> FloatArray | None:
    """Batch edges one period (``measured_cycle_s``) apart, back from the window's end, where the window
    holds 3 to ``batches`` of them.

    In a closed loop of like requests each worker keeps its phase, so the token rate repeats with the
    request cycle (a prefill-first engine's most of all); sub-windows shorter than a cycle differ by that
    pattern, not by noise, and their spread overstates the error of a mean over whole cycles. Batch
    means are sound when each batch spans the correlation time: here one cycle. From ``batches`` cycles
    on, the equal sub-windows already do."""
    if cycle_s <= 0:
        return None
    n = int(w.length_s / cycle_s)
    if n < 3 or n >= batches:
        return None
    return w.end_ns - np.arange(n, -1, -1, dtype=np.float64) * cycle_s * NS


def warm_check_records(streams: Sequence[RequestRecord], *, settled_ns: int | None, now_ns: int, workers: int,
                       cycle_s: float = 0.0, **kw: object) -> WarmCheck:
    """``warm_check`` over the successful requests finished in the level and those still in flight (what
    they streamed until now); ``cycle_s``: the request cycle predicted for the level, the period of the
    batches until the measured one (``measured_cycle_s``) is known."""
    times, cumulative = sorted_tokens(streams)
    if settled_ns is not None:
        cycle_s = measured_cycle_s(streams, settled_ns, now_ns, workers) or cycle_s
    return warm_check(times, cumulative, sorted_first_tokens(streams), settled_ns=settled_ns, now_ns=now_ns,
                      workers=workers, cycle_s=cycle_s, **kw)  # type: ignore[arg-type]


def warm_check(times: FloatArray, cumulative: FloatArray, first_tokens: npt.NDArray[np.int64], *,
               level_start_ns: int, settled_ns: int | None, now_ns: int, workers: int, precision: float,
               min_s: float, max_s: float, bound_s: float | None = None, clear_above: float | None = None,
               clear_below: float | None = None, batches: int = 10, cycle_s: float = 0.0,
               queued: bool = False, queued_min_s: float = 0.0) -> WarmCheck:
    """The warm level's window and estimate at ``now_ns`` (``times``/``cumulative``: ``metrics.sorted_tokens``
    of the successful requests finished in the level and of those in flight, their tokens until now);
    ``queued``: the server's gauges since ``settled_ns`` show the level only queued behind the batch of the
    level it doubled (``analysis.plateau.queued_behind``), and it ends once its window holds ``queued_min_s``."""
    elapsed_s = (now_ns - level_start_ns) / NS
    hard = elapsed_s >= max(max_s, bound_s or 0.0)
    serving = bool(times.size) and (now_ns - float(times[-1])) / NS <= STRETCH_ALIVE * max_s
    stretching = bound_s is not None and bound_s > max_s and serving
    if settled_ns is None or now_ns <= settled_ns:
        return WarmCheck(window_ns=None, tok_s=None, ci_rel=None, done=hard or (elapsed_s >= max_s and not stretching))
    start = mser_start(times, cumulative, settled_ns, now_ns)
    window = Window(start, now_ns)
    long_enough = window.length_s >= max(min_s, STRETCH_WINDOW_CYCLES * cycle_s if stretching else 0.0)
    timed_out = hard or (elapsed_s >= max_s and (long_enough or not stretching))
    whole_level = timed_out and window.length_s < min_s
    if whole_level:   # a window of a few steps could read anything: the whole level, the change included
        window = Window(level_start_ns, now_ns)
    if window.length_s <= 0:
        return WarmCheck(window_ns=None, tok_s=None, ci_rel=None, done=timed_out)
    waves = phase_edges(first_tokens, window, workers, batches) is not None
    cycles = None if waves else cycle_edges(window, cycle_s, batches)
    if cycles is not None:   # whole cycles: the window starts on the earliest cycle edge
        window = Window(int(cycles[0]), now_ns)
        rates = counts_between(times, cumulative, cycles) / cycle_s
        ci = batch_means_ci_rel([float(r) for r in rates])
    else:
        ci = batch_means_ci_rel(steady_batches(times, cumulative, window, first_tokens, workers, batches))
    edges = np.array([window.start_ns, now_ns], dtype=np.float64)
    tok_s = float(counts_between(times, cumulative, edges)[0]) / window.length_s
    precise = ci is not None and window.length_s >= min_s and (
        ci <= precision or (clear_above is not None and tok_s * (1 - ci) > clear_above)
        or (clear_below is not None and tok_s * (1 + ci) < clear_below))
    held = (queued and not (timed_out or precise or whole_level) and window.length_s >= queued_min_s
            and ci is not None and ci <= QUEUED_PRECISION * precision)
    return WarmCheck(window_ns=(window.start_ns, now_ns), tok_s=tok_s, ci_rel=ci, done=timed_out or precise or held,
                     waves=waves, whole_level=whole_level, queued=held)

