"""The architecture, checked: one-way layers, small modules, short functions.

Layers, lowest first (a module may import from its own layer and those below, never above):

    base       errors, units, aio, spec, redaction, records (requests and samples), result(_parts), level_run,
               progress, store, store_migrate, run_view
    pure       workload, telemetry, analysis, roofline (no I/O into results; analysis never sees the network;
                                                        roofline imports base modules only)
    edges      driver (HTTP), sim (the twin), report (presentation), importers (other tools' results in)
    top        sweep (orchestration), commands, cli, __main__

and within the middle layers: analysis imports no telemetry I/O (scraper, gpu), the driver never computes
statistics (no analysis), the twin imports neither driver nor analysis, the presentation neither
driver, twin nor orchestration, and reads no file (no store: the commands load, report renders). Lazy
imports inside functions count the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "plateau_bench"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60   # body lines; a longer function says why with "# long:" on its def line

BASE = {"errors", "units", "aio", "spec", "records", "result", "result_parts", "level_run", "progress", "store",
        "store_migrate", "run_view", "answers", "redaction", "_version", "__init__"}
# part -> the parts it must never import
FORBIDDEN: dict[str, set[str]] = {
    "base": {"workload", "analysis", "roofline", "driver", "sim", "report", "sweep", "commands", "cli", "importers"},
    "workload": {"analysis", "driver", "sim", "report", "sweep", "commands", "cli", "telemetry", "importers"},
    "telemetry": {"analysis", "driver", "sim", "report", "sweep", "commands", "cli", "workload", "importers"},
    "analysis": {"driver", "sim", "report", "sweep", "commands", "cli", "workload",
                 "telemetry.scraper", "telemetry.gpu", "store", "importers"},
    "roofline": {"workload", "telemetry", "analysis", "driver", "sim", "report", "sweep", "commands", "cli",
                 "importers"},
    "driver": {"analysis", "sim", "report", "sweep", "commands", "cli", "importers"},
    "sim": {"analysis", "driver", "report", "sweep", "commands", "cli", "importers"},
    "importers": {"driver", "sim", "report", "sweep", "commands", "cli", "workload", "telemetry", "roofline"},
    "report": {"driver", "sim", "sweep", "commands", "cli", "store", "store_migrate"},   # renders what it is handed
    "sweep": {"commands", "cli"},
    "commands": {"cli"},
}


ROOT = "<package root>"   # ``import plateau_bench`` / ``from plateau_bench import x``


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def part_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    top = rel.parts[0]
    if len(rel.parts) == 1 and top in BASE:
        return "base"
    return top


def imported(path: Path) -> set[str]:
    """``plateau_bench.x.y`` imports of a module as ``x.y``, lazy ones included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("plateau_bench"):
            out.add(node.module.removeprefix("plateau_bench").lstrip("."))
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("plateau_bench").lstrip(".") for a in node.names
                       if a.name.startswith("plateau_bench"))
    return {m or ROOT for m in out}


def _violates(target: str, forbidden: set[str]) -> bool:
    return any(target == f or target.startswith(f + ".") for f in forbidden)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_one_way(path: Path) -> None:
    part = part_of(path)
    forbidden = FORBIDDEN.get(part, set())
    bad = sorted(t for t in imported(path) if _violates(t, forbidden))
    assert not bad, f"{path.relative_to(PACKAGE)} ({part}) imports {bad}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_imports_the_package_root(path: Path) -> None:
    """The root is the public API for scripts (it imports the store): inside the package, import the module."""
    assert ROOT not in imported(path), f"{path.relative_to(PACKAGE)} imports the package root"


def test_the_checker_sees_a_root_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from plateau_bench import __version__\n")
    assert imported(module) == {ROOT}


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from plateau_bench.analysis.metrics import compute_level\n")
    assert _violates(next(iter(imported(module))), FORBIDDEN["driver"])


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(PACKAGE)} has {lines} lines"


def long_functions(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            body = node.end_lineno - node.body[0].lineno + 1
            reason = "# long:" in lines[node.lineno - 1]
            if body > MAX_FUNCTION_LINES and not reason:
                out.append(f"{node.name} ({body} lines)")
    return out


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_stay_short(path: Path) -> None:
    assert not long_functions(path), f"{path.relative_to(PACKAGE)}: {long_functions(path)}"
