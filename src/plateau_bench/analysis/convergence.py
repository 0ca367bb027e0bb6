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

    def ci_rel(
        self, records: Sequence[RequestRecord], *, workers: int, complete_until_ns: int
    ) -> float | None:
        """Relative CI half-width of the steady throughput so far (None: not enough steady data)."""
        if sum(1 for r in records if not r.warmup) < self.min_turnover * workers:
            return None
        first_token: dict[int, int] = {}
        for r in records:
            if not r.warmup and r.first_token_ns is not None:
                first_token[r.worker] = min(first_token.get(r.worker, r.first_token_ns), r.first_token_ns)
        if len(first_token) < workers:
            return None  # still ramping up
        start = max(first_token.values())
        if complete_until_ns - start < self.min_s * NS:
            return None
        window = Window(start, complete_until_ns)
        times, counts = token_arrays([r for r in records if not r.warmup and r.error is None])
        return batch_means_ci_rel(batch_throughputs(times, counts, window, self.batches))

    def done(self, records: Sequence[RequestRecord], *, elapsed_s: float, workers: int,
             complete_until_ns: int) -> bool:
        if elapsed_s >= self.max_s:
            return True
        ci = self.ci_rel(records, workers=workers, complete_until_ns=complete_until_ns)
        return ci is not None and ci <= self.precision
