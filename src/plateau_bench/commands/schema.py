"""``plateau schema``: the JSON Schema of result.json, generated from the result types."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from plateau_bench.errors import ConfigError
from plateau_bench.result import result_schema


def schema_text() -> str:
    return msgspec.json.format(msgspec.json.encode(result_schema()), indent=2).decode() + "\n"


def schema_cmd(
    out: Annotated[Path | None, typer.Option("--out", help="Write it to this file instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of result.json (what scripts reading results can rely on)."""
    if out is None:
        typer.echo(schema_text(), nl=False)
        return
    try:
        out.write_text(schema_text())
    except OSError as exc:
        raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {out}", err=True)


def register(app: typer.Typer) -> None:
    app.command("schema")(schema_cmd)
