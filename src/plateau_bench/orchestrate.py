"""Wiring for ``run`` and ``sweep``: target, embedded twin, workload, writer, runner, verdict.

This is the one place where the stages meet; each stage stays ignorant of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.analysis.diagnosis import Verdict, diagnose
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.driver.target import TargetInfo, discover, tokenize_remote, wait_ready
from plateau_bench.errors import ConfigError
from plateau_bench.records import LevelResult
from plateau_bench.report.live import LevelProgress, LiveView
from plateau_bench.report.results import ResultWriter, load_summary
from plateau_bench.spec import LevelSpec, TargetSpec, WorkloadSpec
from plateau_bench.sweep import (
    LevelOutcome,
    RateSweepSpec,
    SweepSpec,
    SweepState,
    run_rate_sweep,
    run_sweep,
    spec_differences,
    summary_dict,
)
from plateau_bench.telemetry.scraper import default_metrics_url
from plateau_bench.workload.prompts import Prompt, synthesize
from plateau_bench.workload.tokens import LocalTokenizer, choose_counter

MAX_PROMPTS = 4096


@dataclass
class Prepared:
    target: TargetSpec
    info: TargetInfo
    prompts: list[Prompt]
    token_source: str
    accuracy: dict[str, Any] = field(default_factory=dict)
    twin: dict[str, Any] | None = None
    count_tokens: Callable[[str], int] | None = None


@contextlib.asynccontextmanager
async def embedded_twin(preset: str, speed: float) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Start the simulated engine on a free local port for the duration of the block."""
    from plateau_bench.sim.presets import get_preset
    from plateau_bench.sim.embed import start_sim_server

    config = get_preset(preset)
    handle = await asyncio.to_thread(start_sim_server, config, host="127.0.0.1", port=0, speed=speed)
    try:
        yield handle.url, {"preset": preset, "speed": speed}
    finally:
        await asyncio.to_thread(handle.stop)


async def prepare(target: TargetSpec, workload: WorkloadSpec, n_prompts: int, *, wait_ready_s: float | None,
                  twin: dict[str, Any] | None = None) -> Prepared:
    if wait_ready_s:
        await wait_ready(target, wait_ready_s)
    info = await discover(target)
    target = msgspec.structs.replace(target, model=info.model)

    async def count_remote(text: str) -> int | None:
        return await tokenize_remote(target, info.model, text)

    counter = await choose_counter(workload.tokenizer, count_remote if info.tokenize else None)
    built = await synthesize(workload, min(max(n_prompts, 1), MAX_PROMPTS), counter=counter)
    count_tokens = counter.count_text if isinstance(counter, LocalTokenizer) else None
    return Prepared(target, info, built.prompts, built.token_source, built.accuracy, twin, count_tokens)


def result_spec(prepared: Prepared, workload: WorkloadSpec, **extra: Any) -> dict[str, Any]:
    return {
        "target": prepared.target.public(),
        "workload": msgspec.to_builtins(workload),
        "prompt_tokens_source": prepared.token_source,
        "prompt_accuracy": prepared.accuracy,
        **({"twin": prepared.twin} if prepared.twin else {}),
        **extra,
    }


def target_info_dict(prepared: Prepared) -> dict[str, Any]:
    info: dict[str, Any] = msgspec.to_builtins(prepared.info)
    return info


def metrics_url_for(target: TargetSpec, metrics_url: str | None, no_metrics: bool) -> tuple[str | None, bool]:
    if no_metrics:
        return None, False
    if metrics_url:
        return metrics_url, True
    return default_metrics_url(target.url), False


def out_dir_or_temp(out: Path | None, kind: str) -> Path:
    if out is not None:
        return out
    return Path(tempfile.mkdtemp(prefix=f"plateau-{kind}-"))


@dataclass
class SweepRun:
    state: SweepState
    summary: dict[str, Any]
    verdict: Verdict
    out_dir: Path


def check_resume(out_dir: Path, spec: dict[str, Any]) -> list[LevelResult]:
    """Levels to resume from, after checking the saved spec matches (else a ConfigError naming differences)."""
    saved = load_summary(out_dir)
    if saved.get("kind") != "sweep":
        raise ConfigError(f"--resume {out_dir}: not a sweep result (kind {saved.get('kind')!r})")
    comparable = {k: v for k, v in spec.items() if k not in ("prompt_accuracy",)}
    saved_spec = {k: v for k, v in (saved.get("spec") or {}).items() if k in comparable}
    diffs = spec_differences(saved_spec, comparable)
    if diffs:
        raise ConfigError(f"--resume {out_dir}: made with another spec ({'; '.join(diffs[:3])})")
    return [msgspec.convert(lv, LevelResult) for lv in saved.get("levels", [])]


