"""The simulated engine's presets as a table (``plateau presets``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from plateau_bench.result import EngineSummary


def presets_table(engines: Sequence[EngineSummary]) -> Table:
    """One row per preset: its scheduler limits and step-time coefficients in readable units."""
    table = Table(title="Simulated engine presets (step time t = t0 + a*seqs + b*prefill + c*KV read)")
    for col in ("preset", "policy", "max seqs", "token budget", "KV tokens", "t0 ms", "a us/seq",
                "b us/token", "c ns/KV token"):
        table.add_column(col, justify="left" if col in ("preset", "policy") else "right")
    for e in engines:
        s = e.step
        table.add_row(e.name, e.policy, f"{e.max_num_seqs:,}", f"{e.max_num_batched_tokens:,}", f"{e.kv_tokens:,}",
                      f"{s.t0 * 1e3:.3g}", f"{s.a * 1e6:.3g}", f"{s.b * 1e6:.3g}", f"{s.c * 1e9:.3g}")
    return table
