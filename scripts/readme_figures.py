#!/usr/bin/env python3
"""Regenerate the example outputs and figures in README.md and the docs pages, in place.

    .venv/bin/python scripts/readme_figures.py                 # every block this machine can run
    .venv/bin/python scripts/readme_figures.py sim-a fidelity  # only these blocks
    .venv/bin/python scripts/readme_figures.py --list          # the blocks, what they need, how long

A block is everything between ``<!-- generated:NAME -->`` and ``<!-- /generated -->`` in README.md or
a page of docs/ (each name in one place);
only those lines are rewritten, so running the script again rewrites the same blocks and leaves the
prose around them alone. Two kinds:

* command blocks: a fenced block whose ``$ plateau ...`` (or ``$ .venv/bin/python bench/NAME.py ...``)
  lines are the commands. Each runs as ``python -m plateau_bench ...`` (or that benchmark script, with
  this interpreter) in a fresh temporary directory shared by the block's commands (so
  ``--out runs/x`` then ``diagnose runs/x`` works), with a fixed terminal width, and its output replaces
  the lines after it. ``$LLAMACPP_URL`` in a command is the URL of a llama-server this script starts
  (tests/support/real_servers.py; provision first with scripts/provision.sh).
* figure blocks: a table computed here (the fidelity table, from tests/support/seed_runs.py, with the
  bands tests/sim/test_fidelity.py asserts).

tests/test_readme.py reruns the fast blocks (and, marked slow, the demo sweep) and fails when a
number in README.md or the docs drifts from the rerun by more than the block's stated tolerance.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tests"))  # the test-only support package (tests/support)

BEGIN = re.compile(r"^<!-- generated:(?P<name>[a-z0-9-]+) -->$")
END = "<!-- /generated -->"
COLUMNS = "100"  # the terminal width the outputs are rendered at (rich tables, wrapped lines)
FENCE = "```"


@dataclass(frozen=True)
class Block:
    """How one generated block is made and how closely a rerun must match it."""

    name: str
    about: str
    rel: float  # tests/test_readme.py: a number may differ from the rerun by rel * |rerun| ...
    abs: float  # ... or by abs, whichever is larger
    slow: bool = False  # real time: tens of seconds or more
    needs: str | None = None  # "llamacpp": a llama-server started here; "llamacpp-binary": its binary and model
    excerpt_from: str | None = None  # show each output from its first line starting with this
    # Looser (rel, abs) for the numbers of lines containing a key, where a figure is real-time noise.
    loose: tuple[tuple[str, float, float], ...] = ()
    spare: int = 0  # figures only one side may have (a clause a real-time run prints only sometimes)
    figure: Callable[[], str] | None = None  # a figure block's content; None for a command block


def _fidelity_table() -> str:
    from support import seed_runs as s

    def pct(value: float, reference: float) -> str:
        return f"{s.rel(value, reference):+.1%}".replace("%", " %")

    rows = ["| preset, level | figure | reference | twin | difference | test band | kind |",
            "|---|---|---|---|---|---|---|"]

    def row(where: str, figure: str, reference: float, twin: float, band: float | str, kind: str,
            fmt: str = ",.1f") -> None:
        band_text = band if isinstance(band, str) else f"±{band:.0%}".replace("%", " %")
        rows.append(f"| {where} | {figure} | {reference:{fmt}} | {twin:{fmt}} | {pct(twin, reference)} | "
                    f"{band_text} | {kind} |")

    for preset in ("seed-a-tp8ep", "seed-a-tp4"):
        row(f"{preset}, C=1", "output tok/s", s.RUN_A_C1[preset], s.burst(preset, 1).level.output_throughput,
            s.PIN, "fitted")
    tp4_256 = s.burst("seed-a-tp4", 256).level.output_throughput
    row("seed-a-tp4, C=256", "output tok/s", s.RUN_A_C256["seed-a-tp4"], tp4_256, s.PIN, "fitted")
    for c, ref in s.RUN_A.items():
        twin = s.burst("seed-a-tp8ep", c)
        level, kind = twin.level, "fitted" if c in s.RUN_A_FITTED_C else "hold-out"
        band = s.PIN if kind == "fitted" else s.HOLDOUT_RUN_A
        where = f"seed-a-tp8ep, C={c:,}"
        row(where, "wall s", ref.wall_s, level.wall_s, band, kind, ".2f")
        row(where, "output tok/s", ref.tok_s, level.output_throughput, band, kind)
        row(where, "mean latency s", ref.lat_avg_s, (level.e2e_ms.mean or 0.0) / 1000, band, kind, ".2f")
        if ref.lat_p50_s is not None:
            row(where, "p50 latency s (nearest rank)", ref.lat_p50_s, twin.nearest_rank_median_s, band, kind,
                ".2f")
        if ref.lat_p99_s is not None:
            row(where, "p99 latency s", ref.lat_p99_s, (level.e2e_ms.p99 or 0.0) / 1000, band, kind, ".2f")
        row(where, "achieved concurrency", ref.lat_avg_s * c / ref.wall_s, level.achieved_concurrency,
            s.HOLDOUT_RUN_A, "hold-out (reference: lat avg x C / wall)")
    row("seed-b-fp4, C=1", "output tok/s", s.RUN_B_C1, s.run_b(1).level.output_throughput, s.PIN, "fitted",
        ".2f")
    for c in (256, 512):
        row(f"seed-b-fp4, C={c}", "output tok/s", s.RUN_B[c], s.run_b(c).level.output_throughput,
            f"0 to +{s.RUN_B_LOOSE_MAX_FASTER:.0%}".replace("%", " %"), "hold-out (loose reference)")
    at_1024 = s.run_b(1024).level
    row("seed-b-fp4, C=1,024", "output tok/s", s.RUN_B[1024], at_1024.output_throughput, s.PIN_RUN_B, "fitted")
    row("seed-b-fp4, C=1,024", "mean TPOT ms", s.RUN_B_1024_MEAN_TPOT_MS, at_1024.tpot_ms.mean or 0.0,
        "known miss (strict xfail)", "hold-out (reference: ~300)")
    at_2048 = s.run_b(2048).level
    row("seed-b-fp4, C=2,048", "output tok/s", s.RUN_B[2048], at_2048.output_throughput, s.PIN_RUN_B, "fitted")
    twin_2048 = {"peak_output_throughput": at_2048.peak_output_throughput,
                 "total_throughput": at_2048.total_throughput,
                 "achieved_concurrency": at_2048.achieved_concurrency, "mean_tpot_ms": at_2048.tpot_ms.mean or 0.0}
    labels = {"peak_output_throughput": "peak output tok/s", "total_throughput": "total tok/s",
              "achieved_concurrency": "achieved concurrency", "mean_tpot_ms": "mean TPOT ms"}
    for key, label in labels.items():
        row("seed-b-fp4, C=2,048", label, s.RUN_B_2048[key], twin_2048[key], s.HOLDOUT_RUN_B[key], "hold-out")
    return "\n".join(rows)


def _what_if_table() -> str:
    """The cap what-if on seed-a-tp8ep, as tests/sweep/test_twin_sweeps.py checks it: an adaptive sweep
    in virtual time predicts the throughput with the cap doubled; the twin with the cap doubled says."""
    import asyncio

    import msgspec

    from plateau_bench.analysis.diagnosis import diagnose
    from plateau_bench.sim.presets import get_preset
    from plateau_bench.sim.runner import VirtualLevelRunner
    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.loop import run_plan
    from plateau_bench.sweep.plan import ConcurrencyPlan

    def sweep(max_num_seqs: int) -> tuple[object, object]:
        config = msgspec.structs.replace(get_preset("seed-a-tp8ep"), max_num_seqs=max_num_seqs)
        runner = VirtualLevelRunner(config, WorkloadSpec(input_len=128, output_len=512), steady_s=30)
        return asyncio.run(run_plan(runner, ConcurrencyPlan(), previous=[]))

    state, summary = sweep(256)
    verdict = diagnose(state.levels)  # type: ignore[attr-defined]
    _, doubled = sweep(512)
    predicted = verdict.predicted_throughput_doubled_cap or 0.0
    actual = doubled.plateau.throughput if doubled.plateau else 0.0  # type: ignore[attr-defined]
    return "\n".join([
        "| seed-a-tp8ep, adaptive steady sweep, 128 in / 512 out | tok/s |",
        "|---|---|",
        f"| plateau at the cap of {verdict.estimated_cap} | {summary.plateau.throughput:,.0f} |",  # type: ignore[attr-defined]
        f"| the verdict's what-if: the cap doubled | {predicted:,.0f} |",
        f"| the twin run with `--max-num-seqs 512` | {actual:,.0f} (the prediction is off by "
        f"{predicted / actual - 1:+.1%}; the test's band is 25 %) |",
    ])


def _bench(name: str) -> object:
    """A benchmark script of bench/ as a module (its render functions read the committed measurements)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # msgspec looks a struct's module up by name
    spec.loader.exec_module(module)
    return module


