from __future__ import annotations

import pytest

from plateau_bench.analysis.slo import goodput, level_meets, parse_slo, violations
from plateau_bench.errors import ConfigError
from plateau_bench.result import Latency

from support.builders import level_result, request_record


def test_parse_units() -> None:
    slos = parse_slo("ttft_p99=2s, tpot_p99=100ms,e2e_mean=1.5m")
    assert [(s.key, s.limit_ms) for s in slos] == [("ttft_p99", 2000.0), ("tpot_p99", 100.0),
                                                   ("e2e_mean", 90_000.0)]


@pytest.mark.parametrize("text,fragment", [
    ("foo_p99=1s", "unknown metric"), ("ttft_p42=1s", "unknown statistic"),
    ("ttft_p99=fast", "cannot read the limit"), ("ttft_p99", "expected METRIC_STAT=LIMIT"),
    ("ttft_p99=-1s", "positive"), ("", "at least one"),
])
def test_bad_slo(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_slo(text)


def test_level_checks() -> None:
    lv = level_result(label="C=1", ttft_ms=Latency(p99=1500.0), tpot_ms=Latency(p99=120.0))
    assert level_meets(lv, parse_slo("ttft_p99=2s"))
    assert not level_meets(lv, parse_slo("ttft_p99=2s,tpot_p99=100ms"))
    assert violations(lv, parse_slo("tpot_p99=100ms")) == ["tpot_p99=120ms > 100ms"]


def test_goodput_counts_requests_meeting_every_slo() -> None:
    fast = request_record(0, ttft_ms=100, e2e_ms=1100, output_tokens=11)
    slow = request_record(1, ttft_ms=3000, e2e_ms=4000, output_tokens=11)
    assert goodput([fast, slow], 2.0, parse_slo("ttft_p99=2s")) == pytest.approx(0.5)
