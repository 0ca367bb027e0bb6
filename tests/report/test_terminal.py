"""The sweep's one-sentence summary claims figures only from levels that count."""

from __future__ import annotations

from plateau_bench.report.terminal import summary_sentence

from support.builders import level_result


def test_the_best_figure_without_a_plateau_comes_from_levels_that_count() -> None:
    """A level that mostly failed (a dead worker, 83 % failed) can show a high tok/s over its few
    successes; it is not what the server serves."""
    ok = level_result(4, 900.0, num_requests=40, completed=40)
    broken = level_result(8, 5000.0, num_requests=48, completed=8, failed=40, level_failed=True)
    assert summary_sentence([ok, broken], None, None) == \
        "No plateau yet: throughput still grows (best 900 tok/s at C=4)."


def test_no_level_that_counts_claims_no_throughput() -> None:
    broken = level_result(8, 5000.0, num_requests=48, completed=8, failed=40, level_failed=True)
    assert summary_sentence([broken], None, None) == \
        "No level counts: the one level failed, so no throughput is claimed."
    assert summary_sentence([broken, broken], None, None) == \
        "No level counts: all 2 levels failed, so no throughput is claimed."
    assert summary_sentence([], None, None) == "No levels measured."