GPU_TRUTH = "bench/data/gpu_truth-h200-sxm.json"
SCALE_OUT_16 = "bench/data/scale_out-16core.json"


def _gpu_truth_table() -> str:
    """The committed H200 measurement beside today's roofline (bench/gpu_truth.py --render)."""
    gpu_truth = _bench("gpu_truth")
    saved = gpu_truth.load(ROOT / GPU_TRUTH)  # type: ignore[attr-defined]
    rendered = gpu_truth.render(saved, gpu_truth.catalogue_gpu(saved, None))  # type: ignore[attr-defined]
    return f"{FENCE}\n$ python bench/gpu_truth.py --render {GPU_TRUTH}\n{rendered}\n{FENCE}"


def _scale_out_16_table() -> str:
    """The committed 16-core scale-out run (bench/scale_out.py --render)."""
    import json

    scale_out = _bench("scale_out")
    rendered = scale_out.render(json.loads((ROOT / SCALE_OUT_16).read_text()))  # type: ignore[attr-defined]
    return f"{FENCE}\n$ .venv/bin/python bench/scale_out.py --render {SCALE_OUT_16}\n{rendered}\n{FENCE}"


BLOCKS = {
    block.name: block
    for block in (
        Block("demo-sweep", "`plateau sweep` with no URL: the embedded simulated engine, in real time (~75 s)",
              rel=0.15, abs=3.0, slow=True, excerpt_from="Plateau:",
              # TTFT at the cap has no queueing in it: milliseconds of scheduling noise (11-21 ms measured);
              # the split of the widest level's TTFT holds milliseconds of HTTP and scheduling noise too.
              loose=(("TTFT p50 grew", 1.0, 15.0), ("outside the engine", 1e9, 1e9)), spare=2),
        Block("sim-a", "Run A replayed in the simulated engine, then diagnosed (virtual time, seconds)",
              rel=0.01, abs=0.01, slow=True),
        Block("sweep-efficiency", "bench/sweep_efficiency.py: adaptive sweeps vs the grid and the truth (virtual time, ~3 min)",
              rel=0.01, abs=0.01, slow=True,
              loose=(("wall time for this case", 1e9, 1e9),)),  # real time, machine-dependent: not compared
        Block("published", "bench/published.py: the first-principles twin against published measurements "
              "(virtual time, ~1 min)", rel=0.01, abs=0.01, slow=True),
        Block("published-pooled", "bench/published.py --pooled: the same, every table's figures pooled "
              "(virtual time, ~1 min)", rel=0.01, abs=0.01, slow=True),
        Block("gauntlet", "bench/gauntlet.py: the diagnosis scored against the engine's ground truth (~2 min)",
              rel=0.01, abs=0.01, slow=True, loose=(("s of wall time", 1e9, 1e9),)),  # real time: not compared
        Block("gauntlet-warm", "bench/gauntlet.py --warm-levels: the same scenarios swept with warm levels (~2 min)",
              rel=0.01, abs=0.01, slow=True, loose=(("s of wall time", 1e9, 1e9),)),  # real time: not compared
        Block("scale-out", "bench/scale_out.py: --workers against serve-sim, C=256 to 8,192 (real time, ~3 min)",
              # The requests failed and lost are held exactly; the real-time figures (the rows marked
              # "streams": throughput, CPU, lag, TTFT error on two shared cores) and the wall time are not.
              rel=0.0, abs=0.0, slow=True, loose=(("streams", 1e9, 1e9), ("wall time", 1e9, 1e9))),
        Block("trace-send-lag", "bench/trace_send_lag.py: trace replay at 100 requests/s against serve-sim (real time, ~1 min)",
              # The lag is real time on a shared machine (what the bench is for, not a test's bound): the
              # lines with it are not compared; the trace's request count is.
              rel=0.0, abs=0.0, slow=True, loose=(("lag", 1e9, 1e9),)),
        Block("seed-a-what-if", "the cap what-if on seed-a-tp8ep against the twin with the cap doubled (virtual time)",
              rel=0.01, abs=0.01, slow=True, figure=_what_if_table),
        Block("roofline-verdict", "Run A on the twin placed on the roofline, then a twin derived from it (virtual time)",
              rel=0.01, abs=0.01, slow=True, excerpt_from="Verdict:"),
        Block("calibrate-predict", "calibrate the twin at one cap, predict another, run the twin there (virtual time)",
              rel=0.01, abs=0.01, slow=True),
        Block("sim-prefix", "shared system prompts with and without the twin's prefix cache (virtual time)",
              rel=0.01, abs=0.01, slow=True),
        Block("fidelity", "the twin against the reference runs, with the bands tests/sim/test_fidelity.py asserts",
              rel=0.01, abs=0.01, figure=_fidelity_table),
        Block("gpu-truth", f"{GPU_TRUTH} (bench/gpu_truth.py on an H200) beside the roofline as the package "
              "computes it today", rel=0.001, abs=0.001, figure=_gpu_truth_table),
        Block("twin-defaults", "a first-principles twin of Llama-3.1-8B on one H200: the measured default "
              "efficiencies, then one factor of 0.5 (virtual time, two processes: ~3 s)", rel=0.01, abs=0.01,
              slow=True),
        Block("scale-out-16", f"{SCALE_OUT_16} (bench/scale_out.py on 16 cores, serve-sim on 2 of them)",
              rel=0.0, abs=0.0, figure=_scale_out_16_table),
        Block("llamacpp-tune", "plateau tune starting llama-server at --parallel 2..16, brute force as a check "
              "(real servers, ~8 min)", rel=0.25, abs=3.0, slow=True, needs="llamacpp-binary",
              excerpt_from="plateau tune: throughput",
              # A prediction's error is a ratio of two real-time figures: far noisier than either.
              loose=(("parallel=", 1.0, 30.0),)),
        Block("llamacpp-sweep", "adaptive sweeps of a real llama-server (--parallel 4), with and without /metrics",
              rel=0.25, abs=3.0, slow=True, needs="llamacpp", excerpt_from="Plateau:",
              loose=(("TTFT p50 grew", 1.0, 15.0),)),
    )
}


