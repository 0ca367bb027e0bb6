"""The top floor, checked: thin commands, each flag declared once, tables built by the presentation.

A command function parses into typed option groups, makes one call and hands the result to ``report/``:
it stays short (``MAX_COMMAND_LINES`` body lines, no exemption). A flag is declared in one place (an
alias or an option-group field) and reused; a flag name that two commands use for different things
is listed below with what tells them apart, and the list cannot go stale.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest
import typer.main

from plateau_bench.cli import app

COMMANDS = Path(__file__).resolve().parents[2] / "src" / "plateau_bench" / "commands"
PACKAGE = COMMANDS.parent
MAX_COMMAND_LINES = 40

# flag -> why its declarations are different options (type, unit or meaning), not one option written twice.
SAME_NAME_OTHER_MEANING: dict[str, str] = {
    "--concurrency": "run: one level's workers (an integer); sweep, tune: a grid or the adaptive search; sim: the "
                     "levels simulated (no search); import: the concurrency a file does not record",
    "--mode": "run: burst | steady | rate of one level; sweep: steady | burst for every level; sim: burst | steady "
              "in virtual time; import: how a table's levels were run",
    "--max-concurrency": "run: an open loop's bound on requests in flight; sweep, tune: the search's ceiling",
    "--rate": "run: one open-loop rate (a number); sweep: a list of rates or auto; plan: the rate to serve",
    "--time-scale": "run: one scale (a number); sweep: scales or auto; sim: scales (no auto in virtual time)",
    "--start": "sweep: the search's first concurrency; tune: the server setting measured first (name=value)",
    "--url": "run, sweep: the server benchmarked; tune: where each server it starts answers",
    "--no-metrics": "run, sweep: scrape no /metrics; serve-sim: serve none",
    "--input-len": "run, sweep, sim, tune, roofline: a length or a distribution; predict, plan, import: a plain "
                   "count replacing the calibration's or the source's",
    "--output-len": "as --input-len",
    "--slo": "sweep, tune: a stop rule; predict, plan: the targets predicted against; compare: repeatable profiles",
    "--out": "run, sweep, sim: an optional result directory; import: a required one; tune: its sweeps and "
             "tune.json; calibrate, schema: a file",
    "--model": "run, sweep, tune: the served model's name; roofline: the config it bounds (required); sim, "
               "serve-sim: an optional config to derive the twin from",
    "--gpus": "roofline: the GPUs in the deployment; compare: one count per run (a list)",
}


def flag_declarations(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Every ``--flag`` passed to ``typer.Option`` under ``root``, with where."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "Option":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and a.value.startswith("--")]
                for flag in flags[:1]:
                    out[flag.split("/")[0]].append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_each_flag_is_declared_once() -> None:
    twice = {f: where for f, where in flag_declarations().items() if len(where) > 1}
    unexplained = {f: where for f, where in twice.items() if f not in SAME_NAME_OTHER_MEANING}
    assert not unexplained, f"declared more than once (make it one alias or group field): {unexplained}"


def test_the_list_of_same_named_flags_is_current() -> None:
    declared = flag_declarations()
    stale = sorted(f for f in SAME_NAME_OTHER_MEANING if len(declared.get(f, [])) < 2)
    assert not stale, f"now declared once: remove from SAME_NAME_OTHER_MEANING: {stale}"


def command_functions() -> list[tuple[str, ast.FunctionDef]]:
    out = []
    for path in sorted(COMMANDS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_cmd"):
                out.append((f"{path.name}:{node.name}", node))
    return out


def test_every_command_is_a_command_function() -> None:
    """So that the length rule below sees every command the CLI registers."""
    known = {name.split(":")[1] for name, _ in command_functions()}
    registered = {c.callback.__name__ for c in typer.main.get_command(app).commands.values()}  # type: ignore[attr-defined]
    assert registered <= known, f"commands not defined as *_cmd in commands/: {sorted(registered - known)}"


@pytest.mark.parametrize(("name", "node"), command_functions(), ids=lambda v: v if isinstance(v, str) else "")
def test_command_functions_are_thin(name: str, node: ast.FunctionDef) -> None:
    body = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
    assert body <= MAX_COMMAND_LINES, f"{name} has {body} body lines: move validation into its option groups"


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*.py")), ids=lambda p: p.name)
def test_commands_build_no_tables(path: Path) -> None:
    """Tables are the presentation's (``report/``): a command hands it the typed result."""
    imported = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
    assert "rich.table" not in imported, f"{path.name} builds a Rich table"


def test_the_flag_audit_sees_a_second_declaration(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('import typer\nA = typer.Option("--slo", help="x")\n')
    (tmp_path / "b.py").write_text('from typer import Option\ndef f(x=Option("--slo/--no-slo", "-s")): ...\n')
    assert flag_declarations(tmp_path) == {"--slo": ["a.py:2", "b.py:2"]}
