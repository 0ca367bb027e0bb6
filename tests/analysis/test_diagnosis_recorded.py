"""Verdicts on sweeps recorded against real servers, re-diagnosed by the command a user runs.

``tests/data/real/llamacpp-parallel-6-client-only``: a default sweep (``--input-len 32 --output-len 64
--max-concurrency 48 --no-metrics``) of llama.cpp's ``llama-server --parallel 6`` on the suite's mid GGUF, one
thread, on two cores shared with the client. Its throughput fell 13 % past the knee (475 tok/s at C=8, 412 at
C=32, intervals apart) while every request kept one pace (TPOT p99 1.1x its median): the client taking the
server's cores, not a cache recomputing preempted requests, which would spread TPOT.

``tests/data/real/llamacpp-parallel-4-no-cont-batching``: the same sweep (``--max-concurrency 32``, with /metrics) of
``llama-server --parallel 4 -nocb``: without continuous batching its running count sat at the 4 slots it states,
with 4 and 12 waiting at C=8 and C=16, while at most 2-4 requests decoded at once (2.8 on average): the client's
view alone shows no held batch.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from plateau_bench.result import Verdict

from support.loading import Cli

REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def test_a_fall_without_a_preemptions_wait_leaves_the_real_llamacpp_cap_first(cli: Cli) -> None:
    result = cli("diagnose", str(REAL / "llamacpp-parallel-6-client-only"), "--json")
    assert result.exit_code == 0, result.output
    verdict = msgspec.json.decode(result.output, type=dict[str, object])["verdict"]
    v = msgspec.convert(verdict, type=Verdict)
    assert (v.constraint, v.estimated_cap, v.secondary) == ("admission_cap", 6, "kv_capacity"), v
    # the figures docs/guides/diagnosis.md quotes
    assert any("throughput falls" in e and "475 tok/s at C=8, 412 at C=32" in e for e in v.secondary_evidence), (
        v.secondary_evidence)
    assert any("enable /metrics" in t for t in v.to_separate), v.to_separate


def test_a_real_llamacpp_without_continuous_batching_is_its_stated_cap(cli: Cli) -> None:
    result = cli("diagnose", str(REAL / "llamacpp-parallel-4-no-cont-batching"), "--json")
    assert result.exit_code == 0, result.output
    verdict = msgspec.json.decode(result.output, type=dict[str, object])["verdict"]
    v = msgspec.convert(verdict, type=Verdict)
    assert (v.constraint, v.estimated_cap) == ("admission_cap", 4), v
    assert any(e.startswith("the server ran 4 requests at every level from C=4 to C=16") and "at most 2-4 decoded"
               in e for e in v.evidence), v.evidence
    assert v.suggestions[0].startswith("try llama-server --parallel 8"), v.suggestions
