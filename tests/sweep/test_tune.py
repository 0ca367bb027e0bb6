"""``plateau tune``: the template and the parameter grid, then a whole tune against serve-sim started by
the command itself (a real process, real HTTP), checked against measuring every setting."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import msgspec
import pytest

from plateau_bench.cli import main
from plateau_bench.errors import ConfigError
from plateau_bench.sweep.tune import TuneResult, check_template, parse_param, redact_command, render, settings


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


@pytest.mark.slow   # four serve-sim processes, each swept over HTTP (~2 min)
def test_tune_finds_the_best_cap_of_serve_sim_for_fewer_restarts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    serve = (f"{sys.executable} -m plateau_bench serve-sim --preset tiny --speed 2 --max-num-seqs {{max_num_seqs}} "
             "--port {port}")
    with pytest.raises(SystemExit) as exc:
        main(["tune", "--serve", serve, "--param", "max_num_seqs=8..64", "--concurrency", "1,4,8,16,32,64,128",
              "--min-level-time", "3s", "--max-level-time", "6s", "--range-ratio", "0.5", "--out", str(tmp_path),
              "--brute-force", "--json"])
    assert exc.value.code in (0, None)
    done = msgspec.json.decode(capsys.readouterr().out, type=TuneResult)
    assert done.predicted and done.restarts == 3 and done.brute_force_restarts == 4
    by_why = {t.why: t for t in done.trials}
    assert by_why["start"].setting == {"max_num_seqs": 16}
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
