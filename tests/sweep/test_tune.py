"""``plateau tune``: the template and the parameter grid, then a whole tune against serve-sim started by
the command itself (a real process, real HTTP), checked against measuring every setting."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from plateau_bench.errors import ConfigError
from plateau_bench.redaction import redact_command
from plateau_bench.sweep.tune import Forecast, TuneResult, check_template, parse_param, render, settings

from support.loading import plateau


def test_a_range_is_its_ends_and_the_powers_of_two_between() -> None:
    assert parse_param("max_num_seqs=8..512").values == [8, 16, 32, 64, 128, 256, 512]
    assert parse_param("parallel=3..20").values == [3, 4, 8, 16, 20]
    assert parse_param("x=5,1,3").values == [1, 3, 5]
    assert parse_param("max_num_seqs=8..64").knob == "cap"
    assert parse_param("max-num-batched-tokens=2048,8192").knob == "budget"
    assert parse_param("gpu_memory_utilization=80,90").knob is None
    for bad in ("max_num_seqs", "=1..2", "n=0..4", "n=8..4", "n=a,b"):
        with pytest.raises(ConfigError, match="--param"):
            parse_param(bad)


def test_the_template_gets_every_value_and_a_port() -> None:
    params = [parse_param("max_num_seqs=8,16"), parse_param("max_num_batched_tokens=2048")]
    assert [s["max_num_seqs"] for s in settings(params)] == [8, 16]
    argv = render("vllm serve m --max-num-seqs {max_num_seqs} --max-num-batched-tokens {max_num_batched_tokens} "
                  "--port {port}", settings(params)[1], 8123)
    assert argv[-5:] == ["16", "--max-num-batched-tokens", "2048", "--port", "8123"]
    with pytest.raises(ConfigError, match=re.escape("does not contain {max_num_batched_tokens}")):
        check_template("vllm serve m --max-num-seqs {max_num_seqs} --port {port}", params, url_given=False)
    with pytest.raises(ConfigError, match=re.escape("does not contain {port}")):
        check_template("serve {max_num_seqs} {max_num_batched_tokens}", params, url_given=False)
    with pytest.raises(ConfigError, match=re.escape("names {typo}")):
        render("serve {typo} {port}", {"max_num_seqs": 8}, 1)
    assert redact_command("vllm serve m --api-key sk-123 --port {port}") == "vllm serve m --api-key *** --port {port}"


@pytest.mark.slow   # four serve-sim processes, each swept over HTTP (~2 min, more on two busy cores)
@pytest.mark.timeout(300)
def test_tune_finds_the_best_cap_of_serve_sim_for_fewer_restarts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    serve = (f"{sys.executable} -m plateau_bench serve-sim --preset tiny --speed 2 --max-num-seqs {{max_num_seqs}} "
             "--port {port}")
    code, out, err = plateau(["tune", "--serve", serve, "--param", "max_num_seqs=8..64", "--concurrency",
                              "1,4,8,16,32,64,128", "--min-level-time", "3s", "--max-level-time", "6s", "--range-ratio",
                              "0.5", "--out", str(tmp_path), "--brute-force", "--json"], capsys)
    assert code == 0, err
    done = msgspec.json.decode(out, type=TuneResult)
    assert done.predicted and done.brute_force_restarts == 4
    assert 2 <= done.restarts <= 3   # the start, then at most --candidates 2; fewer when the rest cannot win
    by_why = {t.why: t for t in done.trials}
    assert by_why["start"].setting == {"max_num_seqs": 16}
    assert by_why["candidate"].predicted_from == [{"max_num_seqs": 16}]
    for t in done.trials:   # calibrated at 16, predicted up to four times that
        assert t.measured_tok_s and t.predicted_tok_s
        assert t.predicted_tok_s == pytest.approx(t.measured_tok_s, rel=0.15), t
    best = max(t.measured_tok_s or 0 for t in done.trials)
    assert done.recommended_tok_s == pytest.approx(best, rel=0.10)
    assert (tmp_path / "tune.json").exists() and (tmp_path / "run-max_num_seqs-16.server.log").exists()


def test_a_candidate_that_fails_is_recorded_and_the_rest_kept(tmp_path: Path) -> None:
    import asyncio

    from plateau_bench.driver.server_process import ServerStartError
    from plateau_bench.result import Plateau, ResultFile
    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.tune import run_tune

    async def measure(setting: dict[str, int], run_dir: Path) -> tuple[ResultFile, float | None]:
        if setting["x"] == 4:
            raise ServerStartError("x=4: the server exited during start-up")
        return ResultFile(kind="sweep", plateau=Plateau(float(setting["x"]) * 100, 1, True)), 0.1

    done = asyncio.run(run_tune([parse_param("x=1,2,4")], {"x": 2}, measure, tmp_path,
                                workload=WorkloadSpec(), candidates=0, brute_force=True))
    by_setting = {t.setting["x"]: t for t in done.trials}
    assert "failed: x=4: the server exited" in by_setting[4].why and by_setting[4].measured_tok_s is None
    assert by_setting[1].measured_tok_s == 100 and by_setting[2].measured_tok_s == 200


def _fake_sweep(value: float) -> object:
    from plateau_bench.result import Plateau, ResultFile

    return ResultFile(kind="sweep", plateau=Plateau(value, 1, True))


def test_each_measurement_recalibrates_before_the_next_candidate_is_chosen(tmp_path: Path) -> None:
    """A model that, calibrated on the start alone, ranks x=8 best; measured, x=8 is poor, and the model
    calibrated on both sweeps ranks x=4 best, which is the true best: the tune measures it next and
    recommends it, and every prediction names the sweeps it came from."""
    import asyncio

    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.tune import run_tune

    truth = {1: 100.0, 2: 180.0, 4: 300.0, 8: 150.0}

    async def measure(setting: dict[str, int], run_dir: Path) -> tuple[object, float | None]:
        run_dir.mkdir(parents=True)
        return _fake_sweep(truth[setting["parallel"]]), 0.1

    calibrations: list[list[str]] = []

    async def calibrate_on(run_dirs: object) -> object:
        names = sorted(p.name for p in run_dirs)  # type: ignore[attr-defined]
        calibrations.append(names)
        linear = names == ["run-parallel-2"]    # the start alone: throughput taken to grow with the cap

        async def predict(setting: dict[str, int]) -> Forecast:
            x = setting["parallel"]
            return Forecast(90.0 * x if linear else truth[x] * 1.05)
        return predict

    done = asyncio.run(run_tune([parse_param("parallel=1..8")], {"parallel": 2}, measure, tmp_path,  # type: ignore[arg-type]
                                workload=WorkloadSpec(), candidates=3, calibrate_on=calibrate_on))  # type: ignore[arg-type]
    by_x = {t.setting["parallel"]: t for t in done.trials}
    assert calibrations[:2] == [["run-parallel-2"], ["run-parallel-2", "run-parallel-8"]]
    assert by_x[8].why == "candidate" and by_x[8].predicted_tok_s == 720 and by_x[8].predicted_from == [{"parallel": 2}]
    assert by_x[4].why == "candidate" and by_x[4].predicted_tok_s == pytest.approx(315)
    assert by_x[4].predicted_from == [{"parallel": 2}, {"parallel": 8}]
    assert done.recommendation == {"parallel": 4} and done.recommended_tok_s == 300
    # x=8's prediction was 380 % high, so no prediction bounds what a setting may measure: the third round
    # measures the last one too rather than stop on the model's word.
    assert by_x[1].why == "candidate" and done.restarts == 4


FLATTENING = {1: 100.0, 2: 190.0, 4: 300.0, 8: 310.0, 16: 312.0}   # parallel -> measured tok/s


def _tune_flattening(tmp_path: Path, predicted: Callable[[int], Forecast]) -> object:
    """A tune of parallel=1..16 from 4 against FLATTENING, with the predictions given (four candidates)."""
    import asyncio

    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.tune import run_tune

    async def measure(setting: dict[str, int], run_dir: Path) -> tuple[object, float | None]:
        run_dir.mkdir(parents=True)
        return _fake_sweep(FLATTENING[setting["parallel"]]), 0.1

    async def calibrate_on(run_dirs: object) -> object:
        async def predict(setting: dict[str, int]) -> Forecast:
            return predicted(setting["parallel"])
        return predict

    return asyncio.run(run_tune([parse_param("parallel=1..16")], {"parallel": 4}, measure, tmp_path,  # type: ignore[arg-type]
                                workload=WorkloadSpec(), candidates=4, calibrate_on=calibrate_on))  # type: ignore[arg-type]


def test_the_rounds_end_when_no_setting_left_could_beat_the_best_measured(tmp_path: Path) -> None:
    done: TuneResult = _tune_flattening(tmp_path, lambda x: Forecast(FLATTENING[x] * (1.10 if x == 16 else 1.0)))  # type: ignore[assignment]
    # 16 (predicted 343) is measured first: 312, a +10 % error; 8 (predicted 310) could still beat 312
    # if it were 10 % low, so it is measured; 2 (190) and 1 (100) could not, and are not.
    assert sorted(t.setting["parallel"] for t in done.trials) == [4, 8, 16]
    assert done.restarts == 3 and done.recommendation == {"parallel": 16}
    assert any("no setting left could beat parallel=16 (312 tok/s measured): at the top of their bands (held-out "
               "error 0%, largest error so far 10%) the best would measure 211" in n for n in done.calibration_notes)


def test_the_calibrations_held_out_error_keeps_a_tune_from_stopping_on_the_models_word(tmp_path: Path) -> None:
    """The same tune as above, but the calibration's cross-validation held a sweep out at 48 % off: 2 (predicted
    190, up to 365 by that band) could beat 312, so the rounds go on; each trial keeps its band's top."""
    done: TuneResult = _tune_flattening(tmp_path, lambda x: Forecast(FLATTENING[x], held_out=0.48))  # type: ignore[assignment]
    assert sorted(t.setting["parallel"] for t in done.trials) == [2, 4, 8, 16]   # 1 (up to 192) could not
    assert any("(held-out error 48%, largest error so far 0%) the best would measure 192" in n
               for n in done.calibration_notes)
    by_x = {t.setting["parallel"]: t for t in done.trials}
    assert by_x[2].predicted_high == pytest.approx(190.0 / 0.52)


