"""The first-principles twin against published measurements: before and after a one-point calibration.

For each table in ``tests/data/published/`` (see ``published_tables``) whose GPU and weight dtype the
roofline knows and whose rows have fixed lengths, the twin ``plateau sim --model CONFIG --gpu G --tp N
--dtype D [--kv-dtype K]`` would build (``sim.from_roofline``) predicts every row in virtual time. Its
scheduler runs at the limits the table's tool sets by a documented rule (``engine_limits``: trtllm-bench
sizes the batch to the KV cache, row by row), else at vLLM's defaults (256 sequences, an 8,192-token step
budget); what a source does not state (a GPU variant, the KV cache's dtype, its memory share) comes from
the table's labelled ``bench_assumptions``.

* ``max_throughput`` rows (requests at an infinite rate): one burst of the row's ``num_requests`` all at
  once (the source's count), predicted output tokens/s over the level;
* ``concurrency`` rows: a steady closed-loop level at the row's concurrency for ``STEADY_S`` virtual
  seconds, predicted output tokens/s, mean TTFT and mean TPOT.

Then it calibrates on one row (``calibration_row``: the lowest-load row; a max-throughput table has no load
axis, so its first listed row) and predicts again. One figure calibrates one resource: the one whose
efficiency moves that row most (10 % less memory bandwidth, then 10 % less compute, each in turn); the other
efficiencies keep their measured defaults.

* a row with a TPOT: ``--tpot-at-1`` semantics (``roofline.resource_fit.fit_resources`` on the one point
  the row gives: decoding batch by Little's law = throughput x TPOT, step = TPOT, context = prompt +
  output / 2; one point keeps the roofline's step overhead and calibrates the resource its work is most of);
* a row with a throughput only: the binding resource's efficiency under which the twin reproduces the row's
  throughput (bisection in (0, 1]; 1 when even the roofline falls short).

Printed: per row, measured, predicted with the default efficiency, predicted after calibration, and the
errors (predicted / measured - 1); per table, the median and worst |error| over the rows other than the
calibration row, before and after, side by side; and every table pooled, on output tok/s and TPOT (the
figures a one-row calibration is held to: median <= 10 %, worst <= 20 %). Tables it cannot model are
listed with the reason.
Asserts nothing; the errors are what they are (the engine is not tuned to these tables).

    PYTHONPATH=src .venv/bin/python bench/published.py [--tables NAME,...] [--markdown]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec
from engine_limits import limits, reserves_kv
from published_tables import ROOT, Row, Table, load_tables

from plateau_bench.commands.roofline import roofline_from_options
from plateau_bench.errors import ConfigError
from plateau_bench.result import LevelResult, RunSpec
from plateau_bench.roofline import Efficiency, Roofline, measured_efficiency
from plateau_bench.roofline.deployment import DTYPES
from plateau_bench.roofline.hardware import find_gpu
from plateau_bench.roofline.resource_fit import fit_resources
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.from_roofline import engine_from_roofline
from plateau_bench.spec import LevelSpec, WorkloadSpec
from plateau_bench.sweep.session import simulate

STEADY_S = 600.0        # virtual seconds a concurrency row's steady level runs
BISECT_STEPS = 14       # efficiency bisection: (0.02, 1] to within ~0.01 % in log space
METRICS = (("output_throughput", "tok/s"), ("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))


class _Quiet:
    def level_started(self, *args: object) -> None:
        pass

    def level_finished(self, *args: object) -> None:
        pass


def why_not(table: Table) -> str | None:
    """Why the twin cannot model the table, every reason (None when it can)."""
    s = table.settings
    gpu = table.gpu_for_twin()
    reasons = []
    if gpu is None:
        reasons.append(f"the GPU variant is not stated ({s.gpu!r}) and no assumption is recorded")
    else:
        try:
            find_gpu(gpu)
        except ConfigError:
            reasons.append(f"the roofline's GPU catalogue has no {gpu!r}")
    if s.dtype is None or s.dtype not in DTYPES:
        reasons.append(f"the weight dtype is not stated or not one the roofline knows ({s.dtype})")
    if s.model_config is None:
        reasons.append("no model config")
    if s.load == "rate":
        reasons.append("open-loop rate rows are not modelled by this benchmark")
    if any(r.input_len is None or r.output_len is None for r in table.rows):
        reasons.append("the rows' lengths are not fixed token counts (not stated, or a sampled dataset), "
                       "so no twin workload matches them")
    return "; ".join(reasons) or None


def roofline_for(table: Table, row: Row) -> Roofline:
    s, assumed = table.settings, table.bench_assumptions
    assert row.input_len is not None and row.output_len is not None
    fraction = {"mem_fraction": assumed.kv_mem_fraction} if assumed and assumed.kv_mem_fraction else {}
    rf, _ = roofline_from_options(ROOT / str(s.model_config), table.gpu_for_twin(), None, gpus=s.gpus, tp=s.tp or 1,
                                  ep=s.ep or 1, dtype=s.dtype, kv_dtype=table.kv_dtype_for_twin(),
                                  input_len=row.input_len, output_len=row.output_len, **fraction)
    return rf


def engine_for(table: Table, row: Row, efficiency: Efficiency, overhead_s: float | None = None) -> EngineConfig:
    """The twin for one row: the roofline's engine at ``efficiency``, its limits and admission by the table's
    tool's rule."""
    assert row.input_len is not None and row.output_len is not None
    rf = roofline_for(table, row)
    config = engine_from_roofline(rf, efficiency, overhead_s)
    rule = table.bench_assumptions.scheduler if table.bench_assumptions else None
    config = msgspec.structs.replace(config, reserve_kv=reserves_kv(rule))
    set_by_rule = limits(rule, config.kv_tokens, row.input_len, row.output_len, table.settings.pp or 1)
    if set_by_rule is None:
        return config
    seqs, tokens = set_by_rule
    return msgspec.structs.replace(config, max_num_seqs=seqs, max_num_batched_tokens=tokens)


