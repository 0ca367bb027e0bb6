"""Which tool wrote a file, from its content (the name is only a hint people rename).

JSON (one document, JSON lines, or documents appended one per line):

* ``{"benchmarks": [{"type_": "generative_benchmark", ...}]}``: GuideLLM;
* ``{"metadata": {"request_start_ns": ...}, "metrics": ...}`` lines, or an object with ``input_config`` and
  metric blocks (``{"unit", "avg", ...}``, at the top or under ``records``), or AIPerf's multi-run and
  sweep aggregates, or one of the other files it writes (``importers.aiperf_files``): AIPerf;
* ``{"load_summary", "successes", "failures"}``, or a list of ``{"start_time", "end_time", "info"}``:
  inference-perf;
* ``{"version", "run", "results": {"request_performance": ...}}``: an llm-d Benchmark Report (also as YAML,
  ``.yaml``/``.yml``, one report per document);
* ``{"duration", "completed", ...}``: vLLM or SGLang, told apart by the keys only one of them writes
  (vLLM: ``*_e2el_ms``, ``num_prompts``, ``model_id``, ``request_inthroughput``, ...; SGLang:
  ``*_e2e_latency_ms``, ``dataset_name``, ``random_input_len``, ``concurrency``, ...).

Anything else that is not JSON is read as a table (CSV or Markdown), unless it is one of AIPerf's CSV
exports (``importers.aiperf_csv``).

A directory is read with its subdirectories (AIPerf writes one per run or swept value); the files a tool
writes beside its results (logs, configurations, console text, plots) are skipped and the warnings say why.

``JSON_READERS`` reads a JSON file once its format is known; ``FORMATS``, what ``--from`` takes, is made
from it, so the formats detected, read and offered are one list.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers import (
    aiperf_files,
    aiperf_runs,
    guidellm,
    guidellm_files,
    inference_perf,
    llmd,
    sglang,
    sglang_steady,
    vllm,
    vllm_sweep,
)
from plateau_bench.importers.common import ImportedLevel, ImportOptions, Where
from plateau_bench.importers.inference_perf_files import companions as inference_perf_companions
from plateau_bench.importers.inference_perf_requests import per_request_levels

# AIPerf's JSON values by directory, then by run: a run is read once all its directory's files are in.
AiperfGroups = dict[Path, dict[str, list[tuple[Any, Where]]]]
Read = tuple[list[ImportedLevel], dict[str, Any]]
# (file, its text, its JSON values, options, AIPerf's groups) -> the file's levels and run-wide facts.
JsonReader = Callable[[Path, str, list[tuple[Any, Where]], ImportOptions, AiperfGroups], Read]


def llmd_levels(values: list[tuple[Any, Where]], opts: ImportOptions) -> Read:
    """One level per llm-d Benchmark Report (from JSON or YAML documents)."""
    levels: list[ImportedLevel] = []
    meta: dict[str, Any] = {}
    for value, where in values:
        if not llmd.is_report(value):
            raise where.missing("results.request_performance", "an llm-d Benchmark Report")
        levels.append(llmd.report_level(value, where, opts))
        meta = meta or {"model": llmd.model(value)}
    return levels, meta


def _inference_perf(path: Path, _text: str, values: list[tuple[Any, Where]], opts: ImportOptions,
                    _groups: AiperfGroups) -> Read:
    levels: list[ImportedLevel] = []
    meta: dict[str, Any] = {}
    for value, where in values:
        if inference_perf.is_per_request(value):
            levels.extend(per_request_levels(value, path, where, opts))
        elif isinstance(value, dict) and inference_perf.is_summary(value):
            levels.append(inference_perf.summary(value, where, opts, inference_perf.stage_of(path)))
            meta = inference_perf.lengths(value)
        else:
            raise where.missing("successes", "an inference-perf lifecycle report")
    return levels, meta


def _aiperf(path: Path, _text: str, values: list[tuple[Any, Where]], _opts: ImportOptions,
            groups: AiperfGroups) -> Read:
    """No level yet: the values join their directory's group (``aiperf_runs.levels`` reads it at the end)."""
    aiperf_runs.collect(values, groups[path.parent])
    return [], {}


