"""``vllm bench sweep serve -o DIR -e NAME``: what it leaves under ``DIR/NAME`` (vLLM 0.32,
``vllm/benchmarks/sweep/serve.py``).

One folder per parameter combination (``SERVE-<name>-BENCH-<name>``, or just one side) holding
``run=<n>.json`` per run (a ``vllm bench serve --save-result`` file, plus ``run_number`` and the
combination's parameters), ``warmup.json`` (``--warmup-num-prompts``: not measured), ``summary.json``
(the combination's runs again, in one list) and ``run=<n>.failure.json`` (``--continue-on-error``); at
the top ``summary.csv`` (every run in one pandas table, lists as text) and ``SERVE-...-failure.json``.

The runs are read; every other file repeats them or is not a measurement, and is skipped with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

RUN_FILE = re.compile(r"run=\d+\.json")
NOT_RESULTS = {"summary.json": "the sweep's runs again, in one list",
               "warmup.json": "the sweep's warm-up run (not measured)"}


def _is_run(f: Path) -> bool:
    return RUN_FILE.fullmatch(f.name) is not None


def companions(files: list[Path]) -> dict[Path, str]:
    """The files beside a combination's ``run=<n>.json`` that are not results (why each is skipped)."""
    if not any(_is_run(f) for f in files):
        return {}
    skip: dict[Path, str] = {}
    for f in files:
        if f.name in NOT_RESULTS:
            skip[f] = NOT_RESULTS[f.name]
        elif f.name.endswith(".failure.json"):
            skip[f] = "a run that failed (its error, no measurement)"
    return skip


def experiment_files(directory: Path) -> tuple[list[Path], list[tuple[Path, str]]] | None:
    """The runs of a sweep's experiment directory, by combination, and what was skipped; None when
    ``directory`` is not one (no sub-folder holds a ``run=<n>.json``)."""
    combos = sorted(d for d in directory.iterdir() if d.is_dir() and any(_is_run(f) for f in d.iterdir()))
    if not combos:
        return None
    runs: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for combo in combos:
        inside = sorted(f for f in combo.iterdir() if f.is_file())
        runs.extend(f for f in inside if _is_run(f))
        skipped.extend(companions(inside).items())
    for f in sorted(directory.iterdir()):
        if f.is_file():
            skipped.append((f, "the sweep's runs again, in one table" if f.name == "summary.csv"
                            else "not a run of the sweep"))
    return runs, skipped
