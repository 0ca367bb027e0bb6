"""Wiring for ``run`` and ``sweep``: target, embedded twin, workload, writer, runner, verdict.

The one place where the stages meet; each stage stays ignorant of the others. A single level
(``plateau run``) and every kind of sweep go through the same path: a ``Plan`` (``sweep.plan``) run
by the one loop (``sweep.loop``), persisted by one ``ResultWriter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from plateau_bench.driver.pool import WorkerPool
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.driver.sessions import SessionPool
from plateau_bench.driver.split import usable_cores
from plateau_bench.driver.target import TargetInfo, discover, tokenize_remote, wait_ready
from plateau_bench.errors import ConfigError
from plateau_bench.level_run import LevelRun
from plateau_bench.progress import LevelProgress
from plateau_bench.records import HealthSample, TelemetrySample
from plateau_bench.result import (
    LevelResult,
    ResultFile,
    ResultKind,
    RunSpec,
    Scalar,
    SweepSettings,
    TargetPublic,
    TargetRecord,
    TwinInfo,
)
from plateau_bench.sim.config import EngineConfig
from plateau_bench.spec import LevelSpec, TargetSpec, WorkloadSpec
from plateau_bench.store import (
    Existing,
    ResultWriter,
    attempts_on_disk,
    holds_results,
    host_info,
    load_result,
    now_utc,
    records_on_disk,
    repeats_on_disk,
    tool_info,
)
from plateau_bench.sweep.job import Job, Placement
from plateau_bench.sweep.loop import SweepObserver, SweepState, conclude, run_sweep, stop_rule_for
from plateau_bench.sweep.plan import Plan, PlanDefaults, Step, SweepLimits
from plateau_bench.telemetry.scraper import default_metrics_url
from plateau_bench.workload.feed import CHUNK
from plateau_bench.workload.prompts import synthesize
from plateau_bench.workload.sessions import build_sessions
from plateau_bench.workload.source import PromptSource, synthetic_recipe
from plateau_bench.workload.tokens import LocalTokenizer, choose_counter
from plateau_bench.workload.trace import load_trace
from plateau_bench.workload.trace_prompts import trace_prompts

MAX_PROMPTS = 4096   # prepared before the first level; later ones are built as the levels need them
PROBE_PROMPTS = CHUNK   # a sweep's levels each take prompts of their own: prepare a sample for the accuracy report


@dataclass
class Prepared:
    target: TargetSpec
    info: TargetInfo
    source: PromptSource   # every level's prompts (``workload.source``)
    token_source: str
    accuracy: dict[str, Scalar] = field(default_factory=dict)
    twin: TwinInfo | None = None
    count_tokens: Callable[[str], int] | None = None
    sessions: SessionPool | None = None   # multi-turn conversations, when --sessions is given
    schedule_ns: list[int] | None = None  # a trace's send offsets (time scale 1), when --trace is given


@contextlib.asynccontextmanager
async def target_url(url: str | None, preset: str, speed: float,
                     tokenizer: str | None = None) -> AsyncIterator[tuple[str, TwinInfo | None]]:
    """The given URL, or (``url`` is None) the simulated engine started on a free local port, counting
    prompts with the client's ``tokenizer`` when it has one (as the server the client's tokenizer is for)."""
    if url is not None:
        if not url.strip():
            raise ConfigError("--url is empty (an unset variable?): give the endpoint, or leave --url out "
                              "to benchmark the built-in simulated engine")
        yield url, None
        return
    from plateau_bench.sim.embed import start_sim_server
    from plateau_bench.sim.presets import get_preset

    handle = await asyncio.to_thread(start_sim_server, get_preset(preset), host="127.0.0.1", port=0, speed=speed,
                                     tokenizer=tokenizer)
    try:
        yield handle.url, TwinInfo(preset=preset, speed=speed)
    finally:
        await asyncio.to_thread(handle.stop)


async def prepare(target: TargetSpec, workload: WorkloadSpec, n_prompts: int = PROBE_PROMPTS, *,
                  wait_ready_s: float | None, twin: TwinInfo | None = None, sends: int | None = None) -> Prepared:
    """The target found and the run's prompts made ready: the first ``n_prompts`` built (the one level of
    ``plateau run`` takes them first; a sweep's levels take their own). ``sends``: the requests the run
    sends in all, when known, so a dataset with fewer is refused unless ``--allow-reuse``."""
    if wait_ready_s:
        await wait_ready(target, wait_ready_s)
    info = await discover(target)
    target = msgspec.structs.replace(target, model=info.model)
    check_context(workload, info.max_model_len)

    async def count_remote(text: str) -> int | None:
        return await tokenize_remote(target, info.model, text)

    counter = await choose_counter(workload.tokenizer, count_remote if info.tokenize else None)
    count_tokens = counter.count_text if isinstance(counter, LocalTokenizer) else None
    if workload.trace is not None:
        trace = load_trace(workload.trace, limit=workload.trace_requests)
        check_context(workload, info.max_model_len, max((r.input_len + r.output_len for r in trace.rows), default=0))
        salt = () if workload.prompt_salt is None else (workload.prompt_salt,)
        built = await trace_prompts(trace, counter=counter, seed=[workload.seed, *salt])
        accuracy = msgspec.convert(built.accuracy, dict[str, Scalar])
        return Prepared(target, info, PromptSource.given(built.prompts, by_design="trace"), built.token_source,
                        accuracy, twin, count_tokens, schedule_ns=trace.offsets_ns())
    if workload.sessions:
        sessions = await build_sessions(workload, counter=counter)
        pool = SessionPool(sessions, chat=target.endpoint == "chat", think_time_s=workload.think_time_s,
                           header=workload.session_header)
        first = [c.first_prompt() for c in sessions.conversations]
        accuracy = msgspec.convert(sessions.accuracy, dict[str, Scalar])
        return Prepared(target, info, PromptSource.given(first, by_design="sessions"), sessions.token_source,
                        accuracy, twin, count_tokens, pool)
    built = await synthesize(workload, min(max(n_prompts, 1), MAX_PROMPTS), counter=counter)
    accuracy = msgspec.convert(built.accuracy, dict[str, Scalar])
    if workload.dataset is None:
        tokenizer = counter if isinstance(counter, LocalTokenizer) else None
        source = PromptSource(synthetic_recipe(workload, built), tokenizer)
        return Prepared(target, info, source, built.token_source, accuracy, twin, count_tokens)
    if sends is not None and sends > len(built.prompts) and not workload.allow_reuse:
        raise ConfigError(f"--dataset {workload.dataset} has {len(built.prompts):,} prompts and the run sends "
                          f"{sends:,}: give --allow-reuse to repeat them (every repeat is counted), fewer "
                          "requests, or a larger dataset")
    source = PromptSource.given(built.prompts, reuse=workload.allow_reuse, dataset=True)
    return Prepared(target, info, source, built.token_source, {**accuracy, "dataset_prompts": len(built.prompts)},
                    twin, count_tokens)


def check_context(workload: WorkloadSpec, max_model_len: int | None, trace_longest: int | None = None) -> None:
    """Refuse requests longer than the server's context (``max_model_len`` from /v1/models, where it says):
    every one would fail, after the prompts were built. A conversation's later turns carry its history and
    may outgrow the context by design; its first turn is checked."""
    if max_model_len is None:
        return
    if trace_longest is not None:
        if trace_longest > max_model_len:
            raise ConfigError(f"--trace {workload.trace} holds a request of {trace_longest:,} tokens (prompt + "
                              "output), "
                              f"above the server's context of {max_model_len:,} (max_model_len from /v1/models)")
        return
    if workload.dataset is not None or workload.trace is not None:
        return   # a dataset's lengths are the dataset's
    longest = workload.longest_input() + workload.longest_output()
    if longest > max_model_len:
        raise ConfigError(f"--input-len and --output-len ask up to {longest:,} tokens per request (prompt + output"
                          f"{', shared prefix included' if workload.prefix_len else ''}), above the server's context "
                          f"of {max_model_len:,} (max_model_len from /v1/models): every request would fail")


def run_spec(prepared: Prepared, workload: WorkloadSpec, plan: Plan) -> RunSpec:
    return RunSpec(target=msgspec.convert(prepared.target.public(), TargetPublic), workload=workload,
                   prompt_tokens_source=prepared.token_source, prompt_accuracy=prepared.accuracy,
                   twin=prepared.twin, sweep=plan.settings(), level=plan.single_level(), repeat=plan.limits.repeat)


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


def _comparable(spec: RunSpec) -> dict[str, object]:
    data: dict[str, object] = msgspec.to_builtins(spec)
    data.pop("prompt_accuracy", None)
    target = data.get("target")
    if spec.twin is not None and isinstance(target, dict):
        target.pop("url", None)   # the embedded twin listens on a new port each run: its preset and speed say it
    return data


def spec_differences(saved: object, current: object, prefix: str = "") -> list[str]:
    """Human-readable differences between two specs as plain data (for --resume)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        diffs: list[str] = []
        for key in sorted(set(saved) | set(current)):
            diffs.extend(spec_differences(saved.get(key), current.get(key), f"{prefix}{key}."))
        return diffs
    if msgspec.json.encode(saved) != msgspec.json.encode(current):
        return [f"{prefix.rstrip('.')}: saved {saved!r}, now {current!r}"]
    return []


