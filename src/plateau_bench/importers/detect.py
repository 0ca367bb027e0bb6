"""Which tool wrote a file, from its content (the name is only a hint people rename).

JSON (one document, JSON lines, or documents appended one per line):

* ``{"benchmarks": [{"type_": "generative_benchmark", ...}]}``: GuideLLM;
* ``{"metadata": {"request_start_ns": ...}, "metrics": ...}`` lines, or an object with ``input_config`` and
  metric blocks (``{"unit", "avg", ...}``, at the top or under ``records``): AIPerf;
* ``{"load_summary", "successes", "failures"}``, or a list of ``{"start_time", "end_time", "info"}``:
  inference-perf;
* ``{"version", "run", "results": {"request_performance": ...}}``: an llm-d Benchmark Report (also as YAML,
  ``.yaml``/``.yml``, one report per document);
* ``{"duration", "completed", ...}``: vLLM or SGLang, told apart by the keys only one of them writes
  (vLLM: ``*_e2el_ms``, ``num_prompts``, ``model_id``, ``request_inthroughput``, ...; SGLang:
  ``*_e2e_latency_ms``, ``dataset_name``, ``random_input_len``, ``concurrency``, ...).

Anything else that is not JSON is read as a table (CSV or Markdown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers import aiperf, guidellm, inference_perf, llmd, sglang, sglang_steady, vllm, vllm_sweep
from plateau_bench.importers.common import Where

FORMATS = ("vllm", "sglang", "guidellm", "aiperf", "inference-perf", "llm-d", "table")
SUFFIXES = (".json", ".jsonl", ".csv", ".tsv", ".md", ".markdown", ".txt", ".yaml", ".yml")
YAML_SUFFIXES = (".yaml", ".yml")


def is_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def detect(path: Path, values: list[tuple[Any, Where]]) -> str:
    """The format of a JSON file's values; ``ConfigError`` naming the file when none fits."""
    if not values:
        raise ConfigError(f"{path}: empty file")
    first, where = values[0]
    if inference_perf.is_per_request(first):
        return "inference-perf"
    if isinstance(first, dict):
        if llmd.is_report(first):
            return "llm-d"
        if guidellm.score(first):
            return "guidellm"
        if aiperf.is_record(first) or aiperf.is_aggregate(first):
            return "aiperf"
        if inference_perf.is_summary(first):
            return "inference-perf"
        v, s = vllm.score(first), sglang.score(first)
        if v or s:
            return "vllm" if v >= s else "sglang"
    raise where.fail("not a result file plateau import knows (vLLM, SGLang, GuideLLM, AIPerf, inference-perf, "
                     f"llm-d); {_near_miss(first)}"
                     f"name its tool with --from ({', '.join(FORMATS)})")


def _near_miss(value: Any) -> str:
    """Which serving benchmark a result that lacks the keys every one writes resembles, and what it lacks."""
    if not isinstance(value, dict):
        return ""
    v = sum(k in value for k in vllm.MARKS)
    s = sum(k in value for k in (*sglang.MARKS, *sglang_steady.MARKS))
    missing = [repr(k) for k in ("duration", "completed") if k not in value]
    if max(v, s) < 2 or not missing:
        return ""
    tool = vllm.generation(value) if v >= s else sglang.generation(value)
    return f"it looks like {tool} but has no {' or '.join(missing)}; " if tool else ""


def _companions(files: list[Path]) -> dict[Path, str]:
    """Files a tool writes next to its results that are not results themselves (why each is skipped)."""
    names = {f.name for f in files}
    skip: dict[Path, str] = {}
    staged = any(n.startswith("stage_") and n.endswith("_lifecycle_metrics.json") for n in names)
    for f in files:
        n = f.name
        if n == "inputs.json" or n.endswith(".pytorch.json"):
            skip[f] = "the tool's inputs or a copy of its results, not results"
        elif f.suffix.lower() == ".csv" and names & {"profile_export_aiperf.json", "benchmarks.json"}:
            skip[f] = "the CSV twin of the JSON results next to it"
        elif f.suffix.lower() in YAML_SUFFIXES and not llmd.is_report_file(f):
            skip[f] = "a YAML file that is not an llm-d Benchmark Report (a tool's configuration)"
        elif staged and n in ("summary_lifecycle_metrics.json", "per_request_lifecycle_metrics.json"):
            skip[f] = "the per-stage reports next to it are read instead"
    skip.update(vllm_sweep.companions(files))
    return skip


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Files to read (the paths given; a directory's result files in name order) and what was skipped."""
    out: list[Path] = []
    skipped: list[str] = []
    for p in paths:
        sweep = vllm_sweep.experiment_files(p) if p.is_dir() else None
        if sweep is not None:   # a vllm bench sweep serve experiment: its runs are one folder down
            out.extend(sweep[0])
            skipped.extend(sweep[1])
        elif p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in SUFFIXES
                           and not f.name.startswith("."))
            skip = _companions(found)
            skipped.extend(f"skipped {f}: {why}" for f, why in skip.items())
            found = [f for f in found if f not in skip]
            if not found:
                raise ConfigError(f"{p}: no result files in this directory ({', '.join(SUFFIXES)})")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such file or directory")
    return out, skipped
