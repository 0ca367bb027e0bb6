"""Published measurements of LLM serving, as test data: ``tests/data/published/*.json``, one table a file.

Each file is one table of *measured* results copied from a public source (a vendor's performance page, a
project's benchmark README): a provenance block (where: URL, or repository + path + commit, and the
section/table/column the numbers were read from; notes on what the source does not state), the settings
the source gives (model, dtype, GPU, layout, engine, load kind; ``null`` where the source is silent), and the
rows. Every number in a row was read from the source named; nothing is reconstructed. A setting the
benchmark needs but the source does not state is not filled in: it goes, labelled, under
``bench_assumptions`` (the benchmark's choice, not the source's fact).

Load kinds: ``max_throughput`` (requests fed at an infinite rate, one row per input/output length: the
classic offline throughput table), ``concurrency`` (closed loop, one row per concurrency), ``rate`` (open
loop, one row per request rate).

    from published_tables import load_tables
    for table in load_tables(): ...
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import msgspec

ROOT = Path(__file__).resolve().parents[1]
TABLES = ROOT / "tests" / "data" / "published"

Load = Literal["max_throughput", "concurrency", "rate"]


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    url: str                       # where the table can be read
    where: str                     # section / table / column inside it
    opened: str                    # the date the numbers were read (UTC)
    repo: str | None = None        # for a repository file: owner/name, path and commit
    path: str | None = None
    commit: str | None = None
    also: list[str] = msgspec.field(default_factory=list)   # the same page at other addresses
    notes: list[str] = msgspec.field(default_factory=list)  # what the source does not say, and how it was read


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    checkpoint: str | None
    model_config: str | None       # a config.json in this repository with the model's published shape
    dtype: str | None              # weights: fp4 | fp8 | bf16 | fp16 (null: not stated)
    kv_dtype: str | None
    gpu: str                       # as the source names it
    gpu_key: str | None            # the roofline catalogue's key when the source names the variant
    gpus: int
    tp: int | None
    ep: int | None
    pp: int | None
    engine: str
    engine_version: str | None
    load: Load
    dataset: str
    ttft: str | None               # the source's column read as TTFT / TPOT (null: not given)
    tpot: str | None
    latency_statistic: str | None  # mean | median (null: not stated)


class Row(msgspec.Struct, frozen=True, kw_only=True):
    where: str                     # the row as the source labels it
    input_len: int | None          # tokens (null: not fixed, e.g. a ShareGPT sample)
    output_len: int | None
    concurrency: int | None
    request_rate: float | None
    num_requests: int | None
    output_throughput: float | None   # output tokens/s
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None
    engine: str | None = None      # when rows of one table come from different engines

    def measured(self) -> dict[str, float]:
        """The row's measured figures, by name (only those given)."""
        names = ("output_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
        return {n: float(v) for n in names if (v := getattr(self, n)) is not None}


class Assumptions(msgspec.Struct, frozen=True, kw_only=True):
    """What the benchmark assumes where the source is silent, each with why (``null``: nothing assumed)."""

    gpu_key: str | None = None
    kv_dtype: str | None = None          # the KV cache's dtype
    kv_mem_fraction: float | None = None  # share of GPU memory the engine gives weights + KV cache
    scheduler: str | None = None          # the tool whose rule set the engine's limits (``engine_limits``)
    why: str = ""


class Table(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    title: str
    provenance: Provenance
    settings: Settings
    calibration_row: int           # the lowest-load row; for a max-throughput table, the first listed
    rows: list[Row]
    bench_assumptions: Assumptions | None = None

    def problems(self) -> list[str]:
        """What makes the table unfit as test data (empty when it is fit)."""
        out: list[str] = []
        p = self.provenance
        if not p.url.startswith("https://") or not p.where or not p.opened:
            out.append("provenance needs an https URL, where in it, and the date opened")
        if p.repo is not None and (p.path is None or p.commit is None or len(p.commit) != 40):
            out.append("a repository source needs its path and a 40-hex commit")
        if not self.rows:
            out.append("no rows")
        if not 0 <= self.calibration_row < max(len(self.rows), 1):
            out.append(f"calibration_row {self.calibration_row} is not a row")
        for i, row in enumerate(self.rows):
            figures = row.measured()
            if not figures:
                out.append(f"row {i} ({row.where}) has no measured figure")
            for name, value in figures.items():
                if not math.isfinite(value) or value <= 0:
                    out.append(f"row {i} ({row.where}): {name} = {value} is not positive and finite")
            for name in ("input_len", "output_len", "concurrency", "num_requests"):
                value = getattr(row, name)
                if value is not None and value <= 0:
                    out.append(f"row {i} ({row.where}): {name} = {value} is not positive")
            if self.settings.load == "concurrency" and row.concurrency is None:
                out.append(f"row {i} ({row.where}): a concurrency table's row needs its concurrency")
            if self.settings.load == "rate" and row.request_rate is None:
                out.append(f"row {i} ({row.where}): a rate table's row needs its request rate")
        return out

    def kv_dtype_for_twin(self) -> str:
        """The KV cache's dtype: the source's, else the labelled assumption, else bf16 (the roofline's default)."""
        assumed = self.bench_assumptions.kv_dtype if self.bench_assumptions else None
        return self.settings.kv_dtype or assumed or "bf16"

    def gpu_for_twin(self) -> str | None:
        """The GPU the benchmark models: the source's, else the labelled assumption, else None."""
        if self.settings.gpu_key is not None:
            return self.settings.gpu_key
        return self.bench_assumptions.gpu_key if self.bench_assumptions else None


def load_table(path: Path) -> Table:
    return msgspec.json.decode(path.read_bytes(), type=Table, strict=True)


def load_tables(directory: Path = TABLES) -> list[Table]:
    """Every table, in file-name order."""
    return [load_table(p) for p in sorted(directory.glob("*.json"))]
