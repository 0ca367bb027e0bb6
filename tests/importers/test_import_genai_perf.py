"""GenAI-Perf's artifact directories (tests/importers/data/genai_perf, see its README): AIPerf's
predecessor writes the same metric blocks, with its load in its own configuration layouts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.importers import import_sources

from conftest import DATA, load

NEW, OLD = "genai_perf/0_0_16", "genai_perf/0_0_8"
RUN = "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency{}"


def export(layout: str, concurrency: int) -> dict[str, object]:
    data: dict[str, object] = json.loads((DATA / layout / RUN.format(concurrency) /
                                          "profile_export_genai_perf.json").read_text())
    return data


@pytest.mark.parametrize("layout", [NEW, OLD])
def test_each_artifact_directory_is_a_steady_level_at_its_concurrency(layout: str) -> None:
    imported = load(layout)
    assert [(lv.level.mode, lv.level.concurrency) for lv in imported.levels] == [("steady", 16), ("steady", 32)]
    for lv, c in zip(imported.levels, (16, 32), strict=True):
        blocks = export(layout, c)
        assert lv.level.output_throughput == pytest.approx(blocks["output_token_throughput"]["avg"])  # type: ignore[index]
        assert lv.level.ttft_ms.p50 == pytest.approx(blocks["time_to_first_token"]["p50"])  # type: ignore[index]
        assert lv.level.completed == 200     # its request_count block (0.0.16), perf_analyzer's requests (0.0.8)
        assert any(n.startswith("TPOT: GenAI-Perf's inter-token latency") for n in lv.level.notes)
        assert any(n.startswith("imported from genai-perf: ") for n in lv.level.notes)
    assert imported.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_the_files_beside_the_export_are_skipped_and_said() -> None:
    warnings = " ".join(load(NEW).warnings)
    assert "the CSV twin of the JSON results next to it" in warnings
    assert "the request inputs (prompts) AIPerf or GenAI-Perf sent" in warnings
    assert "perf_analyzer's per-request export" in warnings


def test_an_old_export_without_perf_analyzers_requests_names_the_missing_count(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / OLD / RUN.format(16), run)
    (run / "profile_export.json").unlink()
    with pytest.raises(ConfigError, match=r"profile_export_genai_perf.json:1: missing field 'request_count'"):
        import_sources([run])


def test_a_request_rate_stimulus_is_an_open_loop_level(tmp_path: Path) -> None:
    data = export(NEW, 16)
    data["input_config"]["perf_analyzer"]["stimulus"] = {"request_rate": 8.0}  # type: ignore[index]
    (tmp_path / "profile_export_genai_perf.json").write_text(json.dumps(data))
    (level,) = import_sources([tmp_path]).levels
    assert (level.level.mode, level.level.rate, level.level.concurrency) == ("rate", 8.0, None)


def test_a_stimulus_without_a_load_asks_for_concurrency(tmp_path: Path) -> None:
    data = export(NEW, 16)
    data["input_config"]["perf_analyzer"]["stimulus"] = {}  # type: ignore[index]
    (tmp_path / "profile_export_genai_perf.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"GenAI-Perf profile export: missing field "
                                          r"'input_config.perf_analyzer.stimulus.concurrency' \(pass --concurrency\)"):
        import_sources([tmp_path])
