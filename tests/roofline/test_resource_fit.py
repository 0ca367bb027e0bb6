"""One figure calibrates one resource (``roofline.resource_fit``): a single stream's TPOT reads the memory
bandwidth's efficiency and leaves compute at its default; steps that load both resources fit both."""

from __future__ import annotations

from pathlib import Path

import pytest

from plateau_bench.commands.roofline import roofline_from_options
from plateau_bench.roofline import Efficiency
from plateau_bench.roofline.resource_fit import fit_resources, work_by_resource
from plateau_bench.roofline.twin import step_coefficients

from support.loading import plateau

LLAMA_8B = Path(__file__).parents[2] / "examples" / "models" / "dense_gqa_llama.json"
BASE = Efficiency(memory=0.79, compute=0.69, interconnect=0.5)
RF, _ = roofline_from_options(LLAMA_8B, "h100-sxm", None, input_len=1000, output_len=1000)
OVERHEAD = RF.deployment.step_overhead_s


def measured_step(truth: Efficiency, batch: float, context: float) -> float:
    w = work_by_resource(RF, batch, context)
    return OVERHEAD + w.memory / truth.memory + w.compute / truth.compute + w.interconnect / truth.interconnect


def test_the_work_split_by_resource_adds_up_to_the_steps_work() -> None:
    c = step_coefficients(RF, 1.0, experts="separate")
    for batch in (1.0, 64.0, 1024.0):
        split = work_by_resource(RF, batch, 1500.0)
        whole = c.t0 - OVERHEAD + c.a * batch + c.c * batch * 1500.0
        assert sum(split) == pytest.approx(whole, rel=1e-9)
    assert work_by_resource(RF, 1.0, 1500.0).share("memory") > 0.95          # one stream: the weights read
    assert work_by_resource(RF, 4096.0, 100.0).share("compute") > 0.3        # a large batch: the products


def test_a_single_streams_tpot_calibrates_memory_and_keeps_compute() -> None:
    truth = Efficiency(memory=0.55, compute=0.69, interconnect=0.5)
    fit = fit_resources(RF, [(1.0, measured_step(truth, 1.0, 1500.0), 1500.0)], BASE)
    assert fit.fitted == ("memory",) and fit.efficiency.memory == pytest.approx(0.55, rel=0.01)
    assert (fit.efficiency.compute, fit.efficiency.interconnect) == (0.69, 0.5)
    assert fit.describe().startswith("fitted memory 0.55; kept compute 0.69, interconnect 0.50")


def test_steps_that_load_both_resources_fit_both() -> None:
    truth = Efficiency(memory=0.7, compute=0.4, interconnect=0.5)
    points = [(b, measured_step(truth, b, 300.0), 300.0) for b in (1.0, 8.0, 64.0, 512.0, 2048.0, 4096.0)]
    fit = fit_resources(RF, points, BASE)
    assert set(fit.fitted) == {"memory", "compute"}
    assert fit.efficiency.memory == pytest.approx(0.7, rel=0.02)
    assert fit.efficiency.compute == pytest.approx(0.4, rel=0.02)
    assert max(abs(r) for r in fit.residuals) < 1e-4


def test_a_step_faster_than_the_roofline_reads_the_roofline_itself() -> None:
    fit = fit_resources(RF, [(1.0, 0.5 * OVERHEAD, 1500.0)], BASE)
    assert fit.efficiency.memory == 1.0


def test_sim_takes_one_figure_and_says_what_it_calibrated(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["sim", "--model", str(LLAMA_8B), "--gpu", "h100-sxm", "--tpot-at-1", "9ms",
                              "--input-len", "1000", "--output-len", "1000", "--concurrency", "1"], capsys)
    assert code == 0, err
    assert "fitted memory" in out and "kept compute 0.69, interconnect 0.50" in out
    assert "from a single stream's TPOT of 9.00 ms" in out


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--gpu", "h100-sxm", "--tpot-at-1", "soon"], "--tpot-at-1"),
    (["--gpu", "h100-sxm", "--tpot-at-1", "9ms", "--efficiency", "0.5"],
     "--efficiency and --tpot-at-1 both set the efficiency: choose one"),
])
def test_bad_one_figure_calibrations_are_one_line(argv: list[str], fragment: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["sim", "--model", str(LLAMA_8B), *argv, "--concurrency", "1"], capsys)
    assert code == 2 and fragment in err and "Traceback" not in err and err.strip().count("\n") == 0, err


def test_one_figure_without_a_model_says_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["sim", "--tpot-at-1", "9ms", "--concurrency", "1"], capsys)
    assert code == 2 and "--tpot-at-1 sets the twin --model CONFIG derives: give --model too" in err
