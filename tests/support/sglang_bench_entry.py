"""Run one of SGLang's benchmark client modules without importing SGLang's serving engine.

Usage (with the Python of the venv scripts/provision_sglang_bench.sh made):
    python sglang_bench_entry.py sglang.benchmark.serving --backend sglang-oai ...
    python sglang_bench_entry.py sglang.benchmark.steady_state_serving --steady-state-concurrency-ratio 0.8 ...

The client (``sglang/benchmark/``) needs only aiohttp, numpy, transformers and a few small packages, but
the package initializers on its import path (``sglang/__init__.py``, ``sglang/srt/utils/__init__.py``,
``sglang/srt/disaggregation/utils.py``) load the GPU engine: torch, triton, CUDA kernels. SGLang is
installed without its dependencies, those initializers are skipped (the packages are registered bare),
and the one name the client takes from ``disaggregation/utils.py`` (``FAKE_BOOTSTRAP_HOST``, a string
constant) is read from that file's source. Everything the client runs is SGLang's own code.

Runs in the SGLang venv: imports nothing of plateau-bench.
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
import types
from pathlib import Path

BARE_PACKAGES = ("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.disaggregation")
CONSTANTS_FROM = ("sglang.srt.disaggregation.utils", ("FAKE_BOOTSTRAP_HOST",))


def _register_bare(root: Path) -> None:
    for name in BARE_PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        sys.modules[name] = module


def _constants_module(root: Path) -> None:
    """The module named in CONSTANTS_FROM holding only its literal constants, read without running it."""
    name, wanted = CONSTANTS_FROM
    source = root.joinpath(*name.split(".")[1:]).with_suffix(".py").read_text()
    module = types.ModuleType(name)
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in wanted:
                    setattr(module, target.id, ast.literal_eval(node.value))
    missing = [w for w in wanted if not hasattr(module, w)]
    if missing:
        raise SystemExit(f"{name}: no constant {', '.join(missing)} in this SGLang version")
    sys.modules[name] = module


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed in this Python")
    root = Path(next(iter(spec.submodule_search_locations)))
    _register_bare(root)
    _constants_module(root)
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
