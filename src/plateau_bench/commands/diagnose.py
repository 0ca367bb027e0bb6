"""``plateau diagnose DIR``: re-run the analysis on saved results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from plateau_bench.analysis.diagnosis import diagnose
from plateau_bench.commands.options import wide_console
from plateau_bench.errors import ResultsError
from plateau_bench.report.results import load_levels, load_summary
from plateau_bench.report.terminal import level_table, summary_sentence, verdict_text
from plateau_bench.sweep import plateau_and_knee, search_config_of


def saved_engine(summary: dict[str, Any]) -> str | None:
    target = summary.get("target") or {}
    engine = target.get("engine")
    return str(engine) if engine else None


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    def diagnose_cmd(
        run_dir: Annotated[Path, typer.Argument(help="A result directory written by sweep, run or sim.")],
        as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON only.")] = False,
    ) -> None:
        """Say why throughput stopped growing in a saved sweep, with evidence and what to try next."""
        summary = load_summary(run_dir)
        levels = load_levels(run_dir)
        if not levels:
            raise ResultsError(f"{run_dir} holds no finished level yet: nothing to diagnose")
        search = search_config_of(summary.get("spec", {}))
        plateau, knee = plateau_and_knee(levels, search)
        verdict = diagnose(levels, engine=saved_engine(summary), plateau_gain=search.plateau_gain,
                           plateau=plateau, knee=knee)
        if as_json:
            out = {"verdict": verdict.to_dict(),
                   "plateau": plateau.to_dict() if plateau else None,
                   "knee": knee.to_dict() if knee else None}
            typer.echo(msgspec.json.format(msgspec.json.encode(out), indent=2).decode())
            return
        console = wide_console()
        console.print(level_table(levels, title=f"{run_dir}"))
        console.print(summary_sentence(levels, plateau.to_dict() if plateau else None,
                                       knee.to_dict() if knee else None))
        console.print(verdict_text(verdict.to_dict()))