def blocks_in(text: str) -> list[tuple[str, int, int]]:
    """(name, first line inside, line of the end marker) for every generated block, in order."""
    lines = text.split("\n")
    found: list[tuple[str, int, int]] = []
    i = 0
    while i < len(lines):
        match = BEGIN.match(lines[i].strip())
        if match:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == END), None)
            if end is None:
                raise SystemExit(f"line {i + 1}: {lines[i].strip()} has no {END}")
            found.append((match["name"], i + 1, end))
            i = end
        i += 1
    return found


def block_text(text: str, name: str) -> str:
    lines = text.split("\n")
    for found, start, end in blocks_in(text):
        if found == name:
            return "\n".join(lines[start:end])
    raise KeyError(f"no generated block {name!r} on this page")


def pages() -> list[Path]:
    """README.md and every page of the docs."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def located() -> dict[str, Path]:
    """Each generated block's name -> the page it is on."""
    where: dict[str, Path] = {}
    for page in pages():
        for name, _, _ in blocks_in(page.read_text()):
            if name in where:
                raise SystemExit(f"generated block {name!r} is on two pages: {where[name]} and {page}")
            where[name] = page
    return where


BENCH = ".venv/bin/python bench/"


def commands_of(content: str) -> list[str]:
    """The ``$ plateau ...`` and ``$ .venv/bin/python bench/...`` lines of a command block, without the prompt."""
    return [line[2:].strip() for line in content.split("\n") if line.startswith(("$ plateau ", f"$ {BENCH}"))]


