"""Shared by the importer tests: the fixture files, and their levels as ``plateau import`` reads them."""

from __future__ import annotations

from pathlib import Path

from plateau_bench.importers import ImportOptions, import_sources
from plateau_bench.importers.common import Imported

DATA = Path(__file__).parent / "data"


def load(*names: str, fmt: str | None = None, mode: str | None = None, input_len: int | None = None,
         output_len: int | None = None, concurrency: int | None = None) -> Imported:
    """The levels of fixture files, as ``plateau import`` reads them."""
    return import_sources([DATA / n for n in names], fmt, ImportOptions(mode=mode, input_len=input_len,
                                                                        output_len=output_len,
                                                                        concurrency=concurrency))