def test_the_held_out_error_of_a_tune_is_the_sweeps_where_there_are_several() -> None:
    from plateau_bench.answers import CrossValidation
    from plateau_bench.sweep.tune import held_out_error

    def model(cv: CrossValidation | None) -> object:
        return type("M", (), {"cross_validation": cv})()

    assert held_out_error(model(None)) == 0.0  # type: ignore[arg-type]
    assert held_out_error(model(CrossValidation(worst_error=-0.12))) == pytest.approx(0.12)  # type: ignore[arg-type]
    both = CrossValidation(worst_error=0.05, sweep_worst_error=-0.31)
    assert held_out_error(model(both)) == pytest.approx(0.31)  # type: ignore[arg-type]
    assert held_out_error(model(CrossValidation(sweep_worst_error=2.0))) == 0.9  # type: ignore[arg-type]


def test_a_candidate_with_a_cap_is_swept_from_a_quarter_of_it() -> None:
    from plateau_bench.analysis.slo import parse_slo
    from plateau_bench.sweep.plan import ConcurrencyPlan, SweepLimits
    from plateau_bench.sweep.tune import plan_for

    params = [parse_param("parallel=4..64")]
    plan = ConcurrencyPlan()
    assert plan_for(plan, {"parallel": 4}, params, {"parallel": 4}) is plan            # the start climbs from 1
    assert plan_for(plan, {"parallel": 64}, params, {"parallel": 4}).search.start == 16
    assert plan_for(plan, {"parallel": 2}, [parse_param("parallel=2,4")], {"parallel": 4}).search.start == 1
    with_slo = ConcurrencyPlan(limits=SweepLimits(slos=tuple(parse_slo("ttft_p99=2s"))))
    assert plan_for(with_slo, {"parallel": 64}, params, {"parallel": 4}) is with_slo   # the boundary may be low
    grid = ConcurrencyPlan(concurrencies=(1, 8))
    assert plan_for(grid, {"parallel": 64}, params, {"parallel": 4}) is grid
    unknown = [parse_param("gpu_memory_utilization=80,90")]
    assert plan_for(plan, {"gpu_memory_utilization": 90}, unknown, {"gpu_memory_utilization": 80}) is plan