def _argv(command: str) -> list[str]:
    words = shlex.split(command)
    if command.startswith(BENCH):  # .venv/bin/python bench/NAME.py ARGS: this interpreter, the repo's script
        return [sys.executable, str(ROOT / words[1]), *words[2:]]
    return [sys.executable, "-m", "plateau_bench", *words[1:]]  # without "plateau"


def _excerpt(output: str, start: str | None) -> str:
    lines = output.rstrip("\n").split("\n")
    if start is not None:
        # lstrip: a table's title is centred; the line shown keeps its leading spaces
        first = next((i for i, line in enumerate(lines) if line.lstrip().startswith(start)), None)
        if first is not None and first > 0:
            return "\n".join(["...", *lines[first:]])
    return "\n".join(lines)


@contextmanager
def _environment(block: Block) -> Iterator[dict[str, str]]:
    """Variables the block's commands may use; starts (and stops) the real server a block needs."""
    if block.needs is None:
        yield {}
        return
    from support import real_servers

    if block.needs == "llamacpp-binary":   # the block's command starts its own servers
        binary, gguf = real_servers.llamacpp_binary(), real_servers.gguf_model("mid")
        real_servers.require_provisioned("llamacpp", [binary, gguf])
        yield {"LLAMA_SERVER": str(binary), "GGUF_MODEL": str(gguf)}
        return
    if hasattr(os, "sched_setaffinity") and real_servers.client_cpus():
        os.sched_setaffinity(0, real_servers.client_cpus())  # the load generator off the server's cores
    handle = real_servers.start_llamacpp(parallel=4, model="mid")
    try:
        yield {"LLAMACPP_URL": handle.url}
    finally:
        handle.stop()


