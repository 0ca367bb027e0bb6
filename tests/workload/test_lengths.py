"""Length distributions and the reference tools' random-dataset conventions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau_bench.commands.options import workload_spec
from plateau_bench.errors import ConfigError
from plateau_bench.spec import WorkloadSpec, parse_length
from plateau_bench.workload.lengths import LengthSampler, load_length_file, nominal_length, sample_lengths

from support.seed_runs import sglang_random_lengths


def draw(spec: WorkloadSpec, n: int, seed: int = 0) -> tuple[list[int], list[int]]:
    return LengthSampler(spec, np.random.default_rng(seed)).draw(n)


def test_the_default_convention_keeps_the_former_draws() -> None:
    spec = WorkloadSpec(input_len=100, output_len=40, range_ratio=0.5, seed=3)
    rng = np.random.default_rng(3)
    expected = (sample_lengths(rng, 100, 0.5, 200), sample_lengths(rng, 40, 0.5, 200))
    assert draw(spec, 200, seed=3) == expected
    assert min(expected[0]) >= 50 and max(expected[0]) <= 150


def test_sglang_convention_reproduces_bench_serving() -> None:
    # bench_serving's random dataset at its default --random-range-ratio 0 and --seed 1, as the
    # seed runs were measured (tests/support/seed_runs.py mirrors its sampling code).
    spec = WorkloadSpec(input_len=128, output_len=128, seed=1, length_convention="sglang")
    inputs, outputs = draw(spec, 512)
    assert list(zip(inputs, outputs, strict=True)) == sglang_random_lengths(512, seed=1)
    assert min(inputs) >= 1 and max(inputs) <= 128


def test_sglang_ratio_bounds() -> None:
    spec = WorkloadSpec(input_len=128, output_len=64, range_ratio=0.25, seed=7, length_convention="sglang")
    inputs, outputs = draw(spec, 4000)
    assert min(inputs) == 32 and max(inputs) == 128
    assert min(outputs) == 16 and max(outputs) == 64
    fixed = WorkloadSpec(input_len=128, output_len=64, range_ratio=1.0, length_convention="sglang")
    assert draw(fixed, 50) == ([128] * 50, [64] * 50)


def test_vllm_convention_uses_floor_and_ceil_bounds_and_its_seed_stream() -> None:
    spec = WorkloadSpec(input_len=100, output_len=10, range_ratio=0.33, seed=0, length_convention="vllm")
    inputs, outputs = draw(spec, 3000)
    # vLLM's RandomDataset: default_rng(seed), input lengths, then output lengths.
    rng = np.random.default_rng(0)
    lo, hi = math.floor(100 * 0.67), math.ceil(100 * 1.33)
    assert (lo, hi) == (67, 133)
    assert inputs == rng.integers(lo, hi + 1, size=3000).tolist()
    assert outputs == rng.integers(math.floor(10 * 0.67), math.ceil(10 * 1.33) + 1, size=3000).tolist()
    assert min(inputs) == 67 and max(inputs) == 133


def test_a_ratio_of_one_is_only_sglangs() -> None:
    with pytest.raises(ConfigError, match=r"--range-ratio must be in \[0, 1\) \(got 1.0\)"):
        WorkloadSpec(range_ratio=1.0, length_convention="vllm").validate()
    WorkloadSpec(range_ratio=1.0, length_convention="sglang").validate()


def test_uniform_includes_both_ends() -> None:
    spec = workload_spec("uniform:5,9", "uniform:1,1", 0.0, None, 0, None)
    inputs, outputs = draw(spec, 2000)
    assert set(inputs) == {5, 6, 7, 8, 9} and set(outputs) == {1}
    assert spec.input_len == 7


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_continuous_distributions_have_the_given_mean_and_sd(kind: str) -> None:
    spec = workload_spec(f"{kind}:500,120", "64", 0.0, None, 0, None)
    inputs, outputs = draw(spec, 40_000)
    values = np.asarray(inputs, dtype=np.float64)
    assert abs(values.mean() - 500) < 5 and abs(values.std() - 120) < 5
    assert min(inputs) >= 1 and outputs == [64] * 40_000
    if kind == "lognormal":
        assert float(np.median(values)) < 500   # right-skewed, unlike the normal


def test_normal_draws_below_one_are_raised_to_one() -> None:
    inputs, _ = draw(workload_spec("normal:2,10", "8", 0.0, None, 0, None), 2000)
    assert min(inputs) == 1


def test_file_is_an_empirical_distribution(tmp_path: Path) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("# observed prompt lengths\n10\n20, 20\n\n30 30 30  # three of these\n")
    assert load_length_file(str(path), "--input-len") == [10, 20, 20, 30, 30, 30]
    spec = workload_spec(f"file:{path}", "8", 0.0, None, 0, None)
    assert spec.input_len == 23   # the mean, 140 / 6
    inputs, _ = draw(spec, 6000)
    counts = {v: inputs.count(v) / 6000 for v in (10, 20, 30)}
    assert set(inputs) == {10, 20, 30}
    assert counts[10] == pytest.approx(1 / 6, abs=0.02) and counts[30] == pytest.approx(1 / 2, abs=0.02)


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "--input-len: cannot read 'abc'"),
    ("0", "--input-len must be >= 1 (got 0)"),
    ("gamma:1,2", "--input-len: unknown distribution 'gamma'"),
    ("uniform:9,5", "--input-len uniform: needs integers 1 <= lo <= hi"),
    ("uniform:1.5,5", "--input-len uniform: needs integers"),
    ("normal:100", "--input-len normal: needs two numbers, normal:mean,sd"),
    ("normal:100,nan", "--input-len normal: mean and sd must be finite"),
    ("lognormal:0,5", "--input-len lognormal: needs mean >= 1 and sd >= 0"),
    ("file:", "--input-len file: needs a path"),
])
def test_bad_lengths_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_length(text, "--input-len")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_bad_length_files_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("10\nten\n")
    with pytest.raises(ConfigError, match=r"^--output-len file:.*lens.txt:2: 'ten' is not an integer$"):
        workload_spec("8", f"file:{path}", 0.0, None, 0, None)
    with pytest.raises(ConfigError, match="cannot read the file"):
        nominal_length(parse_length(f"file:{tmp_path / 'missing'}", "--input-len"), "--input-len")


def test_a_ratio_with_a_distribution_is_refused() -> None:
    with pytest.raises(ConfigError, match="--range-ratio spreads fixed lengths"):
        workload_spec("normal:100,10", "8", 0.2, None, 0, None)


@given(st.text(max_size=40))
def test_the_parser_only_ever_raises_config_errors(text: str) -> None:
    try:
        spec = parse_length(text, "--input-len")
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    assert spec.kind in ("fixed", "uniform", "normal", "lognormal", "file")
