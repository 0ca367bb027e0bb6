"""One entry point for every measuring job: ``run_job`` takes a ``Job`` from the URL to the saved result.

``plateau run`` (a ``OneLevelPlan``), ``plateau sweep`` (any other plan) and each server ``plateau tune``
starts go through the same sequence, in this order and nowhere else: the target (the URL given, or the
embedded twin started), the prompts prepared, the server's /metrics found, the first interrupt made to
finish the level rather than kill it, the plan measured and saved (``sweep.session.measure``). The
commands only build the ``Job`` from their flags and render the ``JobOutcome``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from plateau_bench.aio import first_interrupt_finishes
from plateau_bench.progress import LevelProgress
from plateau_bench.result import ResultFile
from plateau_bench.roofline import Roofline
from plateau_bench.spec import TargetSpec, WorkloadSpec
from plateau_bench.store import Existing
from plateau_bench.sweep.loop import SweepObserver
from plateau_bench.sweep.plan import Plan


@dataclass(frozen=True)
class Telemetry:
    """Where the server's own figures are: its /metrics (default: the target's) and DCGM exporters."""

    metrics_url: str | None = None
    no_metrics: bool = False
    dcgm_urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Placement:
    """Where the load runs: this process (``workers`` None), a pool of processes, or Ray actors."""

    workers: int | str | None = None
    ray: str | None = None
    per_node: int = 1


@dataclass(frozen=True)
class Twin:
    """The simulated engine started when no URL is given."""

    preset: str = "tiny"
    speed: float = 1.0


@dataclass(frozen=True)
class Job:
    """Everything one measurement needs. ``target`` builds the validated target at the base URL (the
    one given, or the twin's, known only once it runs)."""

    url: str | None
    target: Callable[[str], TargetSpec]
    workload: WorkloadSpec
    plan: Plan
    out_dir: Path | None
    existing: Existing = "refuse"
    telemetry: Telemetry = field(default_factory=Telemetry)
    placement: Placement = field(default_factory=Placement)
    twin: Twin = field(default_factory=Twin)
    roofline: Roofline | None = None
    wait_ready_s: float | None = None


class JobView(SweepObserver, Protocol):
    """What shows a job as it runs (the live view, a line per level): it observes the levels and holds
    the running level's progress."""

    @property
    def progress(self) -> LevelProgress | None: ...


class _Silent:
    progress: LevelProgress | None = None

    def level_started(self, level: object, phase: str) -> None:
        pass

    def level_finished(self, level: object) -> None:
        pass


@dataclass(frozen=True)
class JobOutcome:
    result: ResultFile
    out_dir: Path | None
    finished_early: bool   # an interrupt ended a level early: its figures cover what it ran


def _say(line: str) -> None:
    print(line, file=sys.stderr)


async def run_job(job: Job, view: AbstractContextManager[JobView] | None = None) -> JobOutcome:
    """Measure ``job.plan`` against its target, saving as it goes (see the module docstring).

    ``view`` is entered while the levels run. A first interrupt (Ctrl-C, SIGTERM) finishes the running
    level and stops the plan there (``finished_early``); a second one raises ``KeyboardInterrupt``.
    """
    from plateau_bench.sweep.session import PROBE_PROMPTS, measure, metrics_url_for, prepare, target_url

    plan = job.plan
    async with target_url(job.url, job.twin.preset, job.twin.speed, job.workload.tokenizer) as (base_url, twin):
        requests = plan.prompts_to_prepare()
        prepared = await prepare(job.target(base_url), job.workload,
                                 PROBE_PROMPTS if requests is None else requests, sends=plan.sends(),
                                 wait_ready_s=job.wait_ready_s, twin=twin)
        metrics_url, required = metrics_url_for(prepared.target, job.telemetry.metrics_url,
                                                 job.telemetry.no_metrics)
        shown: AbstractContextManager[JobView] = view if view is not None else nullcontext(_Silent())
        with first_interrupt_finishes(_say) as interrupts, shown as observer:
            done = await measure(prepared, job, metrics_url=metrics_url, metrics_required=required,
                                 observer=observer, progress=lambda: observer.progress)
    return JobOutcome(done.result, job.out_dir, interrupts.finished_early)
