"""The event-loop helpers: the collector kept off the objects that existed before a level, and Ctrl-C."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

import pytest

from plateau_bench.aio import first_interrupt_finishes, level_finisher, old_objects_frozen, stop_asked
from plateau_bench.driver.runner import HttpLevelRunner
from plateau_bench.records import RequestRecord
from plateau_bench.sim.embed import start_sim_server
from plateau_bench.sim.presets import get_preset
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.workload.prompts import Prompt


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_objects_made_before_are_frozen_and_the_bodys_own_garbage_is_still_collected() -> None:
    assert gc.get_freeze_count() == 0
    before = [_Cycle() for _ in range(100)]
    with old_objects_frozen():
        assert gc.get_freeze_count() >= len(before)
        _Cycle()                          # unreachable at once: only the collector can free a cycle
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_the_frozen_objects_go_back_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError), old_objects_frozen():
        raise RuntimeError("level broke")
    assert gc.get_freeze_count() == 0


async def test_a_levels_load_runs_with_the_old_objects_frozen() -> None:
    frozen_while_running: list[int] = []

    def on_record(record: RequestRecord) -> None:
        frozen_while_running.append(gc.get_freeze_count())

    with start_sim_server(get_preset("tiny")) as twin:
        runner = HttpLevelRunner(TargetSpec(url=twin.url, model="tiny"), [Prompt("hello there", 2, 4)],
                                 metrics_url=None)
        run = await runner.run_level(LevelSpec(mode="burst", concurrency=4), label="C=4", on_record=on_record,
                                     stop_rule=None)
    assert len(run.records) == 4 and all(r.error is None for r in run.records)
    assert len(frozen_while_running) == 4 and min(frozen_while_running) > 1000   # the imports, at least
    assert gc.get_freeze_count() == 0


async def _two_ctrl_c(said: list[str], ended: list[int]) -> None:
    with first_interrupt_finishes(said.append) as seen, level_finisher(lambda: ended.append(1)):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.2)
        assert ended == [1] and seen.finished_early and stop_asked() and not seen.stopped
        os.kill(os.getpid(), signal.SIGINT)   # a level that does not end: the second one stops it all
        await asyncio.sleep(5)


def test_a_first_ctrl_c_ends_the_level_and_a_second_stops_everything_at_once() -> None:
    said: list[str] = []
    ended: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(_two_ctrl_c(said, ended))
    assert ended == [1] and not stop_asked()
    assert said == ["plateau: ending the level now (the requests in flight are cancelled, what finished is kept); "
                    "Ctrl-C again to stop at once"]


async def _swallow_the_first_interrupt() -> str:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.5)   # the interrupt is raised in here ...
    except KeyboardInterrupt:
        pass                       # ... and lost, as a transport's callback loses it
    await asyncio.sleep(5)
    return "ran on"


def test_a_sigterm_lost_inside_a_callback_still_ends_the_run() -> None:
    from plateau_bench import aio

    previous = signal.getsignal(signal.SIGTERM)
    aio.treat_sigterm_as_interrupt()
    try:
        with pytest.raises(KeyboardInterrupt):
            aio.run(_swallow_the_first_interrupt())
        assert aio.terminated()
    finally:
        signal.signal(signal.SIGTERM, previous)
        aio._terminated = False


async def _report_to_the_loop(error: BaseException) -> None:
    asyncio.get_running_loop().call_exception_handler({"message": "Fatal error on transport", "exception": error})


@pytest.mark.parametrize(("terminated", "error", "printed"), [
    (True, KeyboardInterrupt(), False),    # SIGTERM's interrupt, caught by a transport: the run ends in one line
    (False, KeyboardInterrupt(), True),    # not ours: the loop says it as it always does
    (True, ConnectionResetError(), True),  # a real transport error while ending is still said
])
def test_the_loop_is_quiet_only_about_sigterms_own_interrupt(caplog: pytest.LogCaptureFixture, terminated: bool,
                                                             error: BaseException, printed: bool) -> None:
    from plateau_bench import aio

    aio._terminated = terminated
    try:
        with caplog.at_level("ERROR", logger="asyncio"):
            aio.run(_report_to_the_loop(error))
    finally:
        aio._terminated = False
    assert ("Fatal error on transport" in caplog.text) is printed
