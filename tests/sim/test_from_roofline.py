"""The twin from first principles: step times and KV cache from the roofline, an expert term that
follows the bound's shape, never faster than the hardware, and calibration from a measured sweep."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import msgspec
import pytest

from plateau_bench.analysis.roofline_place import calibrate_from_levels, decode_batch
from plateau_bench.roofline import (
    Deployment,
    Roofline,
    build_roofline,
    ceiling_at_batch,
    find_gpu,
    find_link,
    fit_overhead_and_efficiency,
    read_model_config,
    step_coefficients,
)
from plateau_bench.roofline.twin import expert_weights_s
from plateau_bench.sim.from_roofline import engine_from_roofline
from plateau_bench.sim.runner import VirtualLevelRunner
from plateau_bench.sim.step_model import StepModel
from plateau_bench.spec import WorkloadSpec
from plateau_bench.sweep.loop import run_plan
from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits

from support.loading import Cli, plateau

DATA = Path(__file__).parents[2] / "examples" / "models"


def roofline(config: str, gpu: str, *, gpus: int, tp: int, ep: int = 1, dtype: str = "bf16",
             overhead_s: float = 0.5e-3) -> Roofline:
    spec = find_gpu(gpu)
    layout = Deployment(gpus=gpus, tp=tp, ep=ep, dtype=dtype, input_len=128, output_len=512,  # type: ignore[arg-type]
                        step_overhead_s=overhead_s)
    return build_roofline(read_model_config(DATA / config), spec, layout, find_link(None, spec))


MOE = roofline("gqa_moe_230b.json", "rtx-pro-6000", gpus=8, tp=8, ep=8, dtype="fp8")
DENSE = roofline("dense_gqa_llama.json", "h100-sxm", gpus=1, tp=1)


def test_coefficients_are_the_roofline_over_the_efficiency() -> None:
    engine = engine_from_roofline(MOE, 0.4)
    ideal = step_coefficients(MOE, 0.4, experts="separate")
    step = engine.step
    assert (step.t0, step.a, step.b, step.c) == pytest.approx(tuple(ideal))
    for tokens in (1, 16, 256, 4096):
        assert step.expert_time(tokens) == pytest.approx(expert_weights_s(MOE, tokens, 0.4), rel=1e-9)
    assert engine.kv_tokens == MOE.kv_capacity_tokens and engine.model_name == MOE.model.name
    assert engine_from_roofline(DENSE, 0.5).step.experts == 0     # a dense model has no expert term


def test_the_closed_form_of_k_decode_steps_holds_with_the_expert_term() -> None:
    step = engine_from_roofline(MOE, 0.5).step
    k, n, kv0 = 37, 96, 50_000
    total = sum(step.step_time(n, 0, kv0 + j * n) for j in range(k))
    assert step.decode_run_time(k, n, kv0) == pytest.approx(total, rel=1e-12)
    within = step.decode_steps_within(total, n, kv0)
    assert within == k or step.decode_run_time(within, n, kv0) <= total < step.decode_run_time(within + 1, n, kv0)


@pytest.mark.slow   # a second or more: kept out of the inner loop
@pytest.mark.parametrize("rf", [MOE, DENSE], ids=["moe", "dense"])
def test_at_efficiency_one_the_twin_never_beats_the_roofline(rf: Roofline) -> None:
    engine = engine_from_roofline(rf, 1.0)
    workload = WorkloadSpec(input_len=128, output_len=512)
    runner = VirtualLevelRunner(engine, workload, steady_s=60)
    plan = ConcurrencyPlan(mode="steady", concurrencies=(1, 16, 64, 256, 1024), limits=SweepLimits(max_level_s=600))
    _, result = asyncio.run(run_plan(runner, plan))
    assert len(result.levels) == 5
    for lv in result.levels:
        found = decode_batch(lv)
        assert found is not None
        ceiling = ceiling_at_batch(rf, found[0], 128 + 256).tok_s
        assert 0 < lv.output_throughput <= ceiling * 1.01, (lv.label, lv.output_throughput, ceiling)


def test_the_fit_recovers_a_known_overhead_and_efficiency() -> None:
    # Steps made by the model itself: overhead 12 ms, efficiency 0.3.
    truth = engine_from_roofline(MOE, 0.3, step_overhead_s=12e-3).step
    points = [(float(b), truth.step_time(b, 0, b * 384), 384.0) for b in (1, 16, 64, 256)]
    fit = fit_overhead_and_efficiency(MOE, points)
    assert fit.efficiency == pytest.approx(0.3, rel=1e-6)
    assert fit.step_overhead_s == pytest.approx(12e-3, rel=1e-6)
    assert max(abs(r) for r in fit.residuals) < 1e-9


def test_the_fit_never_claims_more_than_the_hardware() -> None:
    fast = [(float(b), 0.5 * MOE.deployment.step_overhead_s, 384.0) for b in (1, 256)]
    fit = fit_overhead_and_efficiency(MOE, fast)
    assert fit.efficiency == 1.0 and fit.step_overhead_s >= 0
    single = fit_overhead_and_efficiency(MOE, [(256.0, 0.064, 384.0)])
    assert 0 < single.efficiency < 1 and single.step_overhead_s == MOE.deployment.step_overhead_s
    assert abs(single.residuals[0]) < 1e-9


@pytest.fixture(scope="module")
def seed_a(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seed-a") / "run"
    done = cli("sim", "--preset", "seed-a-tp8ep", "--input-len", "128", "--output-len", "512", "--concurrency",
               "1,64,256,512", "--out", str(out))
    assert done.exit_code == 0, done.output
    return out


HARDWARE = ["--gpu", "rtx-pro-6000", "--gpus", "8", "--tp", "8", "--ep", "8", "--dtype", "fp8"]


def test_calibrated_on_a_sweep_the_derived_twin_predicts_its_plateau(seed_a: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from plateau_bench.store import load_result

    measured = load_result(seed_a)
    fit, used = calibrate_from_levels(measured.levels, MOE)
    assert len(used) == 4 and 0 < fit.efficiency < 1
    code, out, err = plateau(["sim", "--model", str(DATA / "gqa_moe_230b.json"), *HARDWARE, "--efficiency-from",
                              str(seed_a), "--max-num-seqs", "256", "--input-len", "128", "--output-len", "512",
                              "--concurrency", "1,64,256,512", "--out", str(tmp_path / "derived")], capsys)
    assert code == 0, err
    # The sweep's decode steps are memory-bound at every level: memory is calibrated, the rest kept and said so
    assert "fitted memory 0.44; kept compute 0.69, interconnect 0.50 (what the points do not exercise)" in out
    assert "from the decode steps of 4 level(s)" in out
    derived = load_result(tmp_path / "derived")
    assert derived.spec.sim is not None and "MiniMaxM2" in derived.spec.sim.preset
    plateau_measured = max(lv.output_throughput for lv in measured.levels)
    plateau_derived = max(lv.output_throughput for lv in derived.levels)
    # A cap of 256 on both; the derived twin knows only the roofline, two fitted factors and the cap.
    assert plateau_derived == pytest.approx(plateau_measured, rel=0.15)


def test_default_efficiency_is_said_and_bad_flags_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["sim", "--model", str(DATA / "dense_gqa_llama.json"), "--gpu", "h100-sxm", "--concurrency",
                            "1"], capsys)
    assert code == 0 and "efficiency 0.79 memory, 0.69 compute, 0.50 interconnect (the defaults, bench/gpu_truth.py" \
        in out
    for argv, fragment in (
        (["--efficiency", "0.3"], "give --model too"),
        (["--model", str(DATA / "dense_gqa_llama.json"), "--gpu", "h100-sxm", "--preset", "tiny"], "choose one"),
        (["--model", str(DATA / "dense_gqa_llama.json"), "--gpu", "h100-sxm", "--efficiency", "1.5"],
         "must be in (0, 1]"),
        (["--model", str(DATA / "dense_gqa_llama.json")], "give one of --gpu NAME"),
        (["--gpu", "h100-sxm"], "--gpu describes the hardware for --model"),
    ):
        code, _, err = plateau(["sim", *argv], capsys)
        assert code == 2 and fragment in err and "Traceback" not in err, (argv, err)


@pytest.mark.slow   # starts serve-sim as its own process
def test_serve_sim_serves_the_derived_engine_under_the_models_name() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "plateau_bench", "serve-sim", "--port", "0", "--model",
                             str(DATA / "dense_gqa_llama.json"), "--gpu", "h100-sxm", "--efficiency", "0.6"],
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline()]
        while "Ctrl-C to stop" not in lines[-1] and lines[-1]:
            lines.append(proc.stderr.readline())
        assert any("efficiency 0.60" in line for line in lines), lines
        match = re.search(r"http://127\.0\.0\.1:(\d+)", lines[-1])
        assert match, lines

        async def served() -> list[str]:
            async with aiohttp.ClientSession() as session, \
                    session.get(f"http://127.0.0.1:{match[1]}/v1/models") as resp:
                data = await resp.json()
            return [m["id"] for m in data["data"]]

        assert asyncio.run(served()) == [read_model_config(DATA / "dense_gqa_llama.json").name]
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_step_model_without_experts_is_unchanged() -> None:
    plain = StepModel(t0=1e-3, a=2e-4, b=1e-5, c=1e-8)
    assert plain.step_time(10, 100, 1000) == 1e-3 + 2e-4 * 10 + 1e-5 * 100 + 1e-8 * 1000
    assert msgspec.structs.replace(plain, expert_s=1.0).step_time(10, 100, 1000) == plain.step_time(10, 100, 1000)
