"""Shared by the importer tests: the fixture files and the CLI as a user runs it (errors as one line, code 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import typer

from plateau_bench.commands import diagnose, import_cmd
from plateau_bench.errors import PlateauError
from plateau_bench.importers import ImportOptions, import_sources
from plateau_bench.importers.common import Imported

DATA = Path(__file__).parent / "data"


def load(*names: str, fmt: str | None = None, mode: str | None = None, input_len: int | None = None,
         output_len: int | None = None, concurrency: int | None = None) -> Imported:
    """The levels of fixture files, as ``plateau import`` reads them."""
    return import_sources([DATA / n for n in names], fmt, ImportOptions(mode=mode, input_len=input_len,
                                                                        output_len=output_len,
                                                                        concurrency=concurrency))


def cli_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    import_cmd.register(app)
    diagnose.register(app)
    return app


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        cli_app()(args=argv, prog_name="plateau", standalone_mode=True)
    except SystemExit as exc:
        code = int(exc.code or 0)
    except PlateauError as exc:
        print(f"plateau: error: {exc}", file=sys.stderr)
        code = 2
    out, err = capsys.readouterr()
    return code, out, err
