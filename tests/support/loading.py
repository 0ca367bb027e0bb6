"""Test helpers shared across test modules: a repository script as a module, the CLI called in-process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

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
