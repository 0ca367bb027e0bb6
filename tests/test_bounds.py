"""Inputs that would exhaust memory before anything is sent are refused in one line: request lengths no
model serves, shared prefixes, conversations and turns by the billion, trace rows, and requests longer
than the server's own context."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.spec import MAX_REQUEST_TOKENS, WorkloadSpec, parse_length
from plateau_bench.sweep.session import check_context
from plateau_bench.workload.trace import load_trace

from support.loading import plateau


@pytest.mark.parametrize(("fields", "message"), [
    ({"input_len": 100_000_000}, "--input-len 100,000,000 is more tokens than any model serves in one request"),
    ({"output_len": MAX_REQUEST_TOKENS + 1}, "--output-len 10,000,001 is more tokens"),
    ({"input_len": 8, "input_dist": parse_length("uniform:1,20000000", "--input-len")}, "--input-len 20,000,000"),
    ({"prefix_groups": 4, "prefix_len": 1_000_000_000}, "--prefix-len 1,000,000,000 is more tokens"),
    ({"prefix_groups": 1_000_000_000, "prefix_len": 8}, "--prefix-groups 1,000,000,000 is more shared prefixes"),
    ({"sessions": 1_000_000_000}, "--sessions 1,000,000,000 is more conversations"),
    ({"sessions": 4, "turns": parse_length("uniform:1,1000000", "--turns")}, "--turns allows 1,000,000 turns"),
])
def test_sizes_beyond_any_benchmark_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        WorkloadSpec(**{"input_len": 128, "output_len": 128, **fields}).validate()   # type: ignore[arg-type]


def test_a_trace_row_beyond_any_model_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"time_s": 0, "input_len": 128, "output_len": 8}\n'
                     '{"time_s": 1, "input_len": 1000000000, "output_len": 8}\n')
    with pytest.raises(ConfigError, match=r"t.jsonl:2: input_len 1,000,000,000 is more tokens than any model"):
        load_trace(trace)


def test_requests_longer_than_the_servers_context_are_refused() -> None:
    workload = WorkloadSpec(input_len=8000, output_len=256, prefix_groups=2, prefix_len=100)
    with pytest.raises(ConfigError, match=r"ask up to 8,356 tokens per request \(prompt \+ output, shared prefix "
                                          r"included\), above the server's context of 8,192"):
        check_context(workload, 8192)
    check_context(workload, None)       # a server that does not say: nothing to check against
    check_context(workload, 16384)
    with pytest.raises(ConfigError, match="holds a request of 9,000 tokens"):
        check_context(WorkloadSpec(input_len=8, output_len=8, trace="t.jsonl"), 8192, trace_longest=9000)


def test_the_twin_refuses_a_prompt_beyond_its_context_before_sending(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["run", "-c", "1", "--input-len", "9000000", "--quiet"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "above the server's context of 8,192 (max_model_len from /v1/models)" in err


def test_a_prediction_band_is_not_simulated_from_coefficients_the_fit_does_not_pin() -> None:
    """Shifting t0 by a standard error of 10^6 s simulated an engine with near-zero steps (68.7 GiB)."""
    from plateau_bench.answers import CalibratedModel, EngineModel, Parameter
    from plateau_bench.sweep.predict import _no_band

    engine = EngineModel(t0=0.002, a=1e-4, b=2e-6, c=0.0, max_num_seqs=64, max_num_batched_tokens=8192,
                         kv_tokens=65536, policy="mixed", block_size=16, max_model_len=32768)

    def model(*parameters: Parameter) -> CalibratedModel:
        return CalibratedModel(engine=engine, parameters=list(parameters), levels=[], sources=[], cap_source="none",
                               kv_source="server", policy_source="server", input_len=128, output_len=128)

    assert _no_band(model(Parameter(name="t0", value=0.002, stderr=1e-4))) == ""
    assert _no_band(model(Parameter(name="t0", value=0.002, stderr=1e6))) == \
        "no band: the fit does not pin t0 0.002 ± 1e+06 (a standard error of half the value or more)"
    assert _no_band(model(Parameter(name="t0", value=0.002))).startswith("no band: the fit had no residual")


def test_token_buckets_stay_bounded_over_any_window() -> None:
    """A calibrated step of 10^6 s made a virtual window of ~10^8 s: 1 s buckets asked for 5.7 GiB."""
    from plateau_bench.analysis.metrics import MAX_BUCKETS, Window, bucket_output_tokens
    from plateau_bench.units import NS

    from support.builders import request_record

    records = [request_record(0, sent_ns=0, first_token_ns=10**6 * NS, end_ns=10**8 * NS, chunk_ns=[10**8 * NS],
                              chunk_tokens=[8], output_tokens=8)]
    buckets = bucket_output_tokens(records, Window(0, 10**8 * NS))
    assert len(buckets) <= MAX_BUCKETS and buckets.sum() == 8
