"""When a steady-state level has been measured long enough.

A closed-loop level's throughput is estimated over its steady window (see ``metrics``). Successive
output-token counts in short sub-windows are autocorrelated, so a naive standard error is too
small. The method of **batch means** (Law & Kelton, *Simulation Modeling and Analysis*, ch. 9)
splits the window into ``batches`` equal sub-windows, treats their throughputs as roughly
independent, and takes the Student-t 95 % confidence interval of their mean. A level is done
when that interval's half-width is within ``precision`` of the mean after at least ``min_s`` of
steady window, or when ``max_s`` of wall time has passed regardless.

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

from collections.abc import Sequence
from dataclasses import dataclass

from plateau_bench.analysis.metrics import Window, batch_throughputs, token_arrays
from plateau_bench.analysis.stats import batch_means_ci_rel
from plateau_bench.records import RequestRecord
from plateau_bench.units import NS


@dataclass(frozen=True)
class PrecisionRule:
    precision: float = 0.02
    min_s: float = 5.0
    max_s: float = 60.0
    batches: int = 10
    min_turnover: float = 2.0
    clear_above: float | None = None   # output tok/s the level must clearly beat for the search to grow

    def ci_rel(
        self, records: Sequence[RequestRecord], *, workers: int, complete_until_ns: int
    ) -> float | None:
        """Relative CI half-width of the steady throughput so far (None: not enough steady data)."""
        estimate = self._estimate(records, workers, complete_until_ns, self.min_turnover)
        return estimate.ci_rel if estimate is not None else None

    def _estimate(self, records: Sequence[RequestRecord], workers: int, complete_until_ns: int,
                  turnover: float) -> _Estimate | None:
        """The steady throughput so far and its CI, once ``turnover`` requests per worker finished."""
        if sum(1 for r in records if not r.warmup) < turnover * workers:
            return None
        first_token: dict[int, int] = {}
        ttft_max = 0
        for r in records:
            if not r.warmup and r.first_token_ns is not None:
                first_token[r.worker] = min(first_token.get(r.worker, r.first_token_ns), r.first_token_ns)
                ttft_max = max(ttft_max, r.first_token_ns - r.sent_ns)
        if len(first_token) < workers:
            return None  # still ramping up
        start = max(first_token.values())
        if complete_until_ns - start < self.min_s * NS:
            return None
        window = Window(start, complete_until_ns)
        times, counts = token_arrays([r for r in records if not r.warmup and r.error is None])
        batches = batch_throughputs(times, counts, window, self.batches)
        ci = batch_means_ci_rel(batches)
        if ci is None:
            return None
        return _Estimate(sum(batches) / len(batches), ci, window.length_s, ttft_max / NS)

    def done(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
             complete_until_ns: int) -> bool:
        if elapsed_s >= self.max_s:
            return True
        ci = self.ci_rel(records, workers=workers, complete_until_ns=complete_until_ns)
        return (ci is not None and ci <= self.precision) or self.clearly_above(
            records, workers=workers, complete_until_ns=complete_until_ns)

    def clearly_above(self, records: Sequence[RequestRecord], *, workers: int, complete_until_ns: int) -> bool:
        """Whether one turnover already shows the level beating ``clear_above`` beyond doubt (docstring)."""
        if self.clear_above is None:
            return False
        e = self._estimate(records, workers, complete_until_ns, 1.0)
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