JSON_READERS: dict[str, JsonReader] = {
    "vllm": lambda path, _text, values, opts, _groups: vllm.load(path, values, opts),
    "sglang": lambda path, _text, values, opts, _groups: sglang.load(path, values, opts),
    "guidellm": lambda path, text, values, opts, _groups: guidellm.load(path, text, values, opts),
    "aiperf": _aiperf,
    "inference-perf": _inference_perf,
    "llm-d": lambda _path, _text, values, opts, _groups: llmd_levels(values, opts),
}
FORMATS = (*JSON_READERS, "table")
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
        if aiperf_runs.kind_of(first) or aiperf_files.not_results(first):
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
    for f in files:
        n = f.name
        if n == "inputs.json" or n.endswith(".pytorch.json"):
            skip[f] = "the tool's inputs or a copy of its results, not results"
        elif f.suffix.lower() == ".csv" and names & {"profile_export_aiperf.json", "benchmarks.json"}:
            skip[f] = "the CSV twin of the JSON results next to it"
        elif f.suffix.lower() in YAML_SUFFIXES and not llmd.is_report_file(f) and not guidellm_files.is_results(f):
            skip[f] = "a YAML file that is not an llm-d Benchmark Report (a tool's configuration)"
    skip.update({f: why for f, why in guidellm_files.companions(files).items() if f not in skip})
    skip.update(vllm_sweep.companions(files))
    return skip


def _natural(path: Path) -> list[Any]:
    """Sort key: ``concurrency_2`` before ``concurrency_16``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _walk(directory: Path, skipped: list[tuple[Path, str]]) -> list[Path]:
    """A directory's result files in name order, then its subdirectories' (what is left out: ``skipped``)."""
    entries = sorted((e for e in directory.iterdir() if not e.name.startswith(".")), key=_natural)
    files = [f for f in entries if f.is_file()]
    # The tools' own reasons first (inference-perf names its configuration, partial reports and plots).
    skip = inference_perf_companions(files)
    rest = [f for f in files if f not in skip]
    found = [f for f in rest if f.suffix.lower() in SUFFIXES]
    skip |= {**_companions(rest), **aiperf_files.companions(found)}
    skipped.extend(skip.items())
    skipped.extend((f, f"not a file plateau import reads ({f.suffix or 'no extension'}: a log, plot or "
                    "binary table)") for f in rest if f not in skip and f.suffix.lower() not in SUFFIXES)
    out = [f for f in found if f not in skip]
    for sub in (e for e in entries if e.is_dir() and not e.is_symlink()):
        why = aiperf_files.skipped_dir(sub)
        if why:
            skipped.append((sub, why))
        else:
            out.extend(_walk(sub, skipped))
    return out


def _said(skipped: list[tuple[Path, str]]) -> list[str]:
    """One warning per reason, naming the files it applies to (the first five of more than six)."""
    by_reason: dict[str, list[Path]] = {}
    for f, why in skipped:
        by_reason.setdefault(why, []).append(f)
    out = []
    for why, files in by_reason.items():
        shown = files if len(files) <= 6 else files[:5]
        names = ", ".join(map(str, shown)) + (f" and {len(files) - len(shown)} more" if len(files) > len(shown) else "")
        out.append(f"skipped {names}: {why}")
    return out


def expand(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """Files to read (the paths given; a directory's result files in name order, its subdirectories' after)
    and what was skipped."""
    out: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for p in paths:
        sweep = vllm_sweep.experiment_files(p) if p.is_dir() else None
        if sweep is not None:   # a vllm bench sweep serve experiment: its runs are one folder down
            out.extend(sweep[0])
            skipped.extend(sweep[1])
        elif p.is_dir():
            found = _walk(p, skipped)
            if not found:
                raise ConfigError(f"{p}: no result files in this directory or below ({', '.join(SUFFIXES)})")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such file or directory")
    given = inference_perf_companions([p for p in paths if p.is_file()])   # a run's files named one by one
    skipped.extend(given.items())
    return [f for f in out if f not in given], _said(skipped)
