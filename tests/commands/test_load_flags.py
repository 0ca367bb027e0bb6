"""The stop-rule flags as a sweep gets them: --max-level-time auto, or a hard bound."""

from __future__ import annotations

import pytest

from plateau_bench.commands.load_flags import StopRuleFlags
from plateau_bench.errors import ConfigError
from plateau_bench.sweep.plan import AUTO_LEVEL_S, AUTO_STRETCH_S


def test_the_default_level_time_is_a_minute_that_may_stretch() -> None:
    limits = StopRuleFlags().limits()
    assert (limits.max_level_s, limits.level_stretch_s, limits.steady_bound_s) == (AUTO_LEVEL_S, AUTO_STRETCH_S,
                                                                                   AUTO_STRETCH_S)
    assert StopRuleFlags(max_level_time=" AUTO ").limits().level_stretch_s == AUTO_STRETCH_S


def test_a_given_level_time_is_a_hard_bound() -> None:
    limits = StopRuleFlags(max_level_time="90s").limits()
    assert (limits.max_level_s, limits.level_stretch_s, limits.steady_bound_s) == (90.0, None, 90.0)


def test_a_bad_level_time_is_a_one_line_error_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="--max-level-time"):
        StopRuleFlags(max_level_time="soon").limits()
