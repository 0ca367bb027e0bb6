"""The published result schema: generated from the types, checked in, and true of saved results.

A change to a result type fails ``test_the_checked_in_schema_is_the_generated_one`` until the schema
is regenerated (``plateau schema --out schema/result.schema.json``), so every change to the format
is a deliberate one; an incompatible one also bumps ``SCHEMA_VERSION`` and teaches
``store_migrate`` to upgrade older files. The saved results under ``tests/data/results`` (one per
schema version and kind) must keep loading, and keep satisfying the published schema.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from plateau_bench.commands.schema import schema_text
from plateau_bench.result import SCHEMA_VERSION, ResultFile
from plateau_bench.store import load_result, load_summary

from support.loading import Cli

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schema" / "result.schema.json"
SAVED = sorted((ROOT / "tests" / "data" / "results").iterdir())


def test_the_checked_in_schema_is_the_generated_one() -> None:
    assert SCHEMA.read_text() == schema_text(), (
        "the result types changed: regenerate with `plateau schema --out schema/result.schema.json` "
        "(and bump SCHEMA_VERSION with a migration if old files no longer fit)")
    assert f"schema version {SCHEMA_VERSION}" in json.loads(SCHEMA.read_text())["title"]


@pytest.mark.parametrize("saved", SAVED, ids=lambda p: p.name)
def test_saved_results_load_and_satisfy_the_schema(saved: Path) -> None:
    result = load_result(saved)
    assert isinstance(result, ResultFile) and result.levels
    jsonschema.validate(load_summary(saved), json.loads(SCHEMA.read_text()))


def test_one_saved_result_per_schema_version_and_kind() -> None:
    seen = {(json.loads((p / "result.json").read_text())["schema_version"], load_result(p).kind) for p in SAVED}
    assert {(1, "sim"), (1, "sweep"), (SCHEMA_VERSION, "sim"), (SCHEMA_VERSION, "sweep")} <= seen


def test_a_fresh_result_satisfies_the_schema(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "sim"
    done = cli("sim", "--concurrency", "4,16", "--output-len", "16", "--out", str(out))
    assert done.exit_code == 0, done.output
    jsonschema.validate(json.loads((out / "result.json").read_text()), json.loads(SCHEMA.read_text()))


def test_version_1_is_upgraded_without_inventing_figures() -> None:
    old = json.loads((ROOT / "tests/data/results/v1-sweep/result.json").read_text())
    new = load_result(ROOT / "tests/data/results/v1-sweep")
    for before, after in zip(old["levels"], new.levels, strict=True):
        assert after.output_throughput == before["output_throughput"]
        assert after.phase == before["extra"]["phase"]
        assert after.client.cpu_pct_max == before["client"]["cpu_pct_max"]
        assert after.hung == 0  # schema 1 did not count hung requests; none are invented
    assert old["plateau"]["throughput"] is None and new.plateau is None


def test_a_malformed_levels_list_is_one_line(cli: Cli, tmp_path: Path) -> None:
    data = json.loads((ROOT / "tests/data/results/v2-sim/result.json").read_text())
    data["levels"] = [{"label": 3}]
    (tmp_path / "result.json").write_text(json.dumps(data))
    for args in (["diagnose", str(tmp_path)], ["report", str(tmp_path)], ["sweep", "--resume", str(tmp_path)]):
        done = cli(*args)
        assert done.exit_code == 2, (args, done.output)
        assert "malformed" in done.output and done.output.strip().count("\n") == 0
