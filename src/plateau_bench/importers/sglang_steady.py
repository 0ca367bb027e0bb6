"""SGLang's steady-state report: ``python -m sglang.benchmark.steady_state_serving
--steady-state-concurrency-ratio R --steady-state-output-file F`` runs the serving benchmark and appends
one JSON line per run to F (the run's own result still goes to ``--output-file``).

The line is the longest stretch of the run during which at least ``concurrency_threshold`` requests
(R x the run's peak) were in flight, measured from the client's request times (0.5.x keys):
``concurrency_ratio``, ``window_start``/``window_end`` (the client's ``perf_counter``, s), ``duration``
(the window, s), ``concurrency_threshold``, ``completed`` (requests that ended in the window),
``total_input``/``input_throughput`` (prompts sent in the window; null for multi-turn runs),
``total_output``/``output_throughput`` (output tokens streamed in the window, a request's tokens shared
out over its chunks), their ``_retokenized`` twins, ``average_concurrency`` (in flight, time-averaged),
``peak_concurrency`` (an instant's peak) and ``peak_output_throughput`` (the busiest second).

It becomes one ``steady`` level. It does not keep the client's ``--max-concurrency``: the level's
concurrency is ``--concurrency`` when given, else the window's peak in flight (said in the notes).
"""

from __future__ import annotations

from typing import Any

from plateau_bench.importers.common import (
    ImportedLevel,
    ImportOptions,
    Summary,
    Where,
    integer,
    level_label,
    number,
    summary_level,
)

MARKS = ("concurrency_ratio", "window_start", "window_end", "concurrency_threshold", "average_concurrency",
         "peak_concurrency", "total_output_retokenized", "output_throughput_retokenized")


def is_steady(o: dict[str, Any]) -> bool:
    return "concurrency_ratio" in o and "window_start" in o and "average_concurrency" in o


def level(o: dict[str, Any], where: Where, opts: ImportOptions) -> ImportedLevel:
    """The steady-state window of one run as a level of its own (module docstring)."""
    peak = integer(o, "peak_concurrency", where)
    concurrency = opts.concurrency or peak
    label = f"{level_label('steady', concurrency, None)} steady window"
    s = Summary(label, "steady", concurrency=concurrency,
                completed=integer(o, "completed", where, required=True),
                duration_s=number(o, "duration", where, required=True))
    s.output_tokens = number(o, "total_output", where)
    s.output_throughput = number(o, "output_throughput", where)
    s.input_tokens = number(o, "total_input", where)
    s.input_throughput = number(o, "input_throughput", where)
    s.achieved_concurrency = number(o, "average_concurrency", where)
    s.peak_in_flight = peak
    s.peak_output_throughput = number(o, "peak_output_throughput", where)
    ratio = number(o, "concurrency_ratio", where)
    threshold = integer(o, "concurrency_threshold", where)
    s.notes.append(f"SGLang's steady-state window: {s.duration_s:.2f} s with at least {threshold} requests in "
                   f"flight ({ratio:g} x the peak of {peak}); the run's ramp-up and drain left out")
    if not opts.concurrency:
        s.notes.append(f"the client's --max-concurrency is not in this file: concurrency taken as the window's "
                       f"peak in flight ({peak})")
    s.notes.append("completed: requests that ended inside the window; output tokens: those streamed inside it "
                   "(a request's tokens shared out over its chunks)")
    return summary_level(s, f"sglang steady-state: {where}")
