"""Every parser of a command-line value answers a value or one line naming what is wrong, never a traceback:
any text, and text shaped like the values (names, separators, numbers huge, tiny, negative, not finite)."""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from plateau_bench.analysis.slo import parse_slo
from plateau_bench.commands.options import parse_workers
from plateau_bench.errors import PlateauError
from plateau_bench.importers.common import Where
from plateau_bench.importers.table import parse_cell
from plateau_bench.roofline.deployment import parse_dtype
from plateau_bench.sim.faults import parse_faults
from plateau_bench.sim.replicas import parse_balancer
from plateau_bench.spec import MAX_DURATION_S, parse_duration, parse_float_list, parse_int_list, parse_length
from plateau_bench.sweep.tune import parse_param

PARSERS: dict[str, Callable[[str], object]] = {
    "duration": lambda t: parse_duration(t, "--duration"),
    "length": lambda t: parse_length(t, "--input-len"),
    "int list": lambda t: parse_int_list(t, "--concurrency"),
    "float list": lambda t: parse_float_list(t, "--rate"),
    "slo": parse_slo,
    "faults": parse_faults,
    "tune param": parse_param,
    "balancer": parse_balancer,
    "dtype": lambda t: parse_dtype(t, "--dtype"),
    "workers": lambda t: parse_workers(t, cores=2),
    "table cell": lambda t: parse_cell(t, Where("table.csv", 3), "tok/s"),
}

NUMBERS = st.one_of(st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["1e300", "-0", "0", "1e-300", "nan", "inf", "0x10", "1_000", "", " "]))
NAMES = st.sampled_from(["ttft_p99", "tpot_p50", "hang", "http_429", "uniform", "normal", "lognormal", "fixed",
                         "file", "max_num_seqs", "auto", "fp8", "bf16", "round-robin", "x"])
UNITS = st.sampled_from(["", "s", "ms", "m", "h", "%", "tok/s", " GB"])
SHAPED = st.lists(st.tuples(NAMES, st.sampled_from(["=", ":", ".."]), NUMBERS, UNITS), max_size=3).map(
    lambda parts: ",".join(f"{n}{sep}{v}{u}" for n, sep, v, u in parts))
TEXT = st.one_of(st.text(max_size=24), SHAPED, st.tuples(NUMBERS, UNITS).map("".join),
                 st.lists(NUMBERS, max_size=4).map(",".join))


@given(TEXT)
@settings(max_examples=400, deadline=None)
def test_every_value_parser_answers_a_value_or_one_line(text: str) -> None:
    for name, parse in PARSERS.items():
        try:
            value = parse(text)
        except PlateauError as exc:
            assert "\n" not in str(exc) and str(exc), (name, text)
            continue
        if name == "duration":
            assert isinstance(value, float) and 0 < value <= MAX_DURATION_S and math.isfinite(value)
        if name in ("int list", "float list"):
            assert isinstance(value, list) and all(math.isfinite(v) and v > 0 for v in value), (text, value)
