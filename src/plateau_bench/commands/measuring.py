"""What ``run`` and ``sweep`` share above ``sweep.job``: the job built from their option groups, run with
the live view, and the interrupt that came before any level finished."""

from __future__ import annotations

import sys
from pathlib import Path

from plateau_bench.aio import interrupted_by, interrupted_exit_code
from plateau_bench.aio import run as run_async
from plateau_bench.commands import options as o
from plateau_bench.commands.config_file import note_result_dir
from plateau_bench.report.live import LiveView
from plateau_bench.roofline import Roofline
from plateau_bench.spec import WorkloadSpec
from plateau_bench.store import Existing
from plateau_bench.sweep.job import Job, JobOutcome, run_job
from plateau_bench.sweep.plan import Plan


def build_job(target: o.TargetFlags, twin: o.TwinFlags, placement: o.PlacementFlags, workload: WorkloadSpec,
              plan: Plan, *, out_dir: Path | None, existing: Existing, roofline: Roofline | None = None) -> Job:
    """The job the groups describe, every flag checked before anything starts."""
    job = Job(url=target.url, target=target.spec, workload=workload, plan=plan, out_dir=out_dir, existing=existing,
              telemetry=target.telemetry(), placement=placement.placement(), twin=twin.twin(), roofline=roofline,
              wait_ready_s=target.wait_ready_s())
    o.check_load_size(plan.widest())
    return job


def measure(job: Job, output: o.OutputFlags, *, stopped: str) -> JobOutcome:
    """``run_job`` with the live view; a second interrupt ends the command here with exit 130 or 143 and
    ``stopped``'s line ("...; finished levels are saved in DIR")."""
    try:
        limits = job.plan.limits
        level_s = limits.max_level_s if limits.level_stretch_s is not None else None
        return run_async(run_job(job, LiveView(enabled=output.live, est_levels=job.plan.planned_levels(),
                                               level_s=level_s)))
    except KeyboardInterrupt:
        out = job.out_dir
        if out is not None and ((out / "result.json").exists() or (out / "requests.jsonl").exists()):
            note_result_dir(out)
        print(f"plateau: {interrupted_by()}{stopped}", file=sys.stderr)
        raise SystemExit(interrupted_exit_code()) from None