def test_sweeps_that_do_not_calibrate_together_keep_the_last_models_word(tmp_path: Path) -> None:
    import asyncio

    from plateau_bench.errors import ResultsError
    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.tune import run_tune

    truth = {1: 100.0, 2: 190.0, 4: 320.0, 8: 280.0}
    first_model = {1: 100.0, 2: 190.0, 4: 300.0, 8: 350.0}

    async def measure(setting: dict[str, int], run_dir: Path) -> tuple[object, float | None]:
        run_dir.mkdir(parents=True)
        return _fake_sweep(truth[setting["parallel"]]), 0.1

    async def calibrate_on(run_dirs: object) -> object:
        if len(run_dirs) > 1:  # type: ignore[arg-type]
            raise ResultsError("calibration needs levels at two or more decoding batches")

        async def predict(setting: dict[str, int]) -> Forecast:
            return Forecast(first_model[setting["parallel"]])
        return predict

    done = asyncio.run(run_tune([parse_param("parallel=1..8")], {"parallel": 2}, measure, tmp_path,  # type: ignore[arg-type]
                                workload=WorkloadSpec(), candidates=2, calibrate_on=calibrate_on))  # type: ignore[arg-type]
    by_x = {t.setting["parallel"]: t for t in done.trials}
    assert by_x[8].why == by_x[4].why == "candidate"          # the second chosen by the first model
    # x=8 measured 25 % under its prediction, so x=4 (predicted 300) could still beat its 280
    assert by_x[4].predicted_from == [{"parallel": 2}] and done.recommendation == {"parallel": 4}
    assert sum("not calibrated again after parallel=8: calibration needs" in n for n in done.calibration_notes) == 1


