"""A verdict from a table of summaries: the decoding batch by Little's law on tokens (output tok/s x TPOT)."""

from __future__ import annotations

import pytest

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.analysis.diagnosis_table import token_batch
from plateau_bench.result import Latency, LevelResult

from support.builders import level_result


def row(c: int, tok_s: float, tpot_ms: float, ttft_ms: float) -> LevelResult:
    """A level as a table states it: means only, no per-request figure (decoding batch unknown)."""
    return level_result(c, tok_s, completed=100, num_requests=100, duration_s=60.0,
                        tpot_ms=Latency(mean=tpot_ms), ttft_ms=Latency(mean=ttft_ms))


CAPPED = [row(8, 400, 20.0, 120), row(16, 760, 21.0, 125), row(32, 1440, 22.2, 130), row(64, 1900, 25.5, 140),
          row(128, 1920, 25.2, 2100), row(256, 1930, 25.1, 6300)]


def test_the_decoding_batch_is_tok_s_times_tpot() -> None:
    assert token_batch(row(64, 1900, 25.5, 140)) == pytest.approx(1900 * 0.0255)
    assert token_batch(level_result(64, 1900)) is None   # no TPOT or ITL: unknown, not 0


def test_a_batch_that_stops_growing_while_ttft_grows_and_tpot_holds_is_a_cap_at_the_batch() -> None:
    v = diagnose(CAPPED)
    assert v.constraint == "admission_cap" and v.estimated_cap == 48   # ~48.5 sequences decoding, not C=64
    assert any("Little's law on tokens" in e and "48 at C=64" in e for e in v.evidence), v.evidence
    assert any(e.startswith("TTFT 140 -> 6,300 ms while TPOT stayed") for e in v.evidence), v.evidence


def test_a_batch_that_grows_with_the_time_per_token_is_not_read_as_a_cap() -> None:
    # Compute-bound: every request decodes, the batch grows with C and TPOT with it; no queue.
    growing = [row(c, 40 * c / (1 + c / 64), 25.0 * (1 + c / 64), 130) for c in (8, 16, 32, 64, 128, 256)]
    v = diagnose(growing)
    assert v.constraint != "admission_cap", v
