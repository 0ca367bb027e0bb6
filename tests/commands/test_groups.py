"""Option groups: a group's flags reach typer as ordinary flags, the command gets the struct, and a flag
declared twice is refused when the command is defined."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from plateau_bench.commands import options as o
from plateau_bench.commands import roofline_opts as r
from plateau_bench.commands.groups import OptionGroup, grouped


class Size(OptionGroup, frozen=True, kw_only=True):
    width: Annotated[int, typer.Option("--width", help="How wide.")] = 3
    name: Annotated[str | None, typer.Option("--name")] = None


class Bigger(Size, frozen=True, kw_only=True):
    depth: Annotated[int, typer.Option("--depth")] = 1


def test_the_command_gets_the_struct_built_from_the_groups_flags() -> None:
    seen: list[object] = []
    app = typer.Typer()

    @app.command()
    @grouped
    def cmd(size: Bigger = Bigger(), loud: Annotated[bool, typer.Option("--loud")] = False) -> None:
        """Docstring kept as the help."""
        seen.append((size, loud))

    runner = CliRunner()
    assert runner.invoke(app, ["--width", "7", "--depth", "2", "--loud"]).exit_code == 0
    assert runner.invoke(app, []).exit_code == 0
    assert seen == [(Bigger(width=7, name=None, depth=2), True), (Bigger(), False)]
    help_text = runner.invoke(app, ["--help"]).output
    assert "--width" in help_text and "--depth" in help_text and "Docstring kept" in help_text


def test_a_flag_declared_twice_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="width declared twice"):
        @grouped
        def cmd(size: Size = Size(), width: Annotated[int, typer.Option("--width")] = 1) -> None:
            pass


def test_the_commands_groups_do_not_overlap() -> None:
    """The shared groups each declare their own flags: none appears in two of them."""
    import msgspec

    groups = (o.TargetFlags, o.TwinFlags, o.PlacementFlags, o.WorkloadFlags, o.OutputFlags, r.RooflineFlags)
    names = [f.name for g in groups for f in msgspec.structs.fields(g)]
    assert len(names) == len(set(names))
