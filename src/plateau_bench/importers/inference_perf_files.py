"""Which files of an inference-perf run are its results, and what the others are.

A run writes into one directory (``storage.local_storage.path``), every name after an optional
``report_file_prefix``:

* results: ``stage_N_lifecycle_metrics.json`` (one per stage), ``summary_lifecycle_metrics.json`` (the
  whole run, every stage together) and, when asked for, ``per_request_lifecycle_metrics.json``. With the
  per-request report the stage reports are read together with it (``inference_perf_requests``), not as
  levels of their own; with stage reports the whole-run summary is not a level either;
* not results: ``config.yaml`` (the run's configuration), ``validation.json`` (the tool's checks of its own
  reports), ``inference-perf.partial.stage_N.yaml`` (each stage again, in llm-d's Benchmark Report 0.2
  format: skipped beside its lifecycle report, imported as llm-d when given alone),
  ``adapter_*_lifecycle_metrics.json`` (one LoRA adapter's share of the requests),
  ``*_session_lifecycle_metrics.json`` (multi-turn sessions), ``*_prometheus_metrics.json`` (the server's
  metrics from a Prometheus server), ``*.png`` and ``analyzed_reports_legend.json`` (``--analyze``'s plots),
  and the console output a user keeps beside them.

``companions`` names those in a list of files with the reason each is skipped; ``not_results`` says, for
one file given alone, what it is (one line) when it is one of them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from plateau_bench.importers.inference_perf_requests import matches_stage_reports

_RESULT = re.compile(r"(?P<prefix>.*?)(?P<kind>stage_(?P<n>\d+)|summary|per_request)_lifecycle_metrics\.json")
_OTHERS = (
    (re.compile(r".*adapter_.+_lifecycle_metrics\.json"), "one LoRA adapter's share of the requests, not a level"),
    (re.compile(r".*(stage_\d+_|summary_|per_)session_lifecycle_metrics\.json"),
     "inference-perf's multi-turn session summaries, not levels"),
    (re.compile(r".*(stage_\d+_|summary_)prometheus_metrics\.json"),
     "the server's metrics as a Prometheus server recorded them, not the client's results"),
    (re.compile(r".*validation\.json"), "inference-perf's checks of its own reports (0.7 or later), not results"),
    (re.compile(r".*config\.ya?ml"), "inference-perf's configuration of the run, not results"),
    (re.compile(r".*inference-perf\.partial\.stage_(\d+)\.ya?ml"),
     "the stage again in the Benchmark Report v0.2 format: its lifecycle report is read"),
    (re.compile(r"analyzed_reports_legend\.json|.*\.(png|svg|jpe?g|html)"),
     "a plot of inference-perf's --analyze (or its legend), not results"),
    (re.compile(r".*\.(log|out|err)"), "a log, not results"),
)
_CONSOLE_MARKS = ("=== START_SUMMARY ===", "=== START_STAGE_", " - inference_perf.", "inference_perf.main")


def _other(name: str) -> str | None:
    if _RESULT.fullmatch(name) and not _OTHERS[0][0].fullmatch(name):
        return None
    return next((why for pattern, why in _OTHERS if pattern.fullmatch(name)), None)


def console_text(text: str) -> bool:
    """Whether a text file is inference-perf's console output (logs, and the reports printed between markers)."""
    head = text[:65536]
    return any(mark in head for mark in _CONSOLE_MARKS)


def _read_head(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


def _within_run(files: list[Path]) -> dict[Path, str]:
    """What to skip among the result files of one run (one directory, one prefix)."""
    kinds = {f: m.group("kind") for f in files if (m := _RESULT.fullmatch(f.name)) and _other(f.name) is None}
    per_request = next((f for f, k in kinds.items() if k == "per_request"), None)
    staged = any(k.startswith("stage_") for k in kinds.values())
    skip: dict[Path, str] = {}
    if per_request is not None and staged and not matches_stage_reports(per_request):
        skip[per_request] = ("its requests match neither the stage reports' counts nor their number: the stage "
                             "reports are read instead")
        per_request = None
    for f, kind in kinds.items():
        if per_request is not None and kind.startswith("stage_"):
            skip[f] = f"read together with {per_request.name}, whose requests make the stage's level"
        elif kind == "summary" and (per_request is not None or staged):
            skip[f] = "the whole run in one summary (every stage together): the stages' own reports are read instead"
    return skip


def companions(files: list[Path]) -> dict[Path, str]:
    """The files of inference-perf runs in ``files`` that are not levels, each with why it is skipped.

    Only where a lifecycle report of inference-perf sits in the same directory: ``config.yaml`` or a
    ``.log`` elsewhere is no business of this tool's.
    """
    by_dir: dict[Path, list[Path]] = defaultdict(list)
    for f in files:
        by_dir[f.parent].append(f)
    skip: dict[Path, str] = {}
    for group in by_dir.values():
        results = [f for f in group if _RESULT.fullmatch(f.name) and _other(f.name) is None]
        if not results:
            continue
        runs: dict[str, list[Path]] = defaultdict(list)
        for f in results:
            m = _RESULT.fullmatch(f.name)
            runs[m.group("prefix") if m else ""].append(f)
        for run in runs.values():
            skip.update(_within_run(run))
        for f in group:
            why = _other(f.name)
            if why is None and f.suffix.lower() in (".txt", "") and console_text(_read_head(f)):
                why = "inference-perf's console output (its logs and the reports it printed), not results"
            if why is not None:
                skip[f] = why
    return skip


def not_results(path: Path, text: str) -> str | None:
    """What a file given alone is, in one line, when its content shows one of inference-perf's files that are
    not results (its name alone proves nothing: ``config.yaml`` is a common name)."""
    head = text[:65536]
    start = head.lstrip()[:400]
    why = None
    if console_text(head):
        why = "inference-perf's console output (its logs and the reports it printed), not results"
    elif re.search(r"(?m)^load:\s*$", head) and re.search(r"(?m)^(server|api|report|data):", head):
        why = "an inference-perf configuration, not results"
    elif start.startswith("{") and '"global"' in start and '"warnings"' in start:
        why = "inference-perf's checks of its own reports (validation.json, 0.7 or later), not results"
    elif path.name == "analyzed_reports_legend.json":
        why = "the legend of inference-perf's --analyze plots, not results"
    if why is None:
        return None
    return (f"{why}: import the run's directory, or its stage_N_lifecycle_metrics.json or "
            "per_request_lifecycle_metrics.json")
