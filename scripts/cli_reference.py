#!/usr/bin/env python3
"""Write docs/reference/cli.md, every command and option, from the CLI itself.

    .venv/bin/python scripts/cli_reference.py           # rewrite the page
    .venv/bin/python scripts/cli_reference.py --check   # exit 1 when the page is not what the CLI says

Typer's own documentation generator walks the commands, so the page says what ``--help`` says;
tests/test_cli_reference.py fails when a flag changes and the page was not regenerated.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "cli.md"
INTRO = ("<!-- written by scripts/cli_reference.py from the CLI: do not edit by hand -->\n\n"
         "Every command and option, as `plateau COMMAND --help` gives them. `run`, `sweep`, `sim` and `tune` "
         "also read their flags from a YAML file (`--config`, keys: the flags without the dashes).\n\n")


def page() -> str:
    import typer
    from typer.cli import get_docs_for_click

    from plateau_bench.cli import app

    command = typer.main.get_command(app)
    with typer.Context(command) as ctx:   # type: ignore[arg-type]
        docs = get_docs_for_click(obj=command, ctx=ctx, name="plateau", title="Commands and options")
    head, _, body = docs.partition("\n")
    return head + "\n\n" + INTRO + body.lstrip("\n").rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = page()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is not what the CLI says: run scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
