"""Prompt datasets: a JSONL of prompts, or a ShareGPT-format JSON file.

JSONL: one object per line with ``"prompt"`` or ``"text"`` and optionally ``"output_len"`` or
``"max_tokens"``. Blank lines are skipped; anything else that is not such an object is an error
naming the file and line.

ShareGPT: a JSON list of ``{"conversations": [{"from": "human", "value": ...},
{"from": "gpt", "value": ...}, ...]}``. The first human turn is the prompt and the gpt turn that
follows it gives the reference answer, whose token count (when a tokenizer is available) sets the
output length, as vLLM's ShareGPT sampler does. Entries without a human turn followed by a gpt
turn are skipped, as there; a file with none at all is an error.

The format is recognised from the first non-blank character: ``[`` is ShareGPT, ``{`` is JSONL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.errors import ConfigError

_HUMAN_ROLES = ("human", "user")
_ASSISTANT_ROLES = ("gpt", "assistant", "chatgpt", "bard")


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One prompt read from a dataset; ``reference_output`` is the ShareGPT answer, if any."""

    prompt: str
    output_len: int | None = None
    reference_output: str | None = None


def load_dataset(path: str | Path) -> list[DatasetEntry]:
    """Read every usable entry of a JSONL or ShareGPT file. Raises ConfigError with one line."""
    p = Path(path).expanduser()
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--dataset {p}: cannot read the file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--dataset {p}: not UTF-8 text (byte {exc.start})") from None
    stripped = text.lstrip()
    if not stripped:
        raise ConfigError(f"--dataset {p}: the file is empty")
    if stripped[0] == "[":
        entries = _parse_sharegpt(p, raw)
    elif stripped[0] == "{":
        entries = _parse_jsonl(p, text)
    else:
        raise ConfigError(f"--dataset {p}: expected JSONL objects or a ShareGPT JSON list")
    if not entries:
        raise ConfigError(f"--dataset {p}: no usable prompts in the file")
    return entries


def _parse_jsonl(p: Path, text: str) -> list[DatasetEntry]:
    entries: list[DatasetEntry] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"--dataset {p}:{lineno}: invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"--dataset {p}:{lineno}: expected a JSON object per line")
        prompt = obj.get("prompt", obj.get("text"))
        if not isinstance(prompt, str) or not prompt:
            raise ConfigError(f"--dataset {p}:{lineno}: needs a non-empty \"prompt\" or \"text\" string")
        entries.append(DatasetEntry(prompt=prompt, output_len=_output_len(p, lineno, obj)))
    return entries


def _output_len(p: Path, lineno: int, obj: dict[str, Any]) -> int | None:
    value = obj.get("output_len", obj.get("max_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--dataset {p}:{lineno}: \"output_len\"/\"max_tokens\" must be a positive integer")
    return value


def _parse_sharegpt(p: Path, raw: bytes) -> list[DatasetEntry]:
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"--dataset {p}: invalid JSON ({exc})") from None
    if not isinstance(data, list):
        raise ConfigError(f"--dataset {p}: a ShareGPT file must be a JSON list")
    entries: list[DatasetEntry] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        conversations = item.get("conversations")
        if not isinstance(conversations, list):
            continue
        entry = _first_exchange(conversations)
        if entry is not None:
            entries.append(entry)
    return entries


def _first_exchange(turns: list[Any]) -> DatasetEntry | None:
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("from") not in _HUMAN_ROLES:
            continue
        prompt = turn.get("value")
        if not isinstance(prompt, str) or not prompt:
            return None
        answer = turns[i + 1] if i + 1 < len(turns) else None
        if not isinstance(answer, dict) or answer.get("from") not in _ASSISTANT_ROLES:
            return None
        value = answer.get("value")
        if not isinstance(value, str) or not value:
            return None
        return DatasetEntry(prompt=prompt, reference_output=value)
    return None
