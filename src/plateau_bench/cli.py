"""The ``plateau`` command: commands only (parse, call, print).

Each group of commands lives in ``plateau_bench.commands.<name>`` and registers itself on the
one Typer app. Every ``PlateauError`` becomes one line on stderr and exit code 2 (in ``_Commands``, the
one place that catches it); Ctrl-C exits 130 and SIGTERM 143, both after the result files have been
flushed by the command that was running.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from plateau_bench.aio import interrupted_by, interrupted_exit_code, treat_sigterm_as_interrupt
from plateau_bench.errors import PlateauError


class _Commands(TyperGroup):
    """Turns a PlateauError from any command into one line on stderr and exit code 2, and an interrupt
    the command did not report itself into one line and 130 (Ctrl-C) or 143 (SIGTERM): Typer would
    otherwise turn it into a silent 130 whatever the signal."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click Context; the type is not public
        try:
            return super().invoke(ctx)
        except PlateauError as exc:
            typer.echo(f"plateau: error: {exc}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.echo(f"plateau: {interrupted_by()}", err=True)
            raise typer.Exit(interrupted_exit_code()) from None


app = typer.Typer(
    cls=_Commands,
    name="plateau",
    help="Find how many tokens/s an LLM deployment serves, where it stops scaling, and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_COMMAND_MODULES = ("run", "sweep", "sim", "diagnose", "report", "compare", "schema", "roofline", "import_cmd",
                    "calibrate", "capacity", "tune")

for _name in _COMMAND_MODULES:
    importlib.import_module(f"plateau_bench.commands.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    treat_sigterm_as_interrupt()
    try:
        app(args=argv, prog_name="plateau", standalone_mode=True)
    except KeyboardInterrupt:
        print(f"plateau: {interrupted_by()}", file=sys.stderr)
        raise SystemExit(interrupted_exit_code()) from None