def check_resume(out_dir: Path, spec: RunSpec) -> list[LevelResult]:
    """Levels to resume from, after checking the saved spec matches (else a ConfigError naming differences)."""
    saved = load_result(out_dir)
    if saved.kind != "sweep":
        raise ConfigError(f"--resume {out_dir}: not a sweep result (kind {saved.kind!r})")
    diffs = spec_differences(_comparable(saved.spec), _comparable(spec))
    if diffs:
        raise ConfigError(f"--resume {out_dir}: made with another spec ({'; '.join(diffs[:3])})")
    # A disk that filled as a level was saved can keep its summary but not all of its records: such a
    # level is measured again, so every level kept has each of its requests on disk.
    on_disk = records_on_disk(out_dir)
    return [lv for lv in saved.levels if on_disk.get((lv.label, lv.attempt), 0) >= lv.num_requests]


def _attempts(out_dir: Path | None, previous: Sequence[LevelResult]) -> dict[str, int]:
    """Attempts already used: saved levels and interrupted ones (their records are on disk)."""
    used = attempts_on_disk(out_dir) if out_dir is not None else {}
    for lv in previous:
        used[lv.label] = max(used.get(lv.label, 0), lv.attempt)
    return used


@dataclass
class SweepRun:
    state: SweepState
    result: ResultFile
    out_dir: Path | None


