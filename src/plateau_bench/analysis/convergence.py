"""When a steady-state level has been measured long enough.

A closed-loop level's throughput is estimated over its steady window (see ``metrics``). Successive
output-token counts in short sub-windows are autocorrelated, so a naive standard error is too
small. The method of **batch means** (Law & Kelton, *Simulation Modeling and Analysis*, ch. 9)
splits the window into about ``batches`` sub-windows, treats their throughputs as roughly
independent, and takes the Student-t 95 % confidence interval of their mean. The sub-windows are
equal where requests are spread over their cycle and close on whole waves where they start in
waves (lock step: ``metrics.steady_batches``), so a periodic phase pattern is not read as noise. A level is done
when that interval's half-width is within ``precision`` of the mean after at least ``min_s`` of
steady window, or when ``max_s`` of wall time has passed regardless.

**Stretching** (``stretch_s``, ``--max-level-time auto``): requests longer than the level's time leave no
steady window by ``max_s`` (Run B's engine: a cycle of 40 s and more at its cap, so a one-minute level
reads the decode phase of its first wave alone, +80 % above what the load settles to). Such a level
goes on past ``max_s``, up to ``stretch_s``, while it has no estimate yet and the server shows it is
serving: a request ended successfully (or, before any did, the level started) within the last
``STRETCH_ALIVE`` of ``max_s`` or ``STRETCH_CYCLES`` request cycles, whichever is longer. The cycle is the
mean time of the requests finished so far, or before any finished, ``expect_cycle_s`` (the sweep's
prediction from the level below: requests that start in lock step end in waves a cycle apart). It ends
as any level does once precise, and otherwise once its window holds ``STRETCH_WINDOW_CYCLES`` cycles (the
unit a long-cycle level's time is counted in, as a minute holds many short cycles; three whole waves settle
a lock-step level). A level whose window already holds them at ``max_s`` stops there as before, and one
whose server has stopped answering is not held.

A closed loop starts synchronised (every worker sends at once), and the first wave of requests can
look steady while it is not: the mix of prefills and decodes only settles once requests turn over.
So the rule also waits until the level has finished ``min_turnover`` requests per worker.

While a level runs only finished requests have records, so the window must end where the token
count is already complete: at the send time of the oldest request still in flight (every token
before it belongs to a finished request).

**Where the answer cannot change** (``clear_above``): while the adaptive search grows, a level is
measured to decide one thing, whether it gains more than ``plateau_gain`` over its doubling partner.
After a single turnover the window may hold the decode phases of a lock-step start and none of the
prefill that the next turnover brings (the error the second turnover guards against). So the estimate
is charged one more prefill phase, the longest time to first token seen so far, and its confidence
half-width, which must be within ``precision`` as for any level (so the noise the flatness test
allows the next doubling is no wider). When even that pessimistic figure beats the bar, a second
turnover cannot change the decision, and the level ends after one. Flat doublings and refinements
never stop this way. The figures of a level that did still span about two cycles (the window runs to
the first worker's last request, and the requests sent at the stop drain), against three otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from plateau_bench.analysis.metrics import (
    Window,
    counts_between,
    phase_matched_end,
    sorted_first_tokens,
    sorted_tokens,
    steady_batches,
)
from plateau_bench.analysis.stats import FloatArray, batch_means_ci_rel
from plateau_bench.level_run import GAUGE_SCRAPES, WarmCheck
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS

STRETCH_ALIVE = 0.5    # a stretching level's server ended a request within this share of max_s ...
STRETCH_CYCLES = 1.5   # ... or of this many request cycles
STRETCH_WINDOW_CYCLES = 3.0   # a stretching level with a window ends once it holds this many cycles


@dataclass(frozen=True)
class Progress:
    """What the rule reads of a running level: a summary of its measured requests finished so far.

    Built from the records at each check (``of``), or for every prefix of a finished level at once
    (``ReplayIndex``, the twin's way of stopping a level it has already simulated).
    """

    finished: int                 # measured (not warm-up) requests finished
    last_ok_end_ns: int           # when the latest successful one ended (0: none yet)
    mean_ok_s: float              # the successful ones' mean time from send to end (0: none yet)
    workers_started: int          # workers that have received a first token
    steady_start_ns: int          # the last of those workers' first tokens: where the window opens
    ttft_max_ns: int
    token_times_ns: FloatArray    # output-token arrivals of the successful ones, sorted
    token_cumulative: FloatArray  # tokens before each arrival (leading 0, one longer)
    first_tokens_ns: npt.NDArray[np.int64]   # every first token, sorted (where the window ends)

    @classmethod
    def of(cls, records: Sequence[RequestRecord]) -> Progress:
        measured = [r for r in records if not r.warmup]
        first_token: dict[int, int] = {}
        ttft_max = 0
        for r in measured:
            if r.first_token_ns is not None:
                first_token[r.worker] = min(first_token.get(r.worker, r.first_token_ns), r.first_token_ns)
                ttft_max = max(ttft_max, r.first_token_ns - r.sent_ns)
        ok = [r for r in measured if r.error is None]
        times, cumulative = sorted_tokens(ok)
        mean_ok_s = sum(r.end_ns - r.sent_ns for r in ok) / len(ok) / NS if ok else 0.0
        return cls(len(measured), max((r.end_ns for r in ok), default=0), mean_ok_s, len(first_token),
                   max(first_token.values(), default=0), ttft_max, times, cumulative, sorted_first_tokens(measured))


class ReplayIndex:
    """``Progress`` after each of a finished level's requests in order of end time, in O(1) a check.

    The token arrays are every successful request's, not only those finished at the check: the rule
    reads them inside its window, which ends where the token count is already complete (no request
    still in flight sent before it, and none sent after it has a token before it), so the two agree.
    """

    def __init__(self, by_end: Sequence[RequestRecord]) -> None:
        n = len(by_end)
        self._finished = np.cumsum([not r.warmup for r in by_end]) if n else np.zeros(0, dtype=np.int64)
        self._started = np.zeros(n, dtype=np.int64)
        self._start_ns = np.zeros(n, dtype=np.int64)
        self._ttft_max = np.zeros(n, dtype=np.int64)
        self._last_ok_end = np.zeros(n, dtype=np.int64)
        self._mean_ok = np.zeros(n, dtype=np.float64)
        first_token: dict[int, int] = {}
        latest = ttft_max = last_ok_end = ok_n = ok_ns = 0
        for i, r in enumerate(by_end):
            if not r.warmup and r.error is None:
                last_ok_end, ok_n, ok_ns = r.end_ns, ok_n + 1, ok_ns + r.end_ns - r.sent_ns
            self._mean_ok[i] = ok_ns / ok_n / NS if ok_n else 0.0
            if not r.warmup and r.first_token_ns is not None:
                ttft_max = max(ttft_max, r.first_token_ns - r.sent_ns)
                before = first_token.get(r.worker)
                if before is None or r.first_token_ns < before:
                    first_token[r.worker] = r.first_token_ns
                    # An earlier first token for a worker already seen can lower the latest one.
                    latest = max(latest, r.first_token_ns) if before is None else max(first_token.values())
            self._started[i], self._start_ns[i], self._ttft_max[i] = len(first_token), latest, ttft_max
            self._last_ok_end[i] = last_ok_end
        self._times, self._cumulative = sorted_tokens([r for r in by_end if not r.warmup and r.error is None])
        self._first_tokens = sorted_first_tokens([r for r in by_end if not r.warmup])

    def after(self, n_done: int) -> Progress:
        """Progress once the first ``n_done`` requests (by end time) have finished."""
        if n_done == 0:
            return Progress(0, 0, 0.0, 0, 0, 0, self._times[:0], self._cumulative[:1], self._first_tokens[:0])
        i = n_done - 1
        return Progress(int(self._finished[i]), int(self._last_ok_end[i]), float(self._mean_ok[i]),
                        int(self._started[i]), int(self._start_ns[i]), int(self._ttft_max[i]), self._times,
                        self._cumulative, self._first_tokens)


@dataclass(frozen=True)
class PrecisionRule:
    precision: float = 0.02
    min_s: float = 5.0
    max_s: float = 60.0
    batches: int = 10
    min_turnover: float = 2.0
    clear_above: float | None = None   # output tok/s the level must clearly beat for the search to grow
    clear_below: float | None = None   # warm levels: below this, certainly flat (``analysis.warm``)
    drain: bool = True                 # --no-drain: cancel the requests in flight at a precise stop
    stretch_s: float | None = None     # --max-level-time auto: a level with no window yet goes on up to this
    expect_cycle_s: float = 0.0        # the request cycle the sweep expects at this level (0: unknown)
    held_running: float | None = None  # warm doubling levels: the server's most running at the level doubled
    held_cycle_s: float = 0.0          # ... and how long a request stayed in its batch there

    @property
    def bound_s(self) -> float:
        """The level's hard limit: ``max_s``, or ``stretch_s`` for a level that may stretch (docstring)."""
        return max(self.max_s, self.stretch_s or 0.0)

    def ci_rel(self, records: Sequence[RequestRecord], *, workers: int, complete_until_ns: int) -> float | None:
        """Relative CI half-width of the steady throughput so far (None: not enough steady data)."""
        return self._ci_rel(Progress.of(records), workers, complete_until_ns)

    def done(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
             complete_until_ns: int) -> bool:
        return self._done(Progress.of(records), elapsed_s, workers, complete_until_ns)

    def check(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
              complete_until_ns: int) -> tuple[float | None, bool]:
        """``ci_rel`` and ``done`` together, from one pass over the records (the live monitor's tick)."""
        progress = Progress.of(records)
        return (self._ci_rel(progress, workers, complete_until_ns),
                self._done(progress, elapsed_s, workers, complete_until_ns))

    def first_stop_s(self, records: Sequence[RequestRecord], *, workers: int, check_s: float) -> float | None:
        """The first check time (s) at which the rule would have stopped this finished level, else None."""
        stop = self.first_stop(records, workers=workers, check_s=check_s)
        return stop[0] if stop is not None else None

    def first_stop(self, records: Sequence[RequestRecord], *, workers: int,
                   check_s: float) -> tuple[float, bool] | None:
        """The first check time (s) at which the rule would have stopped this finished level, and whether
        it stopped on its confidence interval (``precise``, see ``may_cancel_in_flight``); None: it never stopped.

        Checks come every ``check_s``, or every 2 % of the elapsed time once that is longer (a 2 %
        later stop is within the rule's own precision).
        """
        if not records:
            return None
        by_end = sorted(records, key=lambda r: r.end_ns)
        ends = np.array([r.end_ns for r in by_end], dtype=np.int64)
        sent = np.array([r.sent_ns for r in by_end], dtype=np.int64)
        index = ReplayIndex(by_end)
        t = check_s * NS
        while t <= ends[-1]:
            n_done = int(np.searchsorted(ends, t, side="right"))
            pending = sent[n_done:]
            started = pending[pending <= t]
            complete = int(started.min()) if started.size else int(t)
            progress = index.after(n_done)
            if self._done(progress, t / NS, workers, complete):
                ci = self._ci_rel(progress, workers, complete)
                return t / NS, self.may_cancel_in_flight(ci, t / NS)
            t += max(check_s * NS, 0.02 * t)
        return None

    def warm_check(self, streams: Sequence[RequestRecord], *, level_start_ns: int, settled_ns: int | None,
                   now_ns: int, workers: int, min_window_s: float, cycle_s: float = 0.0,
                   gauges: Mapping[str, float] | None = None) -> WarmCheck:
        """A warm level's check (``analysis.warm``) with this rule's precision, limits and bars; ``gauges``:
        the server's since the level's concurrency was reached (``telemetry.summary`` values)."""
        from plateau_bench.analysis.plateau import queued_behind
        from plateau_bench.analysis.warm import warm_check_records

        queued = bool(gauges) and self.held_running is not None and \
            queued_behind(gauges or {}, self.held_running, GAUGE_SCRAPES, workers)
        return warm_check_records(streams, level_start_ns=level_start_ns, settled_ns=settled_ns, now_ns=now_ns,
                                  workers=workers, cycle_s=cycle_s, precision=self.precision,
                                  min_s=max(self.min_s, min_window_s),
                                  max_s=self.max_s, bound_s=self.bound_s, clear_above=self.clear_above,
                                  clear_below=self.clear_below, batches=self.batches, queued=queued,
                                  queued_min_s=max(self.min_s, self.held_cycle_s))

    def may_cancel_in_flight(self, ci_rel: float | None, elapsed_s: float) -> bool:
        """Whether the requests in flight when a closed-loop level stops now may be cancelled, not waited
        for: only without ``drain`` (``--no-drain``), and when it stops on its confidence interval, not on
        its time limit nor after one turnover on ``clear_above``. Its window then ends, on whole cycles,
        before the oldest request in flight was sent, so none of their tokens is in it: waiting for them
        (a request's length of benchmark time) changes no throughput. After one turnover the window
        would hold the first wave's decode phase alone, and only the requests sent at the stop bring the
        prefill phase that balances it, so those levels drain. Draining is the default all the same: the
        drained window runs up to a cycle longer, and the latency statistics need it (requests sent in
        the first cycle after a synchronised start queue behind each other: on a twin sweep with spread
        lengths the TTFT p50 at C=16 read 39 ms from a cancelled level's window, 19 ms drained)."""
        return not self.drain and ci_rel is not None and ci_rel <= self.precision and elapsed_s < self.bound_s

    def _ci_rel(self, progress: Progress, workers: int, complete_until_ns: int) -> float | None:
        estimate = self._estimate(progress, workers, complete_until_ns, self.min_turnover)
        return estimate.ci_rel if estimate is not None else None

    def _estimate(self, progress: Progress, workers: int, complete_until_ns: int,
                  turnover: float) -> _Estimate | None:
        """The steady throughput so far and its CI, once ``turnover`` requests per worker finished."""
        if progress.finished < turnover * workers:
            return None
        if progress.workers_started < workers:
            return None  # still ramping up
        start = progress.steady_start_ns
        end = phase_matched_end(progress.first_tokens_ns, start, complete_until_ns)
        if end - start < self.min_s * NS:
            return None
        window = Window(start, end)
        times, cumulative = progress.token_times_ns, progress.token_cumulative
        batches = steady_batches(times, cumulative, window, progress.first_tokens_ns, workers, self.batches)
        ci = batch_means_ci_rel(batches)
        if ci is None:
            return None
        edges = np.array([start, end], dtype=np.float64)
        tok_s = float(counts_between(times, cumulative, edges)[0]) / window.length_s
        return _Estimate(tok_s, ci, window.length_s, progress.ttft_max_ns / NS)

    def _done(self, progress: Progress, elapsed_s: float, workers: int, complete_until_ns: int) -> bool:
        if elapsed_s >= self.bound_s:
            return True
        e = self._estimate(progress, workers, complete_until_ns, self.min_turnover)
        if elapsed_s >= self.max_s and not self._stretches(progress, elapsed_s, e):
            return True
        return (e is not None and e.ci_rel <= self.precision) or self._clearly_above(progress, workers,
                                                                                     complete_until_ns)

    def _stretches(self, progress: Progress, elapsed_s: float, e: _Estimate | None) -> bool:
        """Whether a level past ``max_s`` goes on: it may stretch, its server answers, and its window (if it
        has one) holds fewer than ``STRETCH_WINDOW_CYCLES`` request cycles (docstring)."""
        if not self._serving(progress, elapsed_s):
            return False
        return e is None or e.window_s < STRETCH_WINDOW_CYCLES * progress.mean_ok_s

    def _serving(self, progress: Progress, elapsed_s: float) -> bool:
        """Whether a level past ``max_s`` may stretch: allowed to, and a request ended well lately (docstring);
        before any ended, the level's start counts as the last sign of life."""
        if self.stretch_s is None:
            return False
        cycle_s = progress.mean_ok_s or self.expect_cycle_s
        return elapsed_s - progress.last_ok_end_ns / NS <= max(STRETCH_ALIVE * self.max_s, STRETCH_CYCLES * cycle_s)

    def _clearly_above(self, progress: Progress, workers: int, complete_until_ns: int) -> bool:
        """Whether one turnover already shows the level beating ``clear_above`` beyond doubt (docstring)."""
        if self.clear_above is None:
            return False
        e = self._estimate(progress, workers, complete_until_ns, 1.0)
        if e is None or e.ci_rel > self.precision:
            return False
        # The window so far may hold decode phases only: charge it one more prefill phase (the
        # longest time to first token seen), the part of a cycle a second turnover would add.
        worst = e.tok_s * (1 - e.ci_rel) * e.window_s / (e.window_s + e.ttft_max_s)
        return worst > self.clear_above


@dataclass(frozen=True)
class _Estimate:
    tok_s: float
    ci_rel: float
    window_s: float
    ttft_max_s: float
