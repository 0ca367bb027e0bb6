"""Writes tests/importers/data/genai_perf with GenAI-Perf's own statistics and export code, from synthetic
request timings (its perf_analyzer needs glibc 2.38; see that directory's README).

    python make_genai_perf_samples.py UNPACKED_RELEASE new|old OUT

``UNPACKED_RELEASE``: a genai-perf wheel unpacked (0.0.16 for ``new``, 0.0.8 for ``old``); not run by the tests.
"""

from __future__ import annotations

import inspect
import json
import sys
from enum import Enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PROMPT, ANSWER, REQUESTS = 512, 128, 200
START_NS = 1_733_000_000_000_000_000


def timings(concurrency: int, itl_ms: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(concurrency)
    ttft = rng.normal(40.0, 5.0, REQUESTS).clip(20) * 1e6
    itl = rng.normal(itl_ms, itl_ms * 0.05, REQUESTS).clip(1) * 1e6
    return ttft, itl, ttft + (ANSWER - 1) * itl


def statistics(concurrency: int, ttft: np.ndarray, itl: np.ndarray, lat: np.ndarray) -> tuple[dict[str, Any], Any]:
    from genai_perf.metrics.llm_metrics import LLMMetrics
    from genai_perf.metrics.statistics import Statistics

    rate = concurrency / (lat.mean() / 1e9)
    given = {"request_throughputs": [rate], "request_latencies": [int(x) for x in lat],
             "time_to_first_tokens": [int(x) for x in ttft], "time_to_second_tokens": [int(x) for x in itl],
             "inter_token_latencies": [int(x) for x in itl], "output_token_throughputs": [rate * ANSWER],
             "output_token_throughputs_per_user": [float(1e9 / x) for x in itl],
             "output_sequence_lengths": [ANSWER] * REQUESTS, "input_sequence_lengths": [PROMPT] * REQUESTS}
    known = inspect.signature(LLMMetrics.__init__).parameters    # older releases know fewer metrics
    metrics = LLMMetrics(**{k: v for k, v in given.items() if k in known})
    stats = Statistics(metrics)
    stats.scale_data()
    return dict(stats.stats_dict), metrics


def new_config(concurrency: int) -> dict[str, Any]:
    from genai_perf.config.input.config_command import ConfigCommand

    user = {"model_name": MODEL, "endpoint": {"type": "chat", "streaming": True, "url": "localhost:8000"},
            "perf_analyzer": {"stimulus": {"concurrency": concurrency}},
            "input": {"synthetic_tokens": {"mean": PROMPT}, "output_tokens": {"mean": ANSWER}}}
    return dict(ConfigCommand(user_config=user).to_json_dict())


def old_config(concurrency: int) -> dict[str, Any]:
    from genai_perf import parser

    sys.argv = ["genai-perf", "profile", "-m", MODEL, "--service-kind", "openai", "--endpoint-type", "chat",
                "--streaming", "--concurrency", str(concurrency), "--synthetic-input-tokens-mean", str(PROMPT),
                "--output-tokens-mean", str(ANSWER), "--url", "localhost:8000"]
    args, _ = parser.parse_args()
    config = dict(vars(args))
    for key in ("func", "output_format", "input_file", "extra_inputs"):   # as its JsonExporter prepares them
        config.pop(key, None)
    config = {k: v.name.lower() if isinstance(v, Enum) else str(v) if isinstance(v, Path) else v
              for k, v in config.items()}
    return {**config, "extra_inputs": {}}


def perf_analyzer_export(concurrency: int, ttft: np.ndarray, lat: np.ndarray) -> dict[str, Any]:
    """perf_analyzer's profile_export.json: every measured request with two responses (first and last)."""
    requests = []
    for i, (first, whole) in enumerate(zip(ttft, lat, strict=True)):
        sent = START_NS + int(i * lat.mean() / concurrency)
        requests.append({"timestamp": sent, "request_inputs": {"payload": '{"messages": [...]}'},
                         "response_timestamps": [sent + int(first), sent + int(whole)],
                         "response_outputs": [{"response": "data: {...}"}, {"response": "data: [DONE]"}]})
    return {"experiments": [{"experiment": {"mode": "concurrency", "value": concurrency}, "requests": requests,
                             "window_boundaries": [START_NS, requests[-1]["response_timestamps"][-1]]}],
            "version": "", "service_kind": "openai", "endpoint": "v1/chat/completions"}


def write_csv(directory: Path, stats: dict[str, Any], metrics: Any) -> None:
    from genai_perf.config.input.config_command import ConfigCommand
    from genai_perf.export_data.csv_exporter import CsvExporter

    config = ConfigCommand(user_config={"model_name": MODEL, "endpoint": {"type": "chat", "streaming": True}})
    place = SimpleNamespace(get_artifact_directory=lambda: directory)
    CsvExporter(SimpleNamespace(stats=stats, telemetry_stats={}, metrics=metrics, config=config,
                                perf_analyzer_config=place)).export()


def main() -> None:
    source, layout, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    sys.path.insert(0, source)
    for concurrency, itl_ms in ((16, 10.0), (32, 20.0)):
        ttft, itl, lat = timings(concurrency, itl_ms)
        stats, metrics = statistics(concurrency, ttft, itl, lat)
        export = {**stats, "input_config": new_config(concurrency) if layout == "new" else old_config(concurrency)}
        directory = out / f"{MODEL.replace('/', '_')}-openai-chat-concurrency{concurrency}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "profile_export_genai_perf.json").write_text(json.dumps(export, indent=2))
        (directory / "profile_export.json").write_text(json.dumps(perf_analyzer_export(concurrency, ttft, lat)))
        (directory / "inputs.json").write_text(json.dumps({"data": [{"payload": [{"messages": []}]}]}))
        if layout == "new":
            write_csv(directory, stats, metrics)


if __name__ == "__main__":
    main()
