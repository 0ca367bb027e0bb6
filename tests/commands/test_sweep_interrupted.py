"""What a sweep says of a first Ctrl-C: the level it ended early where that level measured a window and was
kept, or that the level running then had measured nothing and is not a level of the result."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.commands.sweep import _exit_code
from plateau_bench.result import INTERRUPT_NOTE
from plateau_bench.sweep.loop import SweepState, _stopped_by_user

from support.builders import level_result, result_file

ENDED = level_result(8, 1000.0, notes=[f"{INTERRUPT_NOTE}2.5 s: its window closes there"])
FINISHED = level_result(4, 900.0)


def test_the_stop_reason_names_the_level_ended_early_only_where_it_was_kept() -> None:
    assert _stopped_by_user(SweepState(levels=[FINISHED, ENDED]), "C=16") == "stopped by Ctrl-C, which ended C=8 early"
    assert _stopped_by_user(SweepState(levels=[FINISHED]), "C=8") == (
        "stopped by Ctrl-C during C=8, before it had measured a window (not kept)")


@pytest.mark.parametrize(("levels", "where"), [
    ([FINISHED, ENDED], "the sweep stopped after the level it ended early"),
    ([FINISHED], "the sweep stopped in a level that had not measured a window yet (not kept)"),
])
def test_the_last_line_says_whether_the_level_ended_early_was_kept(levels: list, where: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(result_file(levels), tmp_path, finished_early=True) == 130
    assert capsys.readouterr().err.strip() == (
        f"plateau: interrupted (Ctrl-C): {where}; its levels are saved in {tmp_path} (continue with --resume "
        f"{tmp_path})")
