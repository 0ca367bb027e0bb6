"""``plateau import PATH... --out DIR``: results other tools (or a plain table) measured, as a result directory.

The levels are read by ``plateau_bench.importers`` and written as a native result (``kind: "import"``):
``result.json`` with one level per run / benchmark / stage / row and their plateau and knee, and
``requests.jsonl`` for the levels the source gave per request. ``diagnose``, ``report`` and ``compare``
then read it as any other run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.analysis.plateau import plateau_and_knee
from plateau_bench.analysis.unmeasured import summary_unmeasured
from plateau_bench.commands.answer_flags import AS_GIVEN, GivenLengths
from plateau_bench.commands.groups import grouped
from plateau_bench.commands.options import Json, Overwrite, wide_console
from plateau_bench.errors import ConfigError
from plateau_bench.importers import FORMATS, Imported, ImportOptions, import_sources
from plateau_bench.report.terminal import level_table, summary_sentence
from plateau_bench.result import ResultFile, RunSpec, SearchSettings, TargetRecord
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import ResultWriter, host_info, now_utc, tool_info

MODES = ("burst", "steady")


class ImportSummary(msgspec.Struct, kw_only=True):
    """What ``plateau import --json`` prints."""

    out: str
    formats: list[str]
    levels: list[str]
    with_records: list[str]
    warnings: list[str]


def result_of(imported: Imported) -> ResultFile:
    """The result tree of an import: what the sources say about the run, and their levels."""
    defaults = WorkloadSpec()
    workload = WorkloadSpec(input_len=imported.input_len or defaults.input_len,
                            output_len=imported.output_len or defaults.output_len)
    accuracy: dict[str, str | int | float | bool | None] = {
        "input_len": "given" if imported.input_len else "unknown (the default is shown)",
        "output_len": "given" if imported.output_len else "unknown (the default is shown)"}
    spec = RunSpec(workload=workload, prompt_tokens_source=f"imported ({', '.join(imported.formats)})",
                   prompt_accuracy=accuracy)
    for lv in imported.levels:
        if not lv.records:   # a level summary: the figures its source left at 0 are unknown, said in the file
            lv.level.unmeasured = summary_unmeasured(lv.level)
    levels = [lv.level for lv in imported.levels]
    plateau, knee = plateau_and_knee(levels, SearchSettings())
    # No verdict is stored: ``plateau diagnose`` derives it from the levels, with the analysis of the day.
    return ResultFile(kind="import", created=now_utc(), tool=tool_info(), host=host_info(), spec=spec,
                      target=TargetRecord(model=imported.model, engine=imported.engine, kind="import"),
                      levels=levels, plateau=plateau, knee=knee)


@grouped
def import_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Result files or directories of another tool, or CSV / "
                                                "Markdown tables (one row per level).")],
    out: Annotated[Path, typer.Option("--out", help="Result directory to write (result.json, requests.jsonl).")],
    source: Annotated[str | None, typer.Option("--from", help=f"{' | '.join(FORMATS)} (default: detected from "
                                               "the content).")] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="burst (num_requests = C, all at once) | steady: how "
                                             "a table's levels were run (default: burst, said in the notes).")] = None,
    lengths: GivenLengths = AS_GIVEN,
    concurrency: Annotated[int | None, typer.Option("--concurrency", help="The concurrency of a single-level "
                                                    "source that does not record it (AIPerf records alone, "
                                                    "SGLang without num_prompts).")] = None,
    overwrite: Overwrite = False,
    as_json: Json = False,
) -> None:
    """Import results measured by vLLM, SGLang, GuideLLM, AIPerf or GenAI-Perf, inference-perf, llm-d or a table."""
    if mode is not None and mode not in MODES:
        raise ConfigError(f"unknown --mode {mode!r}: choose one of {', '.join(MODES)}")
    lengths.check()
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1 (got {concurrency})")
    imported = import_sources(paths, source, ImportOptions(mode=mode, input_len=lengths.input_len,
                                                           output_len=lengths.output_len, concurrency=concurrency))
    result = result_of(imported)
    levels = result.levels
    result.levels = []
    with ResultWriter(out, result, existing="overwrite" if overwrite else "refuse") as writer:
        for lv in imported.levels:
            if lv.records:
                writer.add_requests(lv.level.label, lv.records)
        for level in levels:
            writer.add_level(level)
    if as_json:
        summary = ImportSummary(out=str(out), formats=imported.formats, levels=[lv.label for lv in levels],
                                with_records=[lv.level.label for lv in imported.levels if lv.records],
                                warnings=imported.warnings)
        typer.echo(msgspec.json.format(msgspec.json.encode(summary), indent=2).decode())
        return
    console = wide_console()
    for warning in imported.warnings:
        console.print(f"warning: {warning}", highlight=False)
    console.print(level_table(levels, title=f"{out} (imported from {', '.join(imported.formats)})"))
    n_rec = sum(1 for lv in imported.levels if lv.records)
    console.print(f"{len(levels)} level(s): {n_rec} from per-request records, {len(levels) - n_rec} from "
                  "summaries (each level's notes say what its source did not measure)", highlight=False)
    console.print(summary_sentence(levels, result.plateau, result.knee), highlight=False)
    console.print(f"next: plateau diagnose {out} (why it plateaus) | plateau report {out} --html report.html",
                  highlight=False)


def register(app: typer.Typer) -> None:
    app.command("import")(import_cmd)