def _new_result(kind: ResultKind, spec: RunSpec, prepared: Prepared) -> ResultFile:
    info = msgspec.to_builtins(prepared.info)
    return ResultFile(kind=kind, created=now_utc(), tool=tool_info(), host=host_info(), spec=spec,
                      target=msgspec.convert(info, TargetRecord))


async def measure(prepared: Prepared, job: Job, *, metrics_url: str | None, metrics_required: bool,
                  observer: SweepObserver, progress: Callable[[], LevelProgress | None]) -> SweepRun:
    """Run the job's plan (one level or a sweep of any kind) against the prepared target, saving as it
    goes (the verdict placed on the job's roofline when it has one).

    The placement's ``workers``: None runs the load in this process; a count or ``"auto"`` in a pool of
    load processes started here once for the whole sweep (``driver.pool``). Its ``ray``: the load as
    actors on that Ray cluster's nodes instead, ``per_node`` on each (``driver.ray_pool``).
    """
    plan, out_dir, existing, workload = job.plan, job.out_dir, job.existing, job.workload
    spec = run_spec(prepared, workload, plan)
    previous = check_resume(out_dir, spec) if existing == "resume" and out_dir is not None else []
    if existing == "resume" and out_dir is not None and not holds_results(out_dir):
        raise ConfigError(f"--resume {out_dir}: no results there to continue")
    placement = job.placement
    if (placement.workers is not None or placement.ray is not None) and \
            (prepared.sessions is not None or prepared.schedule_ns):
        raise ConfigError("--workers and --ray drive single-turn load; multi-turn sessions and trace replay run "
                          "in one process for now: drop --workers/--ray")
    pool_cm = _load_pool(prepared, workload, placement)
    async with pool_cm as pool, HttpLevelRunner(
            prepared.target, prepared.source, metrics_url=metrics_url, metrics_required=metrics_required,
            count_tokens=prepared.count_tokens, progress=progress, seed=workload.seed,
            gpu_metrics_urls=job.telemetry.dcgm_urls, pool=pool, sessions=prepared.sessions,
            schedule_ns=prepared.schedule_ns, single=plan.single_level() is not None,
            dataset_from=dataset_resumes_at(previous)) as runner:   # closed however the sweep ends (warm levels)
        return await _run_and_save(prepared, spec, runner, job, observer, previous)


def dataset_resumes_at(previous: Sequence[LevelResult]) -> int:
    """Where a resumed run goes on in its dataset: past every prompt the saved levels took."""
    return max((lv.prompts.dataset_from + lv.prompts.span for lv in previous
                if lv.prompts is not None and lv.prompts.dataset_from is not None), default=0)


