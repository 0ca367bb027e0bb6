"""Fuzzing the importers and the CLI's value parsers: whatever a file or a flag holds, the answer is a
result or one ``PlateauError`` line (the CLI prints it as one line, exit 2), never another exception.

Each case starts from a real file of a tool's format and changes one value (any JSON value, extreme
numbers included) or one table cell; the levels it yields must also hold figures a measurement can have.
"""

from __future__ import annotations

import json
import math
import resource
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau_bench.errors import PlateauError
from plateau_bench.importers import import_sources

from conftest import DATA

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
JSON_FILES = ["vllm_bench_serve.json", "vllm_v04.json", "guidellm_v03.json", "guidellm_v05.json",
              "aiperf_records_layout.json", "sglang.jsonl", "sglang_2024.jsonl", "vllm_detailed.jsonl"]
TABLES = ["run_a.csv", "run_a.md", "run_b.md"]

numbers = st.one_of(st.integers(min_value=-(10**30), max_value=10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 1e300, -0.0, 2**63]))
values = st.one_of(numbers, st.text(max_size=12), st.none(), st.booleans(), st.lists(numbers, max_size=3),
                   st.dictionaries(st.text(max_size=4), numbers, max_size=2))


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node[:4]) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _replace(node: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node[path[0]] = _replace(node[path[0]], path[1:], value)
    return node


@pytest.fixture(autouse=True)
def memory_cap() -> Iterator[None]:
    """Every case runs with at most 4 GiB more address space than the test process holds already: a value
    that makes an importer allocate per token (a request of 3e9 output tokens asked for 23.7 GiB) fails
    here as MemoryError instead of ending the machine's test run."""
    if not hasattr(resource, "RLIMIT_AS") or not Path("/proc/self/status").exists():
        yield
        return
    held = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = held + 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _holds_up(path: Path) -> None:
    """Import ``path``: a PlateauError is a fine answer; levels must have figures a measurement can have."""
    try:
        imported = import_sources([path])
    except PlateauError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    for item in imported.levels:
        lv = item.level
        assert lv.concurrency is None or lv.concurrency >= 1
        assert lv.completed >= 0 and lv.failed >= 0
        for figure in (lv.output_throughput, lv.duration_s, lv.wall_s, lv.request_throughput):
            assert math.isfinite(figure) and figure >= 0


@pytest.mark.parametrize("name", JSON_FILES)
@FUZZ
@given(data=st.data())
def test_one_changed_value_in_a_tools_file_imports_or_is_one_line(name: str, data: st.DataObject,
                                                                    tmp_path: Path) -> None:
    lines = (DATA / name).read_text().splitlines()
    docs = [json.loads(line) for line in lines] if name.endswith(".jsonl") else [json.loads("\n".join(lines))]
    k = data.draw(st.integers(0, len(docs) - 1))
    path = data.draw(st.sampled_from(_leaves(docs[k])))
    docs[k] = _replace(docs[k], path, data.draw(values))
    target = tmp_path / name
    text = "\n".join(json.dumps(d) for d in docs) if name.endswith(".jsonl") else json.dumps(docs[0])
    target.write_text(text)
    _holds_up(target)


@pytest.mark.parametrize("name", TABLES)
@FUZZ
@given(data=st.data())
def test_one_changed_table_cell_imports_or_is_one_line(name: str, data: st.DataObject, tmp_path: Path) -> None:
    lines = (DATA / name).read_text().splitlines()
    sep = "," if name.endswith(".csv") else "|"
    rows = [i for i, line in enumerate(lines) if line.count(sep) >= 2 and not set(line) <= set("|-: ")]
    i = data.draw(st.sampled_from(rows[1:] or rows))
    cells = lines[i].split(sep)
    j = data.draw(st.integers(0, len(cells) - 1))
    cells[j] = data.draw(st.one_of(st.text(alphabet="0123456789.-e+,naif ", max_size=10),
                                   numbers.map(str)))
    lines[i] = sep.join(cells)
    target = tmp_path / name
    target.write_text("\n".join(lines) + "\n")
    _holds_up(target)
