"""Which files of an AIPerf artifact directory hold results, and what the others are.

AIPerf 0.13 writes per run (``--artifact-dir DIR``; a sweep writes one subdirectory per value,
``concurrency_8/``, and ``--num-profile-runs`` one per trial, ``profile_runs/run_0001/`` or
``profile_runs/trial_0001/concurrency_8/``): ``profile_export.jsonl`` and ``profile_export_aiperf.json``
(read), their CSV twin, ``profile_export_console.txt`` (the console's tables), ``run_config.json`` and
``inputs.json`` (what it was asked to send), ``server_metrics_export.{json,csv,jsonl,parquet}`` (its scrape
of the server's /metrics), ``gpu_telemetry_export.jsonl``, ``profile_export_aiperf_timeslices.{json,csv}``
(``--slice-duration``), ``profile_export_raw.jsonl`` (``--export-level raw``: payloads and responses),
``logs/aiperf.log``, and with a warm-up ``phase_manifest.json`` with a copy of the exports per phase under
``phases/<name>/``. ``--profile-export-prefix foo`` renames the exports ``foo.json``, ``foo.jsonl``,
``foo_raw.jsonl``, ``foo_timeslices.json``, ``foo_console.txt``, ``foo_server_metrics.json`` ..., so files
are told by their name's ending and, where it helps, by the first bytes of their content. Over several runs
it adds ``aggregate/`` (``*_aggregate.json``: the runs' confidence statistics) and ``sweep_aggregate/``
(``*_sweep.json``: one entry per swept value), which ``importers.aiperf_runs`` reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError
from plateau_bench.importers.aiperf import identity

RAW = "AIPerf's raw request/response log (--export-level raw): the per-request metrics are in the .jsonl next to it"
CONSOLE = "AIPerf's console text (the tables of the JSON export next to it)"
RUN_CONFIG = "AIPerf's run configuration (what it was asked to do, not what it measured)"
SERVER_METRICS = "AIPerf's scrape of the server's /metrics, not client measurements"
GPU = "AIPerf's GPU telemetry, not client measurements"
TIMESLICES = "AIPerf's time-sliced metrics: windows of the level its whole-run export gives"
INPUTS = "the request inputs (prompts) AIPerf or GenAI-Perf sent, not results"
PERF_ANALYZER = ("perf_analyzer's per-request export (what GenAI-Perf computed its statistics from): its "
                 "profile_export_genai_perf.json next to it is read")
OUTPUTS = "AIPerf's generated text, not results"
MANIFEST = "AIPerf's phase manifest (an index of the per-phase exports)"
PHASES = "AIPerf's per-phase copies of the run's exports (warm-up included); the run's own files are read"
HEAD_BYTES = 8192
STATS = ("mean", "std", "min", "max", "cv")    # the sweep CSV's columns per metric: <tag>_<stat>

# Name endings (after --profile-export-prefix) and what the file is.
_ENDINGS = (("_console.txt", CONSOLE), ("_raw.jsonl", RAW), ("_timeslices.json", TIMESLICES),
            ("_timeslices.csv", TIMESLICES), ("_gpu_telemetry.jsonl", GPU), ("gpu_telemetry_export.jsonl", GPU),
            ("_server_metrics.json", SERVER_METRICS), ("_server_metrics.csv", SERVER_METRICS),
            ("_server_metrics.jsonl", SERVER_METRICS), ("server_metrics_export.json", SERVER_METRICS),
            ("server_metrics_export.csv", SERVER_METRICS), ("server_metrics_export.jsonl", SERVER_METRICS))
_NAMES = {"run_config.json": RUN_CONFIG, "phase_manifest.json": MANIFEST, "outputs.json": OUTPUTS,
          "server_metrics.json": SERVER_METRICS, "inputs.json": INPUTS}


def head(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(HEAD_BYTES).decode("utf-8-sig", errors="replace")
    except OSError:
        return ""


def csv_kind(text: str) -> str | None:
    """``profile``, ``confidence`` or ``sweep`` for AIPerf's CSV exports (None: another text)."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("Metric,avg,"):
        return "profile"
    if first.startswith("metric,mean,") and first.endswith(",unit"):
        return "confidence"
    columns = first.split(",")
    if any(c in ("request_count_mean", "request_throughput_mean") for c in columns) and \
            not columns[0].endswith(tuple(f"_{s}" for s in STATS)):
        return "sweep"
    return None


def _by_content(text: str) -> str | None:
    """What an AIPerf companion is, from the first bytes of its content (None: not one it knows)."""
    start = text.lstrip()
    if "NVIDIA AIPerf |" in text[:2000]:
        return CONSOLE
    if start.startswith("# AIPerf Server Metrics Export"):
        return SERVER_METRICS
    if start.startswith("Timeslice,Start_NS") or start.startswith('{"timeslices"') or \
            start.replace(" ", "").replace("\n", "").startswith('{"timeslices"'):
        return TIMESLICES
    first_line = start.split("\n", 1)[0]
    if first_line.startswith('{"metadata"') and '"metrics"' not in first_line and \
            any(k in first_line for k in ('"start_perf_ns"', '"responses"', '"payload"')):
        return RAW
    compact = start[:400].replace(" ", "").replace("\n", "")
    if compact.startswith('{"benchmark_id"') and '"cfg":' in compact:
        return RUN_CONFIG
    if '"metrics_json"' in start and '"phase_kind"' in start:
        return MANIFEST
    if compact.startswith('{"experiments":['):
        return PERF_ANALYZER
    return None


