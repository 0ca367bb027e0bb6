"""AIPerf's files over several runs, and how the files of an import become levels.

* ``aggregate/[<value>/]profile_export_aiperf_aggregate.json`` (``--num-profile-runs``, or any sweep):
  ``{"schema_version", "aiperf_version", "metadata": {"aggregation_type": "confidence", "num_profile_runs",
  "variation_values": {"phases.profiling.concurrency": 8}, ...}, "metrics": {"<tag>_<stat>": {"mean",
  "std", "min", "max", "ci_low", "ci_high", "unit", ...}}}``: each run's statistic (``request_latency_p50``)
  averaged over the runs. One level, from the means.
* ``sweep_aggregate/profile_export_aiperf_sweep.json`` (``--concurrency 1,2,4`` and the like):
  ``{"aggregation_type": "sweep", "metadata": {"sweep_parameters": [{"name", "values"}]},
  "per_combination_metrics": [{"parameters": {"concurrency": 8}, "metrics": {"<tag>": {"mean", "avg",
  "p50", ..., "unit"}}}]}``: one level per combination.

Both are summaries of runs whose own directories hold their records: when any run's own files are in the
import, these are skipped (said in the warnings) rather than counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from plateau_bench.importers import aiperf, aiperf_files
from plateau_bench.importers.aiperf import Load
from plateau_bench.importers.common import Imported, ImportedLevel, ImportOptions, Where, dig

Groups = dict[Path, dict[str, list[tuple[Any, Where]]]]
RUN_KINDS = ("records", "aggregate")
SUMMARY_STATS = ("avg", "p50", "p90", "p99", "max", "min", "std")


def is_confidence(o: dict[str, Any]) -> bool:
    return dig(o, "metadata", "aggregation_type") == "confidence" and isinstance(o.get("metrics"), dict)


def is_sweep(o: dict[str, Any]) -> bool:
    return o.get("aggregation_type") == "sweep" or isinstance(o.get("per_combination_metrics"), list)


def kind_of(value: Any) -> str | None:
    """Which AIPerf file a JSON value is: records, aggregate, confidence, sweep (None: none of them)."""
    if not isinstance(value, dict):
        return None
    if aiperf.is_record(value):
        return "records"
    if is_sweep(value):
        return "sweep"
    if is_confidence(value):
        return "confidence"
    if aiperf.is_aggregate(value):
        return "aggregate"
    return None


def parameter_load(values: Mapping[str, Any], opts: ImportOptions) -> Load | None:
    """The load of a sweep's combination (``{"concurrency": 8}``, ``{"phases.profiling.rate": 5.0}``)."""
    concurrency = rate = None
    for key, v in values.items():
        name = str(key).rsplit(".", 1)[-1]
        if name == "concurrency" and isinstance(v, int) and not isinstance(v, bool):
            concurrency = v
        elif name in ("rate", "request_rate") and isinstance(v, int | float) and not isinstance(v, bool):
            rate = float(v)
    if rate:
        return "rate", concurrency, rate
    concurrency = concurrency or opts.concurrency
    return ("burst", concurrency, None) if concurrency else None