def run_commands(block: Block, commands: list[str]) -> str:
    """Run a command block's commands as a user would, and return the block's new content."""
    out = [f"{FENCE}"]
    env = os.environ | {"COLUMNS": COLUMNS, "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix=f"readme-{block.name}-") as work, _environment(block) as extra:
        scratch = Path(work) / "tmp"  # where a command puts results by default (a random name)
        scratch.mkdir()
        (Path(work) / "examples").symlink_to(ROOT / "examples")   # the commands name examples/models/...
        env |= extra | {"TMPDIR": str(scratch)}
        for command in commands:
            argv = _argv(command)
            for variable, value in extra.items():
                argv = [arg.replace(f"${variable}", value) for arg in argv]
            done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{block.name}: `{command}` exited {done.returncode}:\n{done.stderr[-3000:]}")
            output = re.sub(re.escape(str(scratch)) + r"/\S+", "<temporary directory>", done.stdout + done.stderr)
            output = output.replace(work + os.sep, "")
            for variable, value in extra.items():   # the paths a machine put in, shown as the command names them
                output = output.replace(value, f"${variable}")
            output = "\n".join(line.rstrip() for line in output.split("\n"))
            out += [f"$ {command}", _excerpt(output, block.excerpt_from)]
    out.append(FENCE)
    return "\n".join(out)


def generate(block: Block, current: str) -> str:
    """The block's new content (without the markers), from its commands or its figure function."""
    if block.figure is not None:
        return f"\n{block.figure()}\n"  # blank lines: the markdown table is not glued to the markers
    commands = commands_of(current)
    if not commands:
        raise SystemExit(f"generated block {block.name!r} has no `$ plateau ...` line to run")
    return run_commands(block, commands)


def replace_block(text: str, name: str, content: str) -> str:
    lines = text.split("\n")
    for found, start, end in blocks_in(text):
        if found == name:
            return "\n".join([*lines[:start], content, *lines[end:]])
    raise KeyError(f"no generated block {name!r} on this page")


def can_run(block: Block) -> str | None:
    """Why this machine cannot generate the block, or None."""
    if block.needs == "llamacpp":
        from support import real_servers

        missing = [p for p in (real_servers.llamacpp_binary(), real_servers.gguf_model("mid")) if not p.exists()]
        if missing:
            return f"llama.cpp not provisioned (missing {', '.join(map(str, missing))}; run scripts/provision.sh)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="blocks to regenerate (default: all this machine can run)")
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    args = parser.parse_args()
    where = located()
    if args.list:
        for name, page in where.items():
            block = BLOCKS.get(name)
            about = block.about if block else "(unknown block)"
            why = can_run(block) if block else None
            flags = (" [slow]" if block and block.slow else "") + (f" [cannot run: {why}]" if why else "")
            print(f"{name:16} {page.relative_to(ROOT)}: {about}{flags}")
        return 0
    unknown = [name for name in [*args.names, *where] if name not in BLOCKS]
    if unknown:
        print(f"unknown block(s): {', '.join(unknown)}; known: {', '.join(BLOCKS)}", file=sys.stderr)
        return 2
    for name in args.names or list(where):
        if name not in where:
            print(f"no page has the block {name!r}", file=sys.stderr)
            return 2
        block, page = BLOCKS[name], where[name]
        why = can_run(block)
        if why:
            print(f"{name}: skipped, {why}", file=sys.stderr)
            continue
        print(f"{name}: generating ({block.about}) in {page.relative_to(ROOT)}", file=sys.stderr)
        text = page.read_text()
        # after each block, so an interrupted run keeps what it made
        page.write_text(replace_block(text, name, generate(block, block_text(text, name))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
