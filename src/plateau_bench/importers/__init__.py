"""Results measured by other tools (or written in a plain table), as plateau-bench levels.

``import_sources`` reads vLLM's and SGLang's serving-benchmark results, GuideLLM's ``benchmarks.json``,
AIPerf's profile exports, inference-perf's lifecycle reports, and CSV or Markdown tables, and returns one
level per run / benchmark / stage / row. Per-request data becomes request records whose metrics
``analysis.metrics`` recomputes; summaries fill only the fields they state (``importers.common``). Each
level's notes say where it came from and what the source did not measure.

``to_vllm_json`` goes the other way: a level in the keys of ``vllm bench serve --save-result``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from plateau_bench.errors import ConfigError, PlateauError
from plateau_bench.importers import aiperf_csv, aiperf_runs, guidellm_files, llmd, table
from plateau_bench.importers.common import (
    Imported,
    ImportedLevel,
    ImportOptions,
    json_values,
    read_text,
    unique_label,
)
from plateau_bench.importers.detect import (
    FORMATS,
    JSON_READERS,
    YAML_SUFFIXES,
    AiperfGroups,
    detect,
    expand,
    is_json,
    llmd_levels,
)
from plateau_bench.importers.export import to_vllm_json, vllm_json_lines
from plateau_bench.importers.inference_perf_files import not_results

__all__ = [
    "FORMATS",
    "ImportOptions",
    "Imported",
    "ImportedLevel",
    "import_sources",
    "to_vllm_json",
    "vllm_json_lines",
]

_META_KEYS = ("engine", "model", "input_len", "output_len")


def _merge(out: Imported, meta: dict[str, Any]) -> None:
    for key in _META_KEYS:
        value = meta.get(key)
        if value is None:
            continue
        if getattr(out, key) is None:
            setattr(out, key, value)
        elif getattr(out, key) != value:
            out.warnings.append(f"the sources disagree on {key} ({getattr(out, key)} and {value}): the first is kept")


# What a parser raises on a value of the wrong type or size deep in a file (a number where a list was, a
# 1e300 where a count was): the file is malformed for its format, said in one line naming it.
_MALFORMED = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError)


def _what(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {str(exc)[:120]}"


def _one_file(path: Path, fmt: str | None, opts: ImportOptions,
              aiperf_groups: AiperfGroups, out: Imported) -> tuple[list[ImportedLevel], dict[str, Any], str]:
    """The levels of one file, its run-wide facts and its format (a malformed value: one ConfigError line)."""
    text = read_text(path)
    if not text.strip():
        raise ConfigError(f"{path}: empty file")
    kind = fmt or "table"
    if fmt is None and (what := not_results(path, text)):
        raise ConfigError(f"{path}: {what}")
    try:
        other = guidellm_files.sniff(path, text) if fmt in (None, "guidellm") and not is_json(text) else None
        if other is not None:   # GuideLLM's CSV or YAML results, or a companion it names in one line
            levels, meta = guidellm_files.load(path, text, other, opts)
            return levels, meta, "guidellm"
        if fmt == "llm-d" or (fmt is None and path.suffix.lower() in YAML_SUFFIXES and not is_json(text)):
            levels, meta = llmd_levels(llmd.yaml_values(path, text), opts)
            return levels, meta, "llm-d"
        if (kind != "table" and (fmt != "aiperf" or is_json(text))) or (fmt is None and is_json(text)):
            values = json_values(path, text)
            kind = fmt or detect(path, values)
            levels, meta = JSON_READERS[kind](path, text, values, opts, aiperf_groups)
            return levels, meta, kind
        if fmt in (None, "aiperf") and (found := aiperf_csv.load(path, text, opts)) is not None:
            return found, {}, "aiperf"
        if fmt == "aiperf":
            raise ConfigError(f"{path}: not one of AIPerf's JSON or CSV exports")
        levels, warnings = table.load(path, text, opts)
    except PlateauError:
        raise
    except _MALFORMED as exc:
        raise ConfigError(f"{path}: not readable as {kind}: a field holds a value of an unexpected type or size "
                          f"({_what(exc)})") from None
    out.warnings.extend(warnings)
    return levels, {"input_len": opts.input_len, "output_len": opts.output_len}, kind


def import_sources(paths: list[Path], fmt: str | None = None, opts: ImportOptions | None = None) -> Imported:
    """Every level in ``paths`` (files or directories); ``fmt`` forces the format of all of them."""
    opts = opts or ImportOptions()
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"unknown --from {fmt!r}: choose one of {', '.join(FORMATS)}")
    out = Imported()
    aiperf_groups: AiperfGroups = defaultdict(lambda: defaultdict(list))
    files, skipped = expand(paths)
    out.warnings.extend(skipped)
    for path in files:
        levels, meta, kind = _one_file(path, fmt, opts, aiperf_groups, out)
        out.levels.extend(levels)
        _merge(out, meta)
        if kind not in out.formats:
            out.formats.append(kind)
    try:
        out.levels.extend(aiperf_runs.levels(aiperf_groups, opts, out))
    except _MALFORMED as exc:
        raise ConfigError(f"{', '.join(str(d) for d in aiperf_groups)}: not readable as AIPerf's files: a field "
                          f"holds a value of an unexpected type or size ({_what(exc)})") from None
    if not out.levels:
        raise ConfigError(f"no level found in {', '.join(str(p) for p in paths)}")
    taken: set[str] = set()
    for lv in out.levels:
        lv.level.label = unique_label(lv.level.label, taken)
    known_in, known_out = _record_lengths(out.levels)
    out.input_len = opts.input_len or out.input_len or known_in
    out.output_len = opts.output_len or out.output_len or known_out
    return out


def _record_lengths(levels: list[ImportedLevel]) -> tuple[int | None, int | None]:
    """Prompt and output lengths when every successful request of every level had the same ones."""
    ok = [r for lv in levels for r in lv.records if r.ok and not r.warmup]
    prompts = {r.prompt_tokens for r in ok}
    outputs = {r.output_tokens for r in ok}
    return (next(iter(prompts)) if len(prompts) == 1 and 0 not in prompts else None,
            next(iter(outputs)) if len(outputs) == 1 and 0 not in outputs else None)
