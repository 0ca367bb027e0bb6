"""Test helpers shared across test modules: a repository script as a module, the CLI called in-process.

The CLI two ways: ``plateau(argv, capsys)`` calls ``plateau_bench.cli.main`` as the console script does
(stdout and stderr apart, through capsys); ``invoke(*args)``, which the ``cli`` fixture (tests/conftest.py)
hands out, runs the Typer app under typer's CliRunner and returns click's Result (stdout and stderr
together in ``output``), and needs no capsys, so a module- or session-scoped fixture can use it too.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from typer.testing import Result

ROOT = Path(__file__).resolve().parents[2]


def script(relative: str) -> ModuleType:
    """``bench/NAME.py`` or ``scripts/NAME.py`` imported as the module NAME (registered, as msgspec and
    dataclasses look a type's module up by name)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def plateau(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``plateau ARGV`` in this process: (exit code, stdout, stderr)."""
    from plateau_bench.cli import main

    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


class Cli(Protocol):
    """The ``cli`` fixture's type: ``cli("run", "--url", url, ...)`` runs ``plateau run --url URL ...``."""

    def __call__(self, *args: str, env: Mapping[str, str | None] | None = None,
                 catch_exceptions: bool = True) -> Result: ...


def invoke(*args: str, env: Mapping[str, str | None] | None = None, catch_exceptions: bool = True) -> Result:
    """``plateau ARGS`` in this process under typer's CliRunner: click's Result (exit_code, output).
    ``env`` sets variables for the call only (``{"COLUMNS": "200"}`` widens rich's tables)."""
    from typer.testing import CliRunner

    from plateau_bench.cli import app

    return CliRunner().invoke(app, list(args), env=env, catch_exceptions=catch_exceptions)