def companion(path: Path) -> str | None:
    """Why a file in an AIPerf directory is not read as results (None: it may hold results)."""
    name = path.name.lower()
    why = _NAMES.get(name) or next((reason for end, reason in _ENDINGS if name.endswith(end)), None)
    return why or _by_content(head(path))


def _first_line(path: Path) -> str:
    """The first line of a file, however long (a sweep CSV's header names every metric's columns)."""
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as f:
            return f.readline()
    except OSError:
        return ""


def companions(files: list[Path]) -> dict[Path, str]:
    """The companions among one directory's files, and the CSV twins of JSON exports (same name, .json)."""
    stems = {f.stem for f in files if f.suffix.lower() == ".json"}
    skip: dict[Path, str] = {}
    for f in files:
        why = companion(f)
        if why is None and f.suffix.lower() == ".csv" and f.stem in stems and csv_kind(_first_line(f)):
            why = "the CSV twin of the JSON results next to it"
        if why:
            skip[f] = why
    return skip


def skipped_dir(directory: Path) -> str | None:
    """Why a subdirectory of an AIPerf run is not walked (None: walk it)."""
    if directory.name == "phases" and (directory.parent / "phase_manifest.json").is_file():
        return PHASES
    return None


def not_results(value: Any) -> str | None:
    """What a parsed JSON value is when it is one of AIPerf's files that hold no results."""
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("cfg"), dict) and "benchmark_id" in value:
        return RUN_CONFIG
    if isinstance(value.get("timeslices"), list):
        return identity(value, "time-sliced metrics") + " (windows of the level its whole-run export gives)"
    if isinstance(value.get("phases"), list) and any(isinstance(p, dict) and "metrics_json" in p
                                                     for p in value["phases"]):
        return MANIFEST
    if isinstance(value.get("summary"), dict) and "endpoints_configured" in value["summary"] and \
            isinstance(value.get("metrics"), dict):
        return identity(value, "server metrics export") + " (the server's /metrics, not client measurements)"
    data = value.get("data")
    if isinstance(data, dict) and isinstance(value.get("phase"), dict) and "endpoint_summaries" in data:
        return SERVER_METRICS + f" (phase {value['phase'].get('phase_name')})"
    if isinstance(data, list) and data and isinstance(data[0], dict) and {"payloads", "payload"} & data[0].keys():
        return INPUTS
    if isinstance(value.get("experiments"), list):
        return PERF_ANALYZER
    metadata = value.get("metadata")
    if isinstance(metadata, dict) and "metrics" not in value and any(k in value for k in ("responses", "payload")):
        return RAW
    return None


def perf_analyzer_requests(directory: Path) -> int | None:
    """The requests perf_analyzer's export in ``directory`` holds (``profile_export.json``: the measured
    requests of its experiments), for a GenAI-Perf export that does not state its count (0.0.8)."""
    path = directory / "profile_export.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    experiments = value.get("experiments") if isinstance(value, dict) else None
    if not isinstance(experiments, list):
        return None
    return sum(len(e["requests"]) for e in experiments if isinstance(e, dict) and isinstance(e.get("requests"), list))


def warmup_phase(path: Path, what: str) -> None:
    """A one-line error when ``path`` is the warm-up phase's copy of a run's export (``phase_kind``)."""
    if phase_kind(path) == "warmup":
        raise ConfigError(f"{path}: {what} of the warm-up phase (phase_manifest.json): not a measured level; "
                          "import the run's directory")


def phase_kind(path: Path) -> str | None:
    """The phase (``warmup``, ``profiling``) whose copy of the exports ``path`` is, per the run's manifest."""
    for manifest_dir in list(path.parents)[:3]:
        manifest = manifest_dir / "phase_manifest.json"
        if not manifest.is_file():
            continue
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        rel = path.relative_to(manifest_dir).as_posix()
        for phase in doc.get("phases") or [] if isinstance(doc, dict) else []:
            if isinstance(phase, dict) and rel in (phase.get("metrics_json"), phase.get("metrics_csv")):
                kind = phase.get("phase_kind")
                return str(kind) if kind else None
    return None


def run_config(directory: Path) -> dict[str, Any] | None:
    """The configuration (``cfg``) in the ``run_config.json`` of a run's directory."""
    f = directory / "run_config.json"
    if not f.is_file():
        return None
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    cfg = doc.get("cfg") if isinstance(doc, dict) else None
    return cfg if isinstance(cfg, dict) else None
