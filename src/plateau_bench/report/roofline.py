"""``plateau roofline`` in the terminal: the deployment in two lines, the decode and prefill ceilings batch
by batch with what binds, the assumptions and the sources of the hardware's figures.

Renders the ``RooflineReport`` it is handed (``plateau_bench.roofline``); the command prints it.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from plateau_bench.roofline import Point, RooflineReport

_BINDING = {"weights": "memory: weights", "kv": "memory: KV cache", "compute": "compute",
            "interconnect": "interconnect", "overhead": "step overhead"}


def points_table(title: str, points: list[Point], batch_label: str) -> Table:
    """One row per batch: the step's time by resource, tokens/s and the resource that binds."""
    table = Table(title=title)
    columns = (batch_label, "step ms", "tok/s", "tok/s/GPU", "weights ms", "KV ms", "compute ms", "network ms",
               "binds", "experts hit", "tok/expert", "FLOP/B")
    for col in columns:
        table.add_column(col, justify="left" if col == "binds" else "right")
    for p in points:
        experts = (f"{p.active_experts:,.1f}", f"{p.tokens_per_expert:,.1f}") if p.active_experts else ("", "")
        table.add_row(f"{p.batch:,}", f"{p.step_s * 1e3:,.2f}", f"{p.tok_s:,.0f}", f"{p.tok_s_per_gpu:,.0f}",
                      f"{p.weights_s * 1e3:,.2f}", f"{p.kv_s * 1e3:,.2f}", f"{p.compute_s * 1e3:,.2f}",
                      f"{p.network_s * 1e3:,.2f}", _BINDING[p.binding], *experts, f"{p.intensity:,.1f}")
    return table


def roofline_view(report: RooflineReport) -> Group:
    """The whole report, as ``plateau roofline`` prints it."""
    rf, d, m = report.roofline, report.roofline.deployment, report.roofline.model
    model = Text.assemble(
        (m.name, "bold"), f" on {d.gpus}x {rf.gpu}: {report.total_params / 1e9:,.1f}B parameters, "
        f"{report.active_params / 1e9:,.1f}B per token; {report.weights_gib_per_gpu:,.1f} GiB of weights and "
        f"{report.kv_bytes_per_token / 1e3:,.1f} kB of KV per token on each GPU")
    kv = Text(f"KV cache: {report.kv_capacity_tokens:,} tokens = {report.max_sequences:,} sequences of "
              f"{d.input_len}+{d.output_len} tokens; ridge {report.ridge:,.0f} FLOP/byte")
    return Group(model, kv,
                 points_table("Decode: ceiling per step (lower bound on step time)", report.decode, "batch"),
                 points_table("Prefill: ceiling per step of prompt tokens", report.prefill, "tokens"),
                 *(Text(f"  {line}") for line in report.assumptions), Text("Sources:"),
                 *(Text(f"  {line}") for line in report.sources))