async def sweep(prepared: Prepared, workload: WorkloadSpec, spec: SweepSpec, *, out_dir: Path,
                metrics_url: str | None, metrics_required: bool, view: LiveView,
                resume: bool = False, slow_client_ms: float = 0.0) -> SweepRun:
    full_spec = result_spec(prepared, workload, sweep=spec.to_dict())
    previous = check_resume(out_dir, full_spec) if resume else []
    runner = HttpLevelRunner(prepared.target, prepared.prompts, metrics_url=metrics_url,
                             metrics_required=metrics_required, count_tokens=prepared.count_tokens,
                             progress=lambda: view.progress, slow_client_ms=slow_client_ms, seed=workload.seed)
    with ResultWriter(out_dir, kind="sweep", spec=full_spec, target_info=target_info_dict(prepared),
                      resume=resume) as writer:

        def on_level(outcome: LevelOutcome) -> None:
            for line in outcome.telemetry:
                writer.add_telemetry(outcome.level.label, line)
            writer.add_level(outcome.level)
            if runner.engine:
                writer.summary["target"]["engine"] = runner.engine

        state = await run_sweep(runner, spec, on_level=on_level, on_record=writer.add_request, observer=view,
                                previous=previous)
        summary = summary_dict(state, spec)
        verdict = diagnose(state.levels, engine=runner.engine, plateau_gain=spec.search.plateau_gain)
        for key, value in summary.items():
            writer.summary[key] = value
        writer.set("verdict", verdict.to_dict())
    return SweepRun(state, summary, verdict, out_dir)


async def run_one(prepared: Prepared, workload: WorkloadSpec, level: LevelSpec, *, out_dir: Path | None,
                  metrics_url: str | None, metrics_required: bool, view: LiveView) -> LevelOutcome:
    runner = HttpLevelRunner(prepared.target, prepared.prompts, metrics_url=metrics_url,
                             metrics_required=metrics_required, count_tokens=prepared.count_tokens,
                             progress=lambda: view.progress, seed=workload.seed)
    writer = (ResultWriter(out_dir, kind="run", spec=result_spec(prepared, workload, level=msgspec.to_builtins(level)),
                           target_info=target_info_dict(prepared)) if out_dir else None)
    try:
        view.progress = LevelProgress(label=level.label, total_requests=level.total_requests(),
                                      max_seconds=level.duration_s)
        outcome = await runner.run_level(level, label=level.label,
                                         on_record=(lambda r: writer.add_request(level.label, r)) if writer else None,
                                         precision=None)
        if writer:
            for line in outcome.telemetry:
                writer.add_telemetry(level.label, line)
            writer.add_level(outcome.level)
            if runner.engine:
                writer.set("target", {**writer.summary["target"], "engine": runner.engine})
        return outcome
    finally:
        if writer:
            writer.close()


async def rate_sweep(prepared: Prepared, workload: WorkloadSpec, spec: RateSweepSpec, *, out_dir: Path,
                     metrics_url: str | None, metrics_required: bool, view: LiveView) -> SweepRun:
    """``plateau sweep --rate auto``: the open-loop counterpart of the concurrency sweep."""
    full_spec = result_spec(prepared, workload, sweep=spec.to_dict())
    runner = HttpLevelRunner(prepared.target, prepared.prompts, metrics_url=metrics_url,
                             metrics_required=metrics_required, count_tokens=prepared.count_tokens,
                             progress=lambda: view.progress, seed=workload.seed)
    with ResultWriter(out_dir, kind="sweep", spec=full_spec, target_info=target_info_dict(prepared)) as writer:

        def on_level(outcome: LevelOutcome) -> None:
            for line in outcome.telemetry:
                writer.add_telemetry(outcome.level.label, line)
            writer.add_level(outcome.level)

        state, summary = await run_rate_sweep(runner, spec, on_level=on_level, on_record=writer.add_request,
                                              observer=view)
        for key, value in summary.items():
            writer.summary[key] = value
        verdict = Verdict("open_loop", "rate sweep: see the departure rate", "n/a")
        writer.flush_summary()
    return SweepRun(state, summary, verdict, out_dir)
