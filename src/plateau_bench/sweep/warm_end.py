"""The end of a sweep's live load, and the verdict as it formed.

Warm levels (``analysis.warm``) share one live closed loop, which ends once: when the sweep ends, or
before a level that is not a steady one. Its last requests then drain (or, under ``--no-drain``, are
cancelled). They were still streaming when the last warm level closed its window, and belong to that
level: their records join it, and it is built again with them (the same window, their final records in
place of what they had streamed by its close), so a request that failed after the close is counted as
failed, not as throughput (their tokens until the close count as they did; see ``analysis.warm_level``).

The verdict as it stood is kept on every level (``verdict_then``: the constraint, and the cap where the
verdict names one, taken at the level's close), and the time to verdict is the benchmark-seconds up to the
close of the first level from which it never changed again (the last level's drain, ``warm.drained_s``,
comes after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from plateau_bench.analysis.level import build_level
from plateau_bench.analysis.repeats import repeat_figures, repeat_stats
from plateau_bench.level_run import LevelRun, WarmEnd
from plateau_bench.records import RequestRecord
from plateau_bench.result import LevelResult, ResultFile, Verdict


@dataclass
class WarmLast:
    run: LevelRun
    level: LevelResult      # the repeat's own figures (the level itself for the first)
    repeat: int


class _State(Protocol):
    @property
    def levels(self) -> list[LevelResult]: ...

    @property
    def slo_max(self) -> LevelResult | None: ...


class _Spent(_State, Protocol):
    spent_s: float


OnLevel = Callable[[LevelRun, LevelResult, int], None]
OnRecord = Callable[[str, int, int, RequestRecord], None]


async def end_warm(runner: object, state: _Spent, last: WarmLast | None, *, drain: bool,
                   on_level: OnLevel | None, on_record: OnRecord | None) -> None:
    """End the runner's live load, if any, and give its last requests to the last warm level."""
    ending = getattr(runner, "end_warm", None)
    if ending is None:
        return
    ended: WarmEnd | None = await ending(drain)
    if ended is None:
        return
    state.spent_s += ended.seconds
    if last is None:
        return
    level = last.level
    if on_record is not None:
        for r in ended.records:
            on_record(level.label, level.attempt, last.repeat, r)
    run = msgspec.structs.replace(
        last.run, records=[*last.run.records, *ended.records],
        cancelled_at_end=last.run.cancelled_at_end + ended.cancelled,
        benchmark_s=(last.run.benchmark_s or 0.0) + ended.seconds)
    rebuilt = build_level(run)
    rebuilt.attempt = level.attempt
    if rebuilt.warm is not None:
        rebuilt.warm = msgspec.structs.replace(rebuilt.warm, drained_s=ended.seconds)
    what = (f"{len(ended.records)} request(s) still streaming at the close drained after the sweep "
            f"({ended.seconds:.1f} s)" if ended.records else "")
    if ended.cancelled:
        what = f"{ended.cancelled} request(s) still streaming at the close cancelled at the sweep's end"
    if what:
        rebuilt.notes.append(f"{what}: their tokens until the close are in this window, their records here")
    saved: LevelResult | None = rebuilt
    if last.repeat != 1:
        saved = _replace_repeat(state.levels, rebuilt, last.repeat)
    else:
        for name in ("phase", "gain", "goodput_rps", "repeats", "repeat_stats", "verdict_then"):
            setattr(rebuilt, name, getattr(level, name))
        state.levels[:] = [rebuilt if lv is level else lv for lv in state.levels]
    if on_level is not None and saved is not None:   # the samples were saved with the level already
        on_level(msgspec.structs.replace(run, server_samples=[], gpu_samples=[], dcgm_samples=[],
                                         health_samples=[]), saved, last.repeat)


def _replace_repeat(levels: list[LevelResult], rebuilt: LevelResult, repeat: int) -> LevelResult | None:
    """A repeat's figures again, with its last requests counted (the level's own stay those of repeat 1)."""
    kept = next((lv for lv in levels if lv.label == rebuilt.label and lv.attempt == rebuilt.attempt), None)
    if kept is None:
        return None
    kept.repeats = sorted([*(f for f in kept.repeats if f.repeat != repeat), repeat_figures(rebuilt, repeat)],
                          key=lambda f: f.repeat)
    kept.repeat_stats = repeat_stats(kept.repeats)
    return kept


def verdict_key(verdict: Verdict | None) -> str | None:
    """What must not change for the verdict to stand: the constraint, and the cap it names."""
    if verdict is None:
        return None
    return verdict.constraint + (f" at {verdict.estimated_cap}" if verdict.estimated_cap else "")


def verdict_now(plan: object, state: _State, engine: str | None) -> str | None:
    """The verdict the levels measured so far support."""
    conclude = getattr(plan, "conclude", None)
    if conclude is None:
        return None
    result = ResultFile(kind="sweep")
    conclude(result, list(state.levels), state.slo_max, engine, None)
    return verdict_key(result.verdict)


def time_to_verdict(result: ResultFile) -> float | None:
    """Benchmark-seconds until the verdict first stood as it ended (None: no verdict, or none recorded): up to
    the close of the first level from which it never changed, so not the drain at the sweep's end, which
    came after the verdict stood (``verdict_then`` is taken at the close) and only completes the records."""
    final = verdict_key(result.verdict)
    levels = result.levels
    if final is None or not levels or any(lv.verdict_then is None for lv in levels):
        return None
    if levels[-1].verdict_then != final:
        return None
    first = len(levels) - 1
    while first > 0 and levels[first - 1].verdict_then == final:
        first -= 1
    warm = levels[first].warm
    drained = warm.drained_s if warm is not None else 0.0
    return sum(lv.benchmark_s or 0.0 for lv in levels[:first + 1]) - drained
