"""The diagnosis gauntlet: accuracy per verdict class, the confusion matrix and the cap what-if errors.

Random simulated engines (caps, KV sizes, token budgets, step-time coefficients, prompt/output lengths
and spreads, steady and burst levels, mixed and prefill-first scheduling) are swept in virtual time and
every verdict is scored against the engine's own record of what held requests out, in three arms:
client alone, with /metrics, and client alone with one load-generator spike. The scenario generator,
the oracle's rules and the scoring are in tests/gauntlet (harness.py; the rules in test_gauntlet.py's
docstring); the full run there (marked slow) asserts the acceptance: >= 95 % correct, no
high-confidence wrong verdict, every what-if within 25 % of the engine with the cap doubled.

    .venv/bin/python bench/gauntlet.py [--scenarios 210] [--front-end 30] [--seed 0] [--jobs 2] [--misses]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gauntlet.harness import Score, front_end_scenarios, judge, scenarios, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=210, help="how many (the families rotate: 7 of them)")
    parser.add_argument("--front-end", type=int, default=30, help="scenarios behind a slow front end (a family apart)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="processes simulating scenarios")
    parser.add_argument("--misses", action="store_true", help="list every verdict the oracle does not accept")
    parser.add_argument("--warm-levels", action="store_true", help="sweep with warm steady levels")
    args = parser.parse_args()
    started = time.perf_counter()
    todo = scenarios(args.scenarios, args.seed) + front_end_scenarios(args.front_end, args.seed)
    if args.warm_levels:
        todo = [dataclasses.replace(s, warm=True) for s in todo]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            cases = list(pool.map(simulate, todo, chunksize=4))
    else:
        cases = [simulate(s) for s in todo]
    score = Score([o for case in cases for o in judge(case)])
    print(f"{args.scenarios} + {args.front_end} front-end scenarios (seed {args.seed}), 3 arms each: client alone, "
          "/metrics, client with one spike")
    print(score.table())
    if args.misses:
        print("\nnot accepted:")
        for o in score.outcomes:
            if not o.correct:
                print(f"  {o.scenario.describe()} [{o.arm}] oracle {o.oracle.primary} (accepts "
                      f"{', '.join(sorted(o.oracle.accepted))}): {o.verdict.constraint}, {o.verdict.confidence}")
    print(f"\n{time.perf_counter() - started:.0f} s of wall time", file=sys.stderr)


if __name__ == "__main__":
    main()