def test_a_setting_whose_sweep_the_load_generator_limited_is_said_to_be_a_lower_bound(tmp_path: Path) -> None:
    import asyncio

    from plateau_bench.result import Plateau, ResultFile, Verdict
    from plateau_bench.spec import WorkloadSpec
    from plateau_bench.sweep.tune import run_tune

    stalled = "load generator stalled: its event loop lagged 900 ms (p99) at C=8"

    async def measure(setting: dict[str, int], run_dir: Path) -> tuple[ResultFile, float | None]:
        verdict = Verdict(constraint="load_generator" if setting["x"] == 4 else "admission_cap",
                          headline=stalled if setting["x"] == 4 else "admission cap", confidence="high")
        return ResultFile(kind="sweep", plateau=Plateau(float(setting["x"]) * 100, 1, True), verdict=verdict), 0.1

    done = asyncio.run(run_tune([parse_param("x=1,2,4")], {"x": 2}, measure, tmp_path,
                                workload=WorkloadSpec(), candidates=0, brute_force=True))
    by_setting = {t.setting["x"]: t for t in done.trials}
    assert by_setting[4].load_generator_bound == stalled
    assert by_setting[1].load_generator_bound is None and by_setting[2].load_generator_bound is None
    assert f"x=4: its 400 tok/s is a lower bound, the load generator limited the sweep ({stalled})" \
        in done.calibration_notes
