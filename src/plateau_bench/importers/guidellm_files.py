"""The files GuideLLM writes besides ``benchmarks.json``, told apart by their content.

``guidellm run --output kind=...`` (v0.8 on; ``--output-path`` and the file's extension before) writes:

* ``benchmarks.json``: the report (``guidellm``), read with its per-request samples;
* ``benchmarks.yaml``: the same report in YAML, read when no JSON report lies beside it;
* ``benchmarks.csv``: one row per benchmark, level summaries (``guidellm_csv``), read when no JSON report
  lies beside it;
* ``benchmarks.html``: a report page whose data (``window.GUIDELLM_REPORT``, earlier ``window.run_info``
  and friends) keeps per-level percentiles for its charts but neither durations nor means: not results;
* ``benchmarks.png`` (``kind=plot``): a plot;
* the console: its tables (``| Benchmark | ... |`` over ``| Strategy | ... |``) and log lines
  (``...|INFO     |guidellm.benchmark...``), which users save with ``> run.log``: not results either.

In a directory the companions are skipped with the reason; named alone, each says in one line what it is and
which file to import instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from plateau_bench.errors import ConfigError
from plateau_bench.importers import guidellm, guidellm_csv
from plateau_bench.importers.common import ImportedLevel, ImportOptions, Where, obj

SNIFF_CHARS = 65536       # enough to see a report's first benchmark strategy or a console table's header
TEXT_SUFFIXES = (".txt", ".log", ".out", ".md", ".markdown", ".yaml", ".yml", ".html", ".htm", ".csv")
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".pdf")
_YAML_REPORT = re.compile(r"^benchmarks:\s*$", re.M)
_YAML_STRATEGY = re.compile(r"^\s+type_: (?:generative_benchmark|synchronous|concurrent|throughput|constant|poisson"
                            r"|trace)\s*$", re.M)
_CONSOLE_HEADER = re.compile(r"^\|\s*Benchmark\s*\|.*\n\|\s*Strategy\s*\|", re.M)
_LOG_LINE = re.compile(r"\|\s*(?:INFO|DEBUG|WARNING|ERROR)\s*\|\s*guidellm\.", re.M)
# The report page's data: v0.8 on one object; v0.3-v0.7 one per section, injected into the UI's page.
_HTML_DATA = re.compile(r"window\.(?:GUIDELLM_REPORT|run_info|workload_details|benchmarks)\s*=")
_HTML_VERSION = re.compile(r'"guidellm_?[vV]ersion"\s*:\s*"([^"]+)"')
INSTEAD = "import the benchmarks.json (or benchmarks.csv) GuideLLM wrote with it"


def sniff(path: Path, text: str) -> str | None:
    """What a GuideLLM file that is not JSON holds: ``csv``, ``yaml``, ``html``, ``console``, or None."""
    head = text[:SNIFF_CHARS]
    suffix = path.suffix.lower()
    if head.lstrip()[:1] == "<" and ("guidellm" in head.lower() or _HTML_DATA.search(head)):
        return "html"
    if suffix in (".yaml", ".yml") or _YAML_REPORT.search(head):
        return "yaml" if _YAML_REPORT.search(head) and _YAML_STRATEGY.search(head) else None
    if _CONSOLE_HEADER.search(head) or _LOG_LINE.search(head):
        return "console"
    if guidellm_csv.looks_like(head):
        return "csv"
    return None


def _peek(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(SNIFF_CHARS)
    except OSError:
        return ""


def is_results(path: Path) -> bool:
    """A GuideLLM result file whose extension is not one of the table or JSON ones (its YAML report)."""
    return path.suffix.lower() in (".yaml", ".yml") and sniff(path, _peek(path)) == "yaml"


def companions(files: list[Path]) -> dict[Path, str]:
    """GuideLLM's files in a directory that are not to be read (why each is skipped): its companions, and the
    CSV or YAML twin of a report beside it (same name, the richer report is read)."""
    kinds = {f: sniff(f, _peek(f)) for f in files if f.suffix.lower() in TEXT_SUFFIXES}
    reports = {f.stem for f in files if f.suffix.lower() == ".json"}
    yaml_reports = {f.stem for f, kind in kinds.items() if kind == "yaml"}
    guidellm_run = any(kinds.values()) or "benchmarks" in reports   # images elsewhere are another tool's
    skip: dict[Path, str] = {}
    for f in files:
        kind = kinds.get(f)
        if f.suffix.lower() in IMAGE_SUFFIXES and guidellm_run:
            skip[f] = "an image (GuideLLM's plot), not results"
        elif kind == "yaml" and f.stem in reports:
            skip[f] = "the YAML twin of the JSON report next to it"
        elif kind == "csv" and f.stem in reports | yaml_reports:
            skip[f] = "the CSV twin of the report next to it (which keeps the per-request times)"
        elif kind == "html":
            skip[f] = "GuideLLM's HTML report page (charts' data: no durations or means), not results"
        elif kind == "console":
            skip[f] = "GuideLLM's console output or log (its printed tables), not results"
    return skip


def _html_version(text: str) -> str:
    found = _HTML_VERSION.search(text)
    return f"GuideLLM {found.group(1)}'s" if found else "GuideLLM's"


def yaml_item_lines(text: str, key: str, start: Where) -> list[Where]:
    """Lines where the items of the top-level YAML sequence ``key`` begin (GuideLLM writes them at column
    0 or indented under the key; best effort: what a message names)."""
    lines = text.splitlines()
    at = next((n for n, ln in enumerate(lines) if ln.rstrip() == f"{key}:"), None)
    if at is None:
        return []
    out: list[Where] = []
    indent: int | None = None
    for n in range(at + 1, len(lines)):
        ln = lines[n]
        if ln and not ln[0].isspace() and not ln.startswith("-"):
            break                                     # the next top-level key
        stripped = ln.lstrip(" ")
        if stripped.startswith("- ") or stripped == "-":
            depth = len(ln) - len(stripped)
            indent = depth if indent is None else indent
            if depth == indent:
                out.append(Where(start.path, n + 1))
    return out


def _yaml(path: Path, text: str, opts: ImportOptions) -> tuple[list[ImportedLevel], dict[str, Any]]:
    start = Where(str(path), 1)
    try:
        # The C loader when PyYAML has it (a report with its requests runs to megabytes); both are safe loaders.
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError(f"{path}:{line}: not valid YAML ({getattr(exc, 'problem', None) or exc}); the file "
                          "looks like GuideLLM's benchmarks.yaml") from None
    doc = obj(doc, start, "a GuideLLM report")
    meta: dict[str, Any] = {}
    try:
        levels = guidellm.report(doc, yaml_item_lines(text, "benchmarks", start), start, meta)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; the file looks like {guidellm.describe(doc)} in YAML") from None
    return levels, meta


def load(path: Path, text: str, kind: str, opts: ImportOptions) -> tuple[list[ImportedLevel], dict[str, Any]]:
    """The levels of a GuideLLM file ``sniff`` recognised; a companion is refused in one line."""
    if kind == "csv":
        return guidellm_csv.load(path, text, opts)
    if kind == "yaml":
        return _yaml(path, text, opts)
    if kind == "html":
        raise ConfigError(f"{path}: {_html_version(text)} HTML report page, not results: its charts' data has no "
                          f"durations or means per level; {INSTEAD}")
    raise ConfigError(f"{path}: GuideLLM's console output or log (its printed tables), not results: the tables "
                      f"round the figures and lack the durations; {INSTEAD}")
