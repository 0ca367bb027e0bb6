"""Reading the generated blocks of the README and the docs, and telling when their figures drifted.

Shared by tests/test_readme.py (which reruns every block's commands) and the tests that compute a block's
figures themselves (the full gauntlet), so a benchmark is run once in the suite, not twice.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]   # tests/support/ -> the repository
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_figures", ROOT / "scripts" / "readme_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


figures = _load_script()
WHERE = figures.located()   # block name -> the page it is on


def numbers(content: str) -> list[tuple[float, str]]:
    """Every number of a block's output with its line, in order; ``$ ...`` command lines are input."""
    return [(value, line) for value, line, _ in _tokens(content) if value is not None]


def _tokens(content: str) -> list[tuple[float | None, str, str]]:
    """(number or None, its line, the token with numbers masked) for the words of a block's output."""
    found: list[tuple[float | None, str, str]] = []
    for line in content.split("\n"):
        if line.startswith("$ ") or line.startswith("```"):
            continue
        pairs = re.sub(r"\[(\d+),(\d+)\]", r"[\1 \2]", line)  # a bracket [181,215] is two numbers, not 181,215
        for word in pairs.split():
            texts = NUMBER.findall(word)
            found += [(float(text.replace(",", "")), line, "#") for text in texts]
            if not texts:
                found.append((None, line, word))
    return found


def drift(readme: str, rerun: str, rel: float, abs_: float,
          loose: tuple[tuple[str, float, float], ...] = (), spare: int = 0) -> list[str]:
    """The figures of ``readme`` that differ from ``rerun`` by more than the tolerance, in words.

    The two outputs are aligned on their words with the numbers masked, so rewording or reflowing
    moves no figure; a figure that only one side has (a clause a real-time run prints only sometimes)
    is tolerated up to ``spare`` of them, and reported beyond.
    """
    ours, theirs = _tokens(readme), _tokens(rerun)
    matcher = difflib.SequenceMatcher(None, [k for _, _, k in ours], [k for _, _, k in theirs], autojunk=False)
    moved: list[str] = []
    unmatched: list[str] = []
    for _, i1, i2, j1, j2 in matcher.get_opcodes():
        a_side = [(v, line) for v, line, _ in ours[i1:i2] if v is not None]
        b_side = [(v, line) for v, line, _ in theirs[j1:j2] if v is not None]
        if len(a_side) != len(b_side):
            unmatched += [f"README {v:g} in: {line.strip()}" for v, line in a_side]
            unmatched += [f"rerun {v:g} in: {line.strip()}" for v, line in b_side]
            continue
        for (a, line), (b, _) in zip(a_side, b_side, strict=True):
            r, e = next(((r, e) for key, r, e in loose if key in line), (rel, abs_))
            if abs(a - b) > max(r * abs(b), e):
                moved.append(f"README {a:g}, rerun {b:g} (tolerance {max(r * abs(b), e):g}) in: {line.strip()}")
    if len(unmatched) > spare:
        moved.append(f"{len(unmatched)} figures on one side only (allowed: {spare}):\n  " + "\n  ".join(unmatched)
                     + f"\n--- README\n{readme}\n--- rerun\n{rerun}")
    return moved