def stat_blocks(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``{"request_latency_p50": {"mean": m, "unit": u}}`` as blocks: ``{"request_latency": {"p50": m, ...}}``."""
    blocks: dict[str, dict[str, Any]] = {}
    for key, entry in metrics.items():
        tag, _, stat = str(key).rpartition("_")
        if not tag or stat not in SUMMARY_STATS or not isinstance(entry, dict):
            continue
        mean = entry.get("mean")
        if isinstance(mean, int | float) and not isinstance(mean, bool):
            block = blocks.setdefault(tag, {"unit": entry.get("unit")})
            block[stat] = mean
    return blocks


def confidence_level(o: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    meta = aiperf.part(o, "metadata")
    runs = meta.get("num_successful_runs") or meta.get("num_profile_runs")
    load = parameter_load(meta.get("variation_values") or {}, opts)
    what = aiperf.identity(o, f"confidence aggregate over {runs} runs" if runs else "confidence aggregate")
    if load is None:
        raise where.fail(f"{what}: missing field 'metadata.variation_values' (the load it was run at): pass "
                         "--concurrency, or import the runs' directories")
    note = f"{what}: each figure is the mean over the runs of that run's figure"
    return aiperf.blocks_summary(stat_blocks(o["metrics"]), load, where, str(where), notes=(note,))


def sweep_levels(o: dict[str, Any], where: Where, opts: ImportOptions) -> list[ImportedLevel]:
    combos = o.get("per_combination_metrics")
    what = aiperf.identity(o, "sweep aggregate")
    if not isinstance(combos, list) or not combos:
        raise where.fail(f"{what}: missing field 'per_combination_metrics'")
    out = []
    for i, combo in enumerate(combos):
        params = dig(combo, "parameters")
        load = parameter_load(params if isinstance(params, dict) else {}, opts)
        if load is None:
            raise where.fail(f"{what}: combination {i} ({params}) sets no concurrency or request rate: "
                             "plateau import reads sweeps over the load (or pass --concurrency)")
        metrics = dig(combo, "metrics")
        if not isinstance(metrics, dict):
            raise where.fail(f"{what}: missing field 'per_combination_metrics[{i}].metrics'")
        # Blocks per tag ({"avg", "p50", ...}), or per statistic ({"request_latency_p50": {"mean"}}) as the
        # confidence aggregate has them.
        blocks = metrics if any(isinstance(b, dict) and "avg" in b for b in metrics.values()) \
            else stat_blocks(metrics)
        out.append(aiperf.blocks_summary(blocks, load, where, f"{where} ({params})"))
    return out


def collect(values: list[tuple[Any, Where]], group: dict[str, list[tuple[Any, Where]]]) -> None:
    """Sort one file's JSON values into its directory's group; one-line error for what holds no results."""
    for value, where in values:
        kind = kind_of(value)
        if kind is not None:
            group[kind].append((value, where))
            continue
        what = aiperf_files.not_results(value)
        if what:
            raise where.fail(f"{what}: no results to import here; import profile_export_aiperf.json and "
                             "profile_export.jsonl, or the run's directory")
        raise where.missing("metadata.request_start_ns", "an AIPerf profile_export.jsonl line")


def _run_level(directory: Path, found: dict[str, list[tuple[Any, Where]]], opts: ImportOptions,
               out: Imported) -> ImportedLevel | None:
    aggs = found.get("aggregate", [])
    agg, agg_where = (aggs[0][0], aggs[0][1]) if aggs else (None, None)
    if agg_where is not None:
        aiperf_files.warmup_phase(Path(agg_where.path), aiperf.identity(agg, "profile export"))
    config = aiperf.part(agg, "input_config") or aiperf_files.run_config(directory)
    out.model = out.model or aiperf.model(config)
    if found.get("records"):
        load = aiperf.config_load(config, opts)
        first = found["records"][0][1]
        source = f"{aiperf.NAME}: {first.path}" + (f" with {agg_where.path}" if agg_where else "")
        return aiperf.records_run(found["records"], load, source, opts)
    if agg is not None and agg_where is not None:
        return aiperf.summary(_counted(agg, directory), agg_where, opts,
                              aiperf.config_load(aiperf_files.run_config(directory), opts))
    return None


def _counted(agg: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A GenAI-Perf export with its request count: older releases (0.0.8) state none, and perf_analyzer's export
    beside it holds the measured requests."""
    blocks = aiperf.blocks_of(agg)
    if "request_count" in blocks or not aiperf.is_genai_perf(aiperf.part(agg, "input_config")):
        return agg
    count = aiperf_files.perf_analyzer_requests(directory)
    return agg if count is None else {**agg, "request_count": {"unit": "count", "avg": count}}


def levels(groups: Groups, opts: ImportOptions, out: Imported) -> list[ImportedLevel]:
    """The levels of the AIPerf files read: each run directory's, then the multi-run summaries unless a run's
    own files are among them."""
    found_runs = any(found.get(k) for found in groups.values() for k in RUN_KINDS)
    result: list[ImportedLevel] = []
    summaries_skipped: list[str] = []
    for directory, found in groups.items():
        level = _run_level(directory, found, opts, out)
        if level is not None:
            result.append(level)
        for value, where in found.get("confidence", []) + found.get("sweep", []):
            if found_runs:
                summaries_skipped.append(where.path)
                continue
            out.model = out.model or (dig(value, "metadata", "model") if is_confidence(value) else None)
            if is_confidence(value):
                result.append(confidence_level(value, where, opts))
            else:
                result.extend(sweep_levels(value, where, opts))
    if summaries_skipped:
        more = len(summaries_skipped) - 3
        out.warnings.append(f"skipped {', '.join(summaries_skipped[:3])}{f' and {more} more' if more > 0 else ''}: "
                            "AIPerf's summaries over runs whose own files are read")
    return result