def level_for(table: Table, row: Row) -> LevelSpec:
    if table.settings.load == "max_throughput":
        n = row.num_requests or 1000
        return LevelSpec(mode="burst", concurrency=n, num_requests=n)
    assert row.concurrency is not None
    return LevelSpec(mode="steady", concurrency=row.concurrency, duration_s=STEADY_S)


def predict(config: EngineConfig, table: Table, row: Row) -> dict[str, float]:
    assert row.input_len is not None and row.output_len is not None
    workload = WorkloadSpec(input_len=row.input_len, output_len=row.output_len)
    done = asyncio.run(simulate(config, workload, [level_for(table, row)], RunSpec(workload=workload), out_dir=None,
                                chunks=False, observer=_Quiet()))
    lv: LevelResult = done.result.levels[0]
    out = {"output_throughput": lv.output_throughput}
    if lv.ttft_ms.mean is not None:
        out["ttft_ms"] = lv.ttft_ms.mean
    if lv.tpot_ms.mean is not None:
        out["tpot_ms"] = lv.tpot_ms.mean
    return out


@dataclass
class Calibrated:
    efficiency: Efficiency
    overhead_s: float | None
    how: str


RESOURCES = ("memory", "compute")   # no single row isolates the interconnect


def _with(efficiency: Efficiency, resource: str, value: float) -> Efficiency:
    return msgspec.structs.replace(efficiency, **{resource: value})


def binding_resource(throughput: Callable[[Efficiency], float], base: Efficiency) -> str:
    """The resource whose efficiency moves the row's throughput most: each made 10 % less efficient in turn."""
    slowed = {r: throughput(_with(base, r, getattr(base, r) * 0.9)) for r in RESOURCES}
    return min(slowed, key=lambda r: slowed[r])


