"""Option groups: a concept's flags declared once, handed to a command as one typed struct.

A group is an ``OptionGroup`` (a frozen msgspec struct) whose fields are annotated with their flag,
``gpu: Annotated[str | None, typer.Option("--gpu", ...)] = None``. A command decorated with
``@grouped`` takes the group as one parameter (``hardware: RooflineFlags``): the decorator gives typer
the group's flags in the command's place (the CLI, ``--help`` and config files see ordinary flags)
and calls the command with the struct built from their values. Groups may extend each other (the
fields of the base come first). A flag two groups of one command would both declare is refused when
the command is defined, not when it runs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

import msgspec

F = TypeVar("F", bound=Callable[..., Any])


class OptionGroup(msgspec.Struct, frozen=True, kw_only=True):
    """Base of the option groups (see the module docstring)."""


def _is_group(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, OptionGroup)


def _flags_of(group: type[OptionGroup]) -> list[inspect.Parameter]:
    hints = get_type_hints(group, include_extras=True)
    out = []
    for field in msgspec.structs.fields(group):
        default = inspect.Parameter.empty if field.default is msgspec.NODEFAULT else field.default
        out.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=hints[field.name]))
    return out


def grouped(command: F) -> F:
    """``command`` with each ``OptionGroup`` parameter given to typer as the group's flags."""
    hints = get_type_hints(command, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[OptionGroup], list[str]]] = {}
    for p in inspect.signature(command).parameters.values():
        hint = hints.get(p.name, p.annotation)
        if _is_group(hint):
            flags = _flags_of(hint)
            groups[p.name] = (hint, [f.name for f in flags])
            params += flags
        else:
            params.append(p.replace(annotation=hint, kind=inspect.Parameter.KEYWORD_ONLY))
    names = [p.name for p in params]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TypeError(f"{command.__name__}: {', '.join(twice)} declared twice (a group and the command, or two "
                        "groups)")

    @functools.wraps(command)
    def with_groups(**values: Any) -> Any:
        for name, (group, fields) in groups.items():
            values[name] = group(**{f: values.pop(f) for f in fields})
        return command(**values)

    with_groups.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    with_groups.__annotations__ = {p.name: p.annotation for p in params}
    del with_groups.__wrapped__   # typer reads the signature above, not the command's own
    return with_groups  # type: ignore[return-value]
