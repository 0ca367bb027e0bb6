"""``--config FILE`` and ``--print-config``: a benchmark's flags kept in a YAML file.

The keys are the commands' own long flags without the dashes (``input-len: 1024``, ``concurrency:
[1, 16, 64]``; ``input_len`` is read too), so a file and a command line say the same thing. Flags on
the command line override the file (the file fills click's ``default_map``, which a flag given on the
command line always wins over). Each value is checked by its flag's own type when the file is read,
and a bad one is a one-line error naming the file and the key. A list becomes the comma list the flag
takes; a flag given several times (``--header``) takes a list.

``--print-config`` prints the effective configuration (every flag given, by the file or the command
line) as such a file and exits without measuring. Every result directory of ``run``, ``sweep``,
``sim`` and ``tune`` keeps ``config.yaml``, the same file, so ``plateau sweep --config
runs/x/config.yaml`` measures the same thing again (into a new directory: the output directory and
``--resume`` are not kept, nor are credentials: the API key, secret headers and a URL's userinfo;
``--prompt-salt`` only when it was given, since each run sends new prompt text by default).
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import time
from pathlib import Path
from typing import Any

import typer
import yaml
from typer.core import TyperCommand

from plateau_bench._version import __version__
from plateau_bench.errors import ConfigError
from plateau_bench.redaction import is_secret_header, split_userinfo

CONFIG_NAME = "config.yaml"
_NOT_KEPT = frozenset({"config_file", "print_config", "out", "resume", "overwrite", "api_key", "secret_header"})
_GIVEN = ("COMMANDLINE", "DEFAULT_MAP", "ENVIRONMENT")
_FILE = "plateau.config_file"
# Where the running command saved results: set by the command once they are on disk (from its event
# loop too, which a context variable would not carry back), read when it returns. One command a process.
_saved_in: list[Path] = []


def note_result_dir(path: Path) -> None:
    """The running command saved results in ``path``: its config is kept there when it returns."""
    _saved_in[:] = [path]


def load_config(ctx: typer.Context, param: Any, value: Path | None) -> Path | None:
    """``--config``'s callback (eager: before the other flags are read): the file becomes their defaults."""
    if value is None or ctx.resilient_parsing:
        return value
    data = _read(value)
    flags = _flags(ctx.command)
    defaults: dict[str, Any] = {}
    for key, raw in data.items():
        p = flags.get(str(key).replace("_", "-"))
        if p is None:
            close = difflib.get_close_matches(str(key), list(flags), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"config file {value}: unknown key {key!r}{hint}; the keys are the flags of "
                              f"plateau {ctx.command.name} without the dashes")
        if p.name in ("config_file", "print_config"):
            raise ConfigError(f"config file {value}: {key} cannot be set in a config file")
        defaults[p.name] = _checked(p, str(key), raw, value)
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[_FILE] = value
    return value


def _read(path: Path) -> dict[Any, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path}: not text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ConfigError(f"config file {path}: not YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected flags and their values (input-len: 1024), "
                          f"not a {type(data).__name__}")
    return data


def _flags(command: Any) -> dict[str, Any]:
    """Each long flag's name without the dashes -> its parameter."""
    out: dict[str, Any] = {}
    for p in command.params:
        for opt in getattr(p, "opts", []):
            if opt.startswith("--"):
                out[opt[2:]] = p
    return out


def _checked(p: Any, key: str, raw: Any, path: Path) -> Any:
    """The value as the flag takes it from a command line: text, a list for a repeated flag, a bool for
    a switch. Its type checks it as it checks the flag (``ConfiguredCommand.parse_args`` names the file)."""
    if isinstance(raw, dict):
        raise ConfigError(f"config file {path}: {key}: expected a value or a list, not a mapping")
    if p.multiple:
        return [str(v) for v in raw] if isinstance(raw, list) else [str(raw)]
    if isinstance(raw, list):
        return ",".join(str(v) for v in raw)
    if raw is None or isinstance(raw, bool) or getattr(p, "is_flag", False):
        return raw
    return str(raw)


def effective(command: Any, ctx: typer.Context, *, keep: bool) -> tuple[dict[str, Any], list[str]]:
    """The flags given (by a file, the command line or the environment) as config keys, and what was
    left out and why. ``keep``: for a result directory (the output and resume flags left out too)."""
    out: dict[str, Any] = {}
    left: list[str] = []
    named = {str(n).strip().lower() for n in ctx.params.get("secret_header") or ()}   # --secret-header NAME
    for p in command.params:
        name, opts = p.name, [o for o in getattr(p, "opts", []) if o.startswith("--")]
        if not opts or name not in ctx.params or name in ("config_file", "print_config"):
            continue
        source = ctx.get_parameter_source(name)
        if source is None or source.name not in _GIVEN:
            continue
        key, value = opts[0][2:], ctx.params[name]
        if name in ("api_key", "secret_header"):
            left.append(f"{key}: a credential, never written")
            continue
        if keep and name in _NOT_KEPT:
            continue
        out[key] = _plain(name, value, left, named)
    return out, left


def _plain(name: str, value: Any, left: list[str], named: set[str]) -> Any:
    if name == "url" and isinstance(value, str):
        bare, userinfo = split_userinfo(value)
        if userinfo is not None:
            left.append("url: its user and password, never written")
        return bare
    if name == "header" and isinstance(value, list | tuple):
        kept = [h for h in value if not is_secret_header(str(h).partition(":")[0], tuple(named))]
        if len(kept) < len(value):
            left.append("header: secret headers, never written")
        return kept
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain("", v, left, named) for v in value]
    return value


def render(command_name: str, config: dict[str, Any], left: list[str], *, saved: bool) -> str:
    """A config file: a header saying what it is, then the keys."""
    head = [f"# plateau {command_name} --config FILE: the flags of one benchmark (plateau {__version__}, "
            f"{time.strftime('%Y-%m-%d')})"]
    if saved:
        head.append("# kept with its results: a new run measures the same thing again, into a new directory")
    head += [f"# left out: {line}" for line in left]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True) if config else ""
    return "\n".join(head) + "\n" + body


class ConfiguredCommand(TyperCommand):
    """A command that takes ``--config`` and ``--print-config`` and keeps its config with its results."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """A value from the config file that its flag's type refuses: one line naming the file and key."""
        try:
            return list(super().parse_args(ctx, args))
        except typer.BadParameter as exc:
            param: Any = getattr(exc, "param", None)
            source = ctx.get_parameter_source(param.name) if param is not None and param.name else None
            if param is None or source is None or source.name != "DEFAULT_MAP":
                raise
            key = next((o[2:] for o in param.opts if o.startswith("--")), param.name)
            raise ConfigError(f"config file {ctx.meta.get(_FILE)}: {key}: {exc.message}") from None

    def invoke(self, ctx: Any) -> Any:
        if ctx.params.pop("print_config", False):
            config, left = effective(self, ctx, keep=False)
            typer.echo(render(self.name or "", config, left, saved=False), nl=False)
            return None
        _saved_in.clear()
        try:
            return super().invoke(ctx)
        finally:
            self._keep(ctx)
            _saved_in.clear()

    def _keep(self, ctx: Any) -> None:
        """``config.yaml`` into the directory the command saved results in (``note_result_dir``); a resumed
        run keeps the one its first run wrote."""
        where = _saved_in[0] if _saved_in else None
        if where is None or ctx.params.get("resume") or not where.is_dir():
            return
        config, left = effective(self, ctx, keep=True)
        with contextlib.suppress(OSError):   # the results are what matters; they are saved already
            (where / CONFIG_NAME).write_text(render(self.name or "", config, left, saved=True))
