"""Result directories: written as results are produced, read back for diagnose/report/compare/resume.

Layout of ``--out DIR``::

    result.json      the ``ResultFile`` (``plateau_bench.result``): schema version, tool, host, spec
                     (credentials redacted), target, one entry per finished level, and for sweeps
                     plateau/knee/stop reason/verdict. Rewritten atomically (temp file + rename)
                     after every level.
    requests.jsonl   one line per finished request: the RequestRecord, its level label, attempt and
                     repeat (``--repeat``).
                     Appended as requests finish and flushed at least once a second.
    telemetry.jsonl  one line per telemetry sample (server /metrics, GPUs, client health), per level.

A crash or Ctrl-C therefore keeps every finished request and every finished level. A level measured
again (``--resume`` re-measures damaged levels) gets the next attempt number; readers keep only the
attempt the result's level names, so an interrupted attempt's records never count.

Repeats (``--repeat N``) are not attempts: every repeat of a level's kept attempt stands, and each
request and telemetry line names its repeat (1 when absent). A level's own figures are its first
repeat's, so the readers keep repeat 1 unless asked for another (``repeat=None``: all of them); the
other repeats' figures are in the level's ``repeats``. A repeat interrupted by a crash is measured
again under the next repeat number, so its partial records never mix with a finished one.

An existing result directory is never silently replaced: a writer refuses it unless told to resume
or to overwrite. A full disk or a vanished directory ends the run with one line (``ResultsError``);
what was already flushed stays.

The presentation reads nothing itself: ``load_runs`` gives the commands the runs to hand it
(``run_view.ReportRun``, named by directory), each with a loader of its kept attempts' records.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import platform
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from plateau_bench.errors import ConfigError, ResultsError
from plateau_bench.records import HealthSample, RequestRecord, TelemetrySample
from plateau_bench.result import SCHEMA_VERSION, HostInfo, LevelResult, ResultFile, ToolInfo
from plateau_bench.run_view import ReportRun, RunRecords
from plateau_bench.store_migrate import migrate

RESULT_FILE = "result.json"
REQUESTS_FILE = "requests.jsonl"
TELEMETRY_FILE = "telemetry.jsonl"
FILES = (RESULT_FILE, REQUESTS_FILE, TELEMETRY_FILE)

Existing = Literal["refuse", "overwrite", "resume"]

_encoder = msgspec.json.Encoder()


class RequestLine(msgspec.Struct, kw_only=True):
    level: str
    record: RequestRecord
    attempt: int = 1
    repeat: int = 1


def host_info() -> HostInfo:
    return HostInfo(hostname=socket.gethostname(), platform=platform.platform(),
                    python=platform.python_version(), cpu_count=os.cpu_count())


def tool_info() -> ToolInfo:
    from plateau_bench._version import __version__

    return ToolInfo(name="plateau-bench", version=__version__)


def now_utc() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ResultsError(f"cannot write {path}: {exc.strerror or exc}; results flushed before this "
                           "are kept") from None


def holds_results(directory: Path) -> bool:
    return any((directory / name).exists() for name in FILES)


def _prepare_dir(directory: Path, existing: Existing) -> None:
    if existing == "refuse" and holds_results(directory):
        raise ConfigError(f"{directory} already holds results: continue them with --resume {directory}, "
                          "replace them with --overwrite, or choose another --out")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write to output directory {directory}: {exc.strerror or exc}") from None


def cut_torn_line(path: Path) -> int:
    """Cut a last line that was never finished (a crash or a full disk mid-write), so that what is appended
    next starts a line of its own; the bytes cut (0 when the file ends in a newline or does not exist).
    Its record was never complete: the level it belonged to is measured again on resume."""
    try:
        with open(path, "rb+") as fh:
            size = fh.seek(0, 2)
            if size == 0:
                return 0
            end = size
            while end > 0:
                step = min(65536, end)
                fh.seek(end - step)
                block = fh.read(step)
                if end == size and block.endswith(b"\n"):
                    return 0
                newline = block.rfind(b"\n")
                if newline >= 0:
                    keep = end - step + newline + 1
                    fh.truncate(keep)
                    return size - keep
                end -= step
            fh.truncate(0)
            return size
    except FileNotFoundError:
        return 0


class ResultWriter:
    """Owns one result directory while a run, sweep or simulation is in progress.

    ``result`` is the tree being written; callers set its sweep-level fields and call ``flush``.
    """

    def __init__(self, out_dir: str | Path, result: ResultFile, *, existing: Existing = "refuse") -> None:
        self.dir = Path(out_dir)
        _prepare_dir(self.dir, existing)
        self.result = result
        if existing == "resume" and (self.dir / RESULT_FILE).exists():
            previous = load_result(self.dir)
            self.result.levels = list(previous.levels)
            self.result.created = previous.created or self.result.created
        mode = "ab" if existing == "resume" else "wb"
        try:
            if existing == "resume":
                for name in (REQUESTS_FILE, TELEMETRY_FILE):
                    cut_torn_line(self.dir / name)
            self._requests = open(self.dir / REQUESTS_FILE, mode)  # noqa: SIM115 - kept open for the run
            self._telemetry = open(self.dir / TELEMETRY_FILE, mode)  # noqa: SIM115
        except OSError as exc:
            raise ConfigError(f"cannot write to output directory {self.dir}: {exc.strerror or exc}") from None
        self._last_flush = time.monotonic()
        self.flush()

    # -- streaming writes -------------------------------------------------------------
    def add_request(self, level: str, record: RequestRecord, attempt: int = 1, repeat: int = 1) -> None:
        line = RequestLine(level=level, record=record, attempt=attempt, repeat=repeat)
        self._write(self._requests, _encoder.encode(line))
        now = time.monotonic()
        if now - self._last_flush >= 1.0:
            self._flush_streams()
            self._last_flush = now

    def add_requests(self, level: str, records: list[RequestRecord], attempt: int = 1) -> None:
        for r in records:
            self.add_request(level, r, attempt)
        self._flush_streams()

    def add_telemetry(self, level: str, sample: TelemetrySample | HealthSample, attempt: int = 1,
                      repeat: int = 1) -> None:
        flat = sample.to_line() if isinstance(sample, TelemetrySample) else msgspec.to_builtins(sample)
        tags: dict[str, object] = {"level": level, "attempt": attempt}
        if repeat != 1:
            tags["repeat"] = repeat
        self._write(self._telemetry, _encoder.encode({**tags, **flat}))

    def _write(self, fh: Any, data: bytes) -> None:
        try:
            fh.write(data)
            fh.write(b"\n")
        except OSError as exc:
            raise ResultsError(f"cannot write to {self.dir}: {exc.strerror or exc}; results flushed before "
                               "this are kept") from None

    def _flush_streams(self) -> None:
        try:
            self._requests.flush()
            self._telemetry.flush()
        except OSError as exc:
            raise ResultsError(f"cannot write to {self.dir}: {exc.strerror or exc}; results flushed before "
                               "this are kept") from None

    # -- the summary --------------------------------------------------------------------
    def add_level(self, level: LevelResult) -> None:
        """Keep ``level``, replacing an earlier attempt with the same label."""
        self.result.levels = [lv for lv in self.result.levels if lv.label != level.label] + [level]
        self.flush()

    def flush(self) -> None:
        """Write result.json, and the request and telemetry lines buffered so far.

        result.json is written even when the streams cannot be (a full disk that still takes a small
        file): a finished level's figures are kept whenever the disk allows.
        """
        stream_error: ResultsError | None = None
        try:
            self._flush_streams()
        except ResultsError as exc:
            stream_error = exc
        _atomic_write(self.dir / RESULT_FILE, msgspec.json.format(_encoder.encode(self.result), indent=2))
        if stream_error is not None:
            raise stream_error

    def close(self) -> None:
        for fh in (self._requests, self._telemetry):
            # A full disk: what was flushed is kept, and the caller already said why.
            with contextlib.suppress(OSError):
                fh.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _result_path(path: str | Path) -> Path:
    p = Path(path)
    file = p / RESULT_FILE if p.is_dir() else p
    if not file.exists():
        raise ResultsError(f"no results in {p}: {RESULT_FILE} not found")
    return file


def load_summary(path: str | Path) -> dict[str, Any]:
    """``result.json`` as plain JSON (upgraded to the current schema): what a script reading it sees."""
    file = _result_path(path)
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
    return migrate(data)


def load_result(path: str | Path) -> ResultFile:
    """``result.json`` as the typed tree; ``ResultsError`` (one line) when it does not fit."""
    data = load_summary(path)
    try:
        return msgspec.convert(data, ResultFile)
    except msgspec.ValidationError as exc:
        raise ResultsError(f"{_result_path(path)} is malformed: {exc}") from None


def load_levels(path: str | Path) -> list[LevelResult]:
    return load_result(path).levels


def _request_lines(path: str | Path) -> Iterator[RequestLine]:
    """Every readable line of requests.jsonl (a torn last line is skipped)."""
    file = Path(path) / REQUESTS_FILE
    if not file.exists():
        return
    decoder = msgspec.json.Decoder(RequestLine)
    with open(file, "rb") as fh:
        for line in fh:
            try:
                yield decoder.decode(line)
            except msgspec.DecodeError:
                continue


def load_requests(path: str | Path, level: str | None = None, attempts: dict[str, int] | None = None,
                  repeat: int | None = 1) -> dict[str, list[RequestRecord]]:
    """Request records grouped by level label (optionally one level).

    ``attempts`` (label -> attempt kept in result.json, see ``kept_attempts``) drops the records of
    attempts that were measured again; without it every attempt counts. ``repeat``: the records of
    that repeat only (by default the first, whose figures the level shows); None: every repeat.
    """
    out: dict[str, list[RequestRecord]] = {}
    for item in _request_lines(path):
        if level is not None and item.level != level:
            continue
        if attempts is not None and attempts.get(item.level, 1) != item.attempt:
            continue
        if repeat is not None and item.repeat != repeat:
            continue
        out.setdefault(item.level, []).append(item.record)
    return out


def attempts_on_disk(path: str | Path) -> dict[str, int]:
    """label -> the highest attempt that wrote request records (an interrupted one included)."""
    out: dict[str, int] = {}
    for item in _request_lines(path):
        out[item.level] = max(out.get(item.level, 0), item.attempt)
    return out


def records_on_disk(path: str | Path) -> dict[tuple[str, int], int]:
    """(label, attempt) -> how many request records of its first repeat are on disk (whole lines only)."""
    out: dict[tuple[str, int], int] = {}
    for item in _request_lines(path):
        if item.repeat == 1:
            key = (item.level, item.attempt)
            out[key] = out.get(key, 0) + 1
    return out


def repeats_on_disk(path: str | Path) -> dict[tuple[str, int], int]:
    """(label, attempt) -> the highest repeat that wrote request records (an interrupted one included)."""
    out: dict[tuple[str, int], int] = {}
    for item in _request_lines(path):
        key = (item.level, item.attempt)
        out[key] = max(out.get(key, 0), item.repeat)
    return out


def kept_attempts(result: ResultFile) -> dict[str, int]:
    """label -> the attempt whose figures result.json keeps."""
    return {lv.label: lv.attempt for lv in result.levels}


def load_telemetry(path: str | Path, attempts: dict[str, int] | None = None,
                   repeat: int | None = 1) -> dict[str, list[dict[str, Any]]]:
    """Telemetry lines grouped by level label (only the kept attempts with ``attempts``; ``repeat`` as
    in ``load_requests``)."""
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
            if not isinstance(item, dict):
                continue
            label = str(item.get("level", ""))
            if attempts is not None and attempts.get(label, 1) != item.get("attempt", 1):
                continue
            if repeat is not None and item.get("repeat", 1) != repeat:
                continue
            out.setdefault(label, []).append(item)
    return out


# -- runs for presentation ------------------------------------------------------------------------
def run_records(directory: str | Path, attempts: dict[str, int], *, telemetry: bool = True) -> RunRecords:
    """The request records and (unless ``telemetry=False``) telemetry samples of the kept attempts."""
    return RunRecords(requests=load_requests(directory, attempts=attempts),
                      telemetry=load_telemetry(directory, attempts=attempts) if telemetry else {})


def load_report_run(path: str | Path) -> ReportRun:
    """One result directory (or its result.json) for presentation, named by the directory; ``ResultsError``
    (one line) when it holds no usable results. Its records are read when the presentation asks for them."""
    p = Path(path)
    result = load_result(p)
    directory = p if p.is_dir() else p.parent
    return ReportRun(name=directory.resolve().name, path=p, result=result,
                     records=functools.partial(run_records, directory, kept_attempts(result)))


def load_runs(paths: Sequence[str | Path]) -> list[ReportRun]:
    """Several result directories for presentation; runs sharing a directory name get a numeric suffix."""
    if not paths:
        raise ConfigError("no result directory given")
    seen: dict[str, int] = {}
    named: list[ReportRun] = []
    for run in (load_report_run(p) for p in paths):
        n = seen.get(run.name, 0)
        seen[run.name] = n + 1
        named.append(run if n == 0 else run.renamed(f"{run.name} ({n + 1})"))
    return named


def run_names(paths: Sequence[Path]) -> list[str]:
    """Directory names; where two collide, enough parent components to tell them apart."""
    parts = [(p.parent if p.name == RESULT_FILE else p).resolve().parts for p in paths]
    depth = 1
    while True:
        names = ["/".join(pp[-depth:]) for pp in parts]
        if len(set(names)) == len(names) or depth >= max(len(pp) for pp in parts):
            return names
        depth += 1
