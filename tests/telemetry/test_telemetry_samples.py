"""Samples saved to telemetry.jsonl by the result writer and read back."""

from __future__ import annotations

from pathlib import Path

from plateau_bench.records import SOURCE_GPU, TelemetrySample, samples_from_lines
from plateau_bench.result import ResultFile
from plateau_bench.store import ResultWriter, load_telemetry


def test_round_trip_through_a_result_directory(tmp_path: Path) -> None:
    server = [
        TelemetrySample(t_ns=2_000, engine="vllm", values={"running": 4.0, "kv_usage": 0.5},
                        raw={"waiting_reason_capacity": 3.0}),
        TelemetrySample(t_ns=1_000, engine="vllm", values={"running": 3.0}),
    ]
    gpu = TelemetrySample(t_ns=1_500, engine="nvml", source=SOURCE_GPU, raw={"gpu0_power_w": 350.0})
    with ResultWriter(tmp_path, ResultFile(kind="run")) as writer:
        for s in [*server, gpu]:
            writer.add_telemetry("c8", s)
    lines = load_telemetry(tmp_path)["c8"]
    # canonical values sit at the top level of each line, where saved-telemetry readers look
    assert lines[0]["running"] == 4.0 and lines[0]["raw"] == {"waiting_reason_capacity": 3.0}
    assert samples_from_lines(lines) == sorted(server, key=lambda s: s.t_ns)
    assert samples_from_lines(lines, source=SOURCE_GPU) == [gpu]


def test_lines_that_do_not_fit_are_skipped() -> None:
    lines = [{"level": "c1", "t_ns": "soon", "running": 1.0},
             {"level": "c1", "t_ns": 5, "raw": [1, 2]},
             {"level": "c1", "t_ns": 7, "running": True, "waiting": 2, "engine": 3}]
    assert samples_from_lines(lines) == [TelemetrySample(t_ns=7, values={"waiting": 2.0})]