def calibrate(table: Table) -> Calibrated:
    """One point, one resource: the calibration row (see the module docstring)."""
    row = table.rows[table.calibration_row]
    base = measured_efficiency()
    assert row.input_len is not None and row.output_len is not None and row.output_throughput is not None

    def thr(e: Efficiency, overhead_s: float | None = None) -> float:
        return predict(engine_for(table, row, e, overhead_s), table, row)["output_throughput"]

    if row.tpot_ms is not None:
        batch = row.output_throughput * row.tpot_ms / 1e3
        context = row.input_len + row.output_len / 2.0
        fit = fit_resources(roofline_for(table, row), [(batch, row.tpot_ms / 1e3, context)], base)
        return Calibrated(fit.efficiency, fit.step_overhead_s,
                          f"--tpot-at-1 semantics on {row.where}: batch {batch:.2f} (Little), TPOT {row.tpot_ms:g} ms "
                          f"-> {fit.describe()}, overhead {fit.step_overhead_s * 1e3:.2f} ms")
    resource = binding_resource(thr, base)
    target = row.output_throughput
    if thr(_with(base, resource, 1.0)) <= target:
        return Calibrated(_with(base, resource, 1.0), None,
                          f"{resource} efficiency 1.0 on {row.where}: even the roofline falls short of it")
    lo, hi = 0.02, 1.0
    for _ in range(BISECT_STEPS):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if thr(_with(base, resource, mid)) < target else (lo, mid)
    f = (lo * hi) ** 0.5
    return Calibrated(_with(base, resource, f), None,
                      f"{resource} efficiency {f:.3f} (it binds {row.where}; the rest at their defaults): the "
                      f"value that reproduces its throughput")


@dataclass
class RowResult:
    row: Row
    measured: dict[str, float]
    before: dict[str, float]
    after: dict[str, float]

    def error(self, metric: str, which: str) -> float | None:
        pred = (self.before if which == "before" else self.after).get(metric)
        meas = self.measured.get(metric)
        return None if pred is None or meas is None else pred / meas - 1.0


@dataclass
class TableResult:
    table: Table
    calibration: Calibrated
    rows: list[RowResult] = field(default_factory=list)
    seconds: float = 0.0

    def errors(self, metric: str, which: str) -> list[float]:
        """|error| of ``metric`` on the rows other than the calibration row that measured it."""
        return [abs(e) for i, r in enumerate(self.rows) if i != self.table.calibration_row
                and (e := r.error(metric, which)) is not None]

    def summary(self, metric: str, which: str) -> tuple[float, float] | None:
        """(median |error|, worst |error|) over the rows other than the calibration row."""
        errs = self.errors(metric, which)
        return (statistics.median(errs), max(errs)) if errs else None


POOLED = ("output_throughput", "tpot_ms")   # what a one-row calibration is held to, every table together


def pooled(results: list[TableResult], which: str) -> tuple[float, float, int]:
    """(median, worst, count) of |error| on output tok/s and TPOT over every modelled table's other rows."""
    errs = [e for res in results for m in POOLED for e in res.errors(m, which)]
    return statistics.median(errs), max(errs), len(errs)


def run_table(table: Table, efficiency: Efficiency | None = None) -> TableResult:
    started = time.perf_counter()
    cal = calibrate(table)
    result = TableResult(table, cal)
    default = efficiency or measured_efficiency()
    for row in table.rows:
        before = predict(engine_for(table, row, default), table, row)
        after = predict(engine_for(table, row, cal.efficiency, cal.overhead_s), table, row)
        result.rows.append(RowResult(row, row.measured(), before, after))
    result.seconds = time.perf_counter() - started
    return result


def _pct(e: float | None) -> str:
    return "-" if e is None else f"{e:+.0%}"


