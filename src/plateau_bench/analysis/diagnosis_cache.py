"""A prefix cache the workload did not ask for: a measurement fault, named before any server figure.

The server states what share of the prompt tokens it found in its prefix cache instead of computing
them (vLLM's ``prefix_cache_hits`` over ``prefix_cache_queries``, SGLang's ``cache_hit_rate``,
llama.cpp's estimate from its prompt-token counter; ``telemetry.summary``, ``analysis.level``). The
level's own record of its prompts (``PromptUse``) says what share the workload itself repeats: shared
prefixes (``--prefix-groups``), a dataset cycled with ``--allow-reuse``. Every other prompt is new, so
a hit rate well above that share means the server answered from its cache prompts meant to be new: an
earlier run with the same ``--seed`` against the same server, another client sending the same text, a
long system prompt in the chat template. Throughput and TTFT of such a level measure the cache, not
the workload asked for, and no verdict about the server can stand on them.

A level is named when its hit rate exceeds the workload's own share by ``EXCESS`` and the excess is at
least ``MIN_TOKENS`` tokens per request (a chat template's preamble is shorter; vLLM caches whole
16-token blocks only). Multi-turn sessions and traces repeat by design in ways not counted here, so
they are not checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from plateau_bench.analysis.diagnosis_common import at
from plateau_bench.result import LevelResult, Verdict

EXCESS = 0.20      # hit rate above the workload's own share of repeated tokens that is a fault
MIN_TOKENS = 64.0  # ... when it is also this many prompt tokens per request


def unasked_cache_hits(level: LevelResult) -> tuple[float, float] | None:
    """(the server's hit rate, the workload's own repeated share) where they disagree as a fault, else None."""
    used, hit = level.prompts, level.telemetry.prefix_cache_hit_rate
    if used is None or hit is None or used.by_design is not None or used.requests <= 0:
        return None
    share = used.reusable_share
    per_request = (hit - share) * used.prompt_tokens / used.requests
    if hit - share < EXCESS or per_request < MIN_TOKENS:
        return None
    return hit, share


def cache_fault(levels: Sequence[LevelResult]) -> Verdict | None:
    """The verdict for levels whose prefix cache hits the workload did not ask for (see the module docstring)."""
    faulty = [(lv, found) for lv in levels if (found := unasked_cache_hits(lv)) is not None]
    if not faulty:
        return None
    worst, (hit, share) = max(faulty, key=lambda item: item[1][0] - item[1][1])
    evidence = [f"{at(lv)}: the server found {h:.0%} of the prompt tokens in its prefix cache; the workload repeats "
                f"{s:.0%} ({lv.prompts.repeated if lv.prompts else 0} repeated prompt(s), "
                f"{lv.prompts.prefix_tokens if lv.prompts else 0:,} shared-prefix tokens)" for lv, (h, s) in faulty[:4]]
    return Verdict(
        "measurement",
        f"measurement fault: the server's prefix cache served {hit:.0%} of the prompt tokens at {at(worst)}, where "
        f"the workload repeats {share:.0%}: these levels measure cache hits, not the prompts asked for",
        "high",
        evidence,
        suggestions=[
            "restart the server (or flush its prefix cache) before measuring again: an earlier run with the same "
            "--seed sent these prompts",
            "or give another --seed, and make sure no other client sends the same prompts",
            "a long system prompt in the chat template is shared by every request: --endpoint completions "
            "measures without it",
            "to measure the cache on purpose, ask for it: --prefix-groups G --prefix-len P (counted as reuse)",
        ],
    )
