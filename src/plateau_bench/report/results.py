"""Result directories: written as they are produced, read back for diagnose/report/compare/resume.

Layout of ``--out DIR``::

    result.json      summary: schema_version, tool, host, spec (secrets removed), target info,
                     one entry per finished level, and (for sweeps) plateau/knee/stop reason/verdict.
                     Rewritten atomically (temp file + rename) after every level.
    requests.jsonl   one line per finished request: the RequestRecord plus its level label.
                     Appended as requests finish and flushed at least once a second.
    telemetry.jsonl  one line per telemetry sample (server /metrics, client health), per level.

A crash or Ctrl-C therefore keeps every finished request and every finished level.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.records import SCHEMA_VERSION, LevelResult, RequestRecord

RESULT_FILE = "result.json"
REQUESTS_FILE = "requests.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"

_encoder = msgspec.json.Encoder()


class RequestLine(msgspec.Struct, kw_only=True):
    level: str
    record: RequestRecord


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def tool_info() -> dict[str, str]:
    from plateau_bench import __version__

    return {"name": "plateau-bench", "version": __version__}


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class ResultWriter:
    """Owns one result directory while a run or sweep is in progress."""

    def __init__(self, out_dir: str | Path, *, kind: str, spec: dict[str, Any],
                 target_info: dict[str, Any] | None = None, resume: bool = False) -> None:
        self.dir = Path(out_dir)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / ".write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(f"cannot write to output directory {self.dir}: {exc.strerror or exc}") from None
        self.summary: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": kind,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "tool": tool_info(),
            "host": host_info(),
            "spec": spec,
            "target": target_info or {},
            "levels": [],
        }
        if resume and (self.dir / RESULT_FILE).exists():
            previous = load_summary(self.dir)
            self.summary["levels"] = previous.get("levels", [])
            self.summary["created"] = previous.get("created", self.summary["created"])
        mode = "ab" if resume else "wb"
        self._requests = open(self.dir / REQUESTS_FILE, mode)  # noqa: SIM115 - kept open for the run
        self._telemetry = open(self.dir / TELEMETRY_FILE, mode)  # noqa: SIM115
        self._last_flush = time.monotonic()
        self.flush_summary()

    # -- streaming writes -------------------------------------------------------------
    def add_request(self, level: str, record: RequestRecord) -> None:
        self._requests.write(_encoder.encode(RequestLine(level=level, record=record)))
        self._requests.write(b"\n")
        now = time.monotonic()
        if now - self._last_flush >= 1.0:
            self._requests.flush()
            self._telemetry.flush()
            self._last_flush = now

    def add_requests(self, level: str, records: list[RequestRecord]) -> None:
        for r in records:
            self.add_request(level, r)
        self._requests.flush()

    def add_telemetry(self, level: str, sample: dict[str, Any]) -> None:
        self._telemetry.write(_encoder.encode({"level": level, **sample}))
        self._telemetry.write(b"\n")

    # -- summary ------------------------------------------------------------------------
    def add_level(self, level: LevelResult) -> None:
        self.summary["levels"].append(msgspec.to_builtins(level))
        self.flush_summary()

    def set(self, key: str, value: Any) -> None:
        self.summary[key] = value
        self.flush_summary()

    def flush_summary(self) -> None:
        self._requests.flush() if hasattr(self, "_requests") else None
        _atomic_write(self.dir / RESULT_FILE, msgspec.json.format(_encoder.encode(self.summary), indent=2))

    def close(self) -> None:
        self._requests.close()
        self._telemetry.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_summary(path: str | Path) -> dict[str, Any]:
    """Read result.json from a directory (or the file itself), checking the schema."""
    p = Path(path)
    file = p / RESULT_FILE if p.is_dir() else p
    if not file.exists():
        raise ResultsError(f"no results in {p}: {RESULT_FILE} not found")
    try:
        data = msgspec.json.decode(file.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        raise ResultsError(f"cannot read {file}: {exc}") from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ResultsError(f"{file} is not a plateau-bench result (no schema_version)")
    version = data["schema_version"]
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultsError(
            f"{file} was written with result schema {version}; this plateau-bench reads up to "
            f"{SCHEMA_VERSION} (upgrade plateau-bench)"
        )
    return data


def load_levels(path: str | Path) -> list[LevelResult]:
    data = load_summary(path)
    return [msgspec.convert(lv, LevelResult) for lv in data.get("levels", [])]


def load_requests(path: str | Path, level: str | None = None) -> dict[str, list[RequestRecord]]:
    """Request records grouped by level label (optionally just one level). Torn last lines are skipped."""
    file = Path(path) / REQUESTS_FILE
    out: dict[str, list[RequestRecord]] = {}
    if not file.exists():
        return out
    decoder = msgspec.json.Decoder(RequestLine)
    with open(file, "rb") as fh:
        for line in fh:
            try:
                item = decoder.decode(line)
            except msgspec.DecodeError:
                continue
            if level is None or item.level == level:
                out.setdefault(item.level, []).append(item.record)
    return out


def load_telemetry(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    file = Path(path) / TELEMETRY_FILE
    out: dict[str, list[dict[str, Any]]] = {}
    if not file.exists():
        return out
    with open(file, "rb") as fh:
        for line in fh:
            try:
                item = msgspec.json.decode(line)
            except msgspec.DecodeError:
                continue
            out.setdefault(item.get("level", ""), []).append(item)
    return out