def render(res: TableResult) -> list[str]:
    t, s = res.table, res.table.settings
    gpu = t.gpu_for_twin()
    lines = [f"== {t.name}: {s.model}, {s.gpus}x {s.gpu} (twin: {gpu}), TP={s.tp}, {s.dtype}, {s.engine}",
             f"   source: {t.provenance.url} ({t.provenance.where})",
             f"   calibration: {res.calibration.how}"]
    metrics = [(m, label) for m, label in METRICS if any(m in r.measured for r in res.rows)]
    head = f"   {'row':<24}" + "".join(f" {label + ' meas':>13} {'default':>9} {'err':>6} {'calib':>9} {'err':>6}"
                                      for _, label in metrics)
    lines.append(head)
    for i, r in enumerate(res.rows):
        mark = " *" if i == t.calibration_row else ""
        cells = ""
        for m, _ in metrics:
            figures = (r.measured.get(m), r.before.get(m), r.after.get(m))
            meas, b, a = (v if v is not None else math.nan for v in figures)
            cells += (f" {meas:>13,.1f} {b:>9,.1f} {_pct(r.error(m, 'before')):>6} {a:>9,.1f} "
                      f"{_pct(r.error(m, 'after')):>6}")
        lines.append(f"   {(r.row.where + mark):<24}{cells}")
    for m, label in metrics:
        before, after = res.summary(m, "before"), res.summary(m, "after")
        if before and after:
            lines.append(f"   {label}: |error| over the other rows, median / worst: default {before[0]:.0%} / "
                         f"{before[1]:.0%}  ->  calibrated {after[0]:.0%} / {after[1]:.0%}")
    lines.append(f"   ({res.seconds:.1f} s)")
    return lines


def markdown(results: list[TableResult], skipped: list[tuple[Table, str]]) -> list[str]:
    out = ["| table | metric | default: median / worst | calibrated: median / worst |", "|---|---|---|---|"]
    for res in results:
        for m, label in METRICS:
            b, a = res.summary(m, "before"), res.summary(m, "after")
            if b and a:
                out.append(f"| {res.table.name} | {label} | {b[0]:.0%} / {b[1]:.0%} | {a[0]:.0%} / {a[1]:.0%} |")
    if results:
        (bm, bw, _), (am, aw, n) = pooled(results, "before"), pooled(results, "after")
        out.append(f"| every modelled table ({n} figures) | tok/s and TPOT | {bm:.0%} / {bw:.0%} "
                   f"| {am:.0%} / {aw:.0%} |")
    for t, why in skipped:
        out.append(f"| {t.name} | not modelled | {why} | |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tables", help="comma list of table names (default: all)")
    parser.add_argument("--markdown", action="store_true", help="also print the summary as a Markdown table")
    parser.add_argument("--summary", action="store_true", help="print only the summary (Markdown), no row")
    parser.add_argument("--pooled", action="store_true", help="print only the pooled line (Markdown)")
    args = parser.parse_args()
    tables = load_tables()
    if args.tables:
        wanted = set(args.tables.split(","))
        tables = [t for t in tables if t.name in wanted]
    eff = measured_efficiency()
    quiet = args.summary or args.pooled
    if not quiet:
        print(f"default efficiency: {eff.describe()}; * = the calibration row; err = predicted / measured - 1")
    results, skipped = [], []
    for table in tables:
        reason = why_not(table)
        if reason is not None:
            skipped.append((table, reason))
            continue
        res = run_table(table)
        results.append(res)
        if not quiet:
            print("\n".join(render(res)), flush=True)
    for table, reason in skipped:
        if not quiet:
            print(f"== {table.name}: NOT MODELLED: {reason}")
    if args.markdown or args.summary:
        print("\n".join(markdown(results, skipped)))
    elif args.pooled:
        lines = markdown(results, [])
        print("\n".join(lines[:2] + [line for line in lines if line.startswith("| every modelled table")]))


if __name__ == "__main__":
    main()