@contextlib.asynccontextmanager
async def _load_pool(prepared: Prepared, workload: WorkloadSpec,
                     placement: Placement) -> AsyncIterator[WorkerPool | None]:
    workers, ray = placement.workers, placement.ray
    if workers is None and ray is None:
        yield None
        return
    launcher = None
    if ray is not None:
        from plateau_bench.driver.ray_pool import RayLauncher

        launcher = RayLauncher(ray, placement.per_node)
    size = usable_cores() if workers == "auto" else int(workers or 1)
    tokenizer = workload.tokenizer if prepared.count_tokens is not None else None
    async with WorkerPool(size, auto=workers == "auto", target=prepared.target, prompts=prepared.source,
                          tokenizer=tokenizer, seed=workload.seed, launcher=launcher) as pool:
        yield pool


async def _run_and_save(prepared: Prepared, spec: RunSpec, runner: HttpLevelRunner, job: Job,
                        observer: SweepObserver, previous: list[LevelResult]) -> SweepRun:
    plan, out_dir, existing = job.plan, job.out_dir, job.existing
    plan.limits.validate(False)
    single = plan.single_level() is not None
    rule = None if single else stop_rule_for(plan.limits)
    result = _new_result("run" if single else "sweep", spec, prepared)
    writer = ResultWriter(out_dir, result, existing=existing) if out_dir is not None else None

    def on_level(run: LevelRun, level: LevelResult, repeat: int) -> None:
        result.target.engine = runner.engine or result.target.engine
        if writer is None:
            return
        samples: list[TelemetrySample | HealthSample] = [*run.server_samples, *run.gpu_samples,
                                                         *run.dcgm_samples, *run.health_samples]
        for sample in samples:
            writer.add_telemetry(level.label, sample, level.attempt, repeat)
        writer.add_level(level)

    resuming = existing == "resume" and out_dir is not None
    try:
        state = await run_sweep(
            runner, plan, plan.limits, stop_rule=rule, on_level=on_level, observer=observer,
            on_record=(lambda label, attempt, rep, r: writer.add_request(label, r, attempt, rep)) if writer else None,
            previous=previous, attempts=_attempts(out_dir, previous) if existing == "resume" else None,
            repeats_used=repeats_on_disk(out_dir) if resuming and out_dir is not None else None)
        conclude(result, state, plan, runner.engine, job.roofline)
        if writer is not None:
            writer.flush()
    finally:
        if writer is not None:
            writer.close()
    return SweepRun(state, result, out_dir)


class GridPlan(PlanDefaults):
    """Given levels, measured in order (``plateau sim``)."""

    def __init__(self, levels: Sequence[LevelSpec], repeat: int = 1) -> None:
        self.levels = list(levels)
        self.limits = SweepLimits(max_error_rate=1.0, repeat=repeat)

    def widest(self) -> int:
        return max((lv.concurrency or lv.max_concurrency or 0 for lv in self.levels), default=0)

    def next(self, levels: Sequence[LevelResult]) -> Step:
        done = {lv.label for lv in levels}
        todo = next((lv for lv in self.levels if lv.label not in done), None)
        return Step(todo, todo.label, "grid", "given levels") if todo else Step(None, reason="levels simulated")

    def settings(self) -> SweepSettings | None:
        return None


async def simulate(config: EngineConfig, workload: WorkloadSpec, levels: Sequence[LevelSpec], spec: RunSpec, *,
                   out_dir: Path | None, chunks: bool, observer: SweepObserver,
                   existing: Existing = "refuse", repeat: int = 1) -> SweepRun:
    """Given levels on the simulated engine in virtual time, through the same loop as a real sweep."""
    from plateau_bench.sim.runner import VirtualLevelRunner

    result = ResultFile(kind="sim", created=now_utc(), tool=tool_info(), host=host_info(), spec=spec,
                        target=TargetRecord(kind="sim", preset=config.name))
    writer = ResultWriter(out_dir, result, existing=existing) if out_dir is not None else None

    def on_level(run: LevelRun, level: LevelResult, repeat: int) -> None:
        if writer is not None:
            writer.add_level(level)

    plan = GridPlan(levels, repeat)
    plan.limits.validate(False)
    try:
        state = await run_sweep(
            VirtualLevelRunner(config, workload, chunks=chunks), plan, plan.limits,
            stop_rule=None, on_level=on_level, observer=observer,
            on_record=(lambda label, attempt, rep, r: writer.add_request(label, r, attempt, rep)) if writer else None)
        result.levels = list(state.levels)
        if writer is not None:
            writer.flush()
    finally:
        if writer is not None:
            writer.close()
    return SweepRun(state, result, out_dir)
