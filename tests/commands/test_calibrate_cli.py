"""``plateau calibrate`` / ``plateau predict`` / ``diagnose --calibrated``: calibrate on one setting of the
twin, predict another, and check the prediction against the twin run at that setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.loading import Cli, plateau

GRID = "1,4,8,16,32,64"


def sim(cli: Cli, out: Path, *extra: str) -> Path:
    done = cli("sim", "--preset", "tiny", "--mode", "steady", "--duration", "120s", "--range-ratio", "0.5",
               "--concurrency", GRID, "--out", str(out), *extra)
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture(scope="module")
def measured(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sim(cli, tmp_path_factory.mktemp("cal") / "tiny")


def test_calibrate_prints_and_saves_the_model(measured: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["calibrate", str(measured), "--out", str(tmp_path / "model.json")], capsys)
    assert code == 0, err
    assert "Step time t = t0" in out and "Fit per level" in out
    assert "cap 32 running requests (diagnosis)" in out
    assert "not identified" in out          # one prompt length: c folded into a, and said
    model = json.loads((tmp_path / "model.json").read_text())
    assert model["kind"] == "plateau-calibrated-model" and model["engine"]["max_num_seqs"] == 32
    assert {p["name"] for p in model["parameters"]} == {"t0", "a", "b", "c", "s"}
    slot = next(p for p in model["parameters"] if p["name"] == "s")    # one cap: s fixed at 0, and said
    assert slot["value"] == 0 and slot["source"] == "fixed" and slot["note"].startswith("one admission cap")
    assert "s*slots" in out and "ms per slot, per step" in out
    assert all(abs(lv["fitted_ms"] / lv["measured_ms"] - 1) < 0.1 for lv in model["levels"])


@pytest.mark.slow   # three twin sweeps for the prediction and its band, and the twin at the new cap
def test_predict_a_doubled_cap_then_check_it_on_the_twin(cli: Cli, measured: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Client alone the calibration knows only a lower bound on the KV cache: give the server's figure (its
    # start-up log states it), as a user would.
    code, out, err = plateau(["predict", str(measured), "--max-num-seqs", "64", "--kv-tokens", "131072",
                              "--concurrency", "16,32,64,128,256", "--input-len", "128", "--output-len", "128",
                              "--json"], capsys)
    assert code == 0, err
    predicted = json.loads(out)
    truth_dir = sim(cli, tmp_path / "cap64", "--max-num-seqs", "64", "--concurrency", "16,32,64,128,256")
    truth = json.loads((truth_dir / "result.json").read_text())
    measured_best = max(lv["output_throughput"] for lv in truth["levels"])
    predicted_best = max(lv["output_throughput"] for lv in predicted["levels"])
    assert predicted["engine"]["max_num_seqs"] == 64
    assert predicted_best == pytest.approx(measured_best, rel=0.10)
    assert predicted["plateau_low"] <= predicted["plateau"]["throughput"] <= predicted["plateau_high"]
    # The empirical band (the worst held-out level) holds the plateau; the twin fits itself, so it is narrow.
    assert predicted["held_out_low"] <= predicted["plateau"]["throughput"] <= predicted["held_out_high"]
    assert predicted["held_out_high"] < 1.05 * predicted["held_out_low"]
    # Calibrated at a cap of 32, asked for 64: the decoding batch doubles, and the prediction says so.
    (reach,) = [n for n in predicted["notes"] if n.startswith("extrapolates: decoding batches")]
    assert "2.0x the largest calibrated (32)" in reach
    assert not any("a context of" in n for n in predicted["notes"])   # same lengths as calibrated


@pytest.mark.slow   # a twin sweep of Run A's engine, then an adaptive prediction and its band (~15 s)
def test_the_band_holds_an_adaptive_predictions_plateau(cli: Cli, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An adaptive sweep's windows read a level a few per cent off a fixed grid's, more than the standard
    errors' band is wide: the band is taken on one grid and put around the prediction, so it holds it."""
    done = cli("sim", "--preset", "seed-a-tp8ep", "--input-len", "128", "--output-len", "512", "--concurrency",
               "1,64,128,256,512", "--out", str(tmp_path / "a"))
    assert done.exit_code == 0, done.output
    code, out, err = plateau(["predict", str(tmp_path / "a"), "--max-num-seqs", "512", "--json"], capsys)
    assert code == 0, err
    predicted = json.loads(out)
    assert predicted["plateau_low"] <= predicted["plateau"]["throughput"] <= predicted["plateau_high"]


@pytest.mark.slow   # an adaptive twin sweep and its band
def test_predict_prints_the_table_and_the_slo_capacity(measured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["predict", str(measured), "--concurrency", "8,16,32,64", "--slo", "tpot_p99=6ms"], capsys)
    assert code == 0, err
    assert "Predicted (cap 32" in out and "Predicted plateau" in out and "Within the SLO:" in out
    assert "KV cache is a lower bound" in out


@pytest.mark.slow   # twin sweeps at twice and four times the cap
def test_diagnose_answers_the_what_if_with_the_calibrated_twin(measured: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["diagnose", str(measured), "--json", "--calibrated", str(measured)], capsys)
    assert code == 0, err
    verdict = json.loads(out)["verdict"]
    assert verdict["constraint"] == "admission_cap"
    assert verdict["what_if_model"].startswith("calibrated twin")
    assert verdict["what_if"][0].startswith("the calibrated twin with the cap at 64")
    code, out, _ = plateau(["diagnose", str(measured), "--json"], capsys)
    assert json.loads(out)["verdict"]["what_if_model"].startswith("TPOT slope")


@pytest.mark.parametrize(("argv", "fragment"), [
    (["calibrate", "/nonexistent/run"], "/nonexistent/run"),
    (["predict", "/nonexistent/model.json"], "/nonexistent/model.json"),
])
def test_bad_input_is_one_line(argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(argv, capsys)
    assert code == 2 and fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_predict_refuses_an_impossible_setting(measured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["predict", str(measured), "--kv-tokens", "4"], capsys)
    assert code == 2 and "--kv-tokens" in err and "Traceback" not in err


def test_predict_with_admission_by_the_whole_request(measured: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--reserve-kv on predict: a 4,096-token cache holds 16 requests of 128 + 128 at full length, so at most 16
    decode at once, where admission as the cache allows runs more (and preempts); the notes say which."""
    args = ["predict", str(measured), "--kv-tokens", "4096", "--concurrency", "64", "--input-len", "128",
            "--output-len", "128", "--json"]
    runs = {}
    for extra in ([], ["--reserve-kv"]):
        code, out, err = plateau([*args, *extra], capsys)
        assert code == 0, err
        runs[bool(extra)] = json.loads(out)
    (reserved,) = runs[True]["levels"]
    (on_demand,) = runs[False]["levels"]
    assert reserved["decoding"] <= 16.0 < on_demand["decoding"]
    assert any(n.startswith("admission by the whole request (--reserve-kv)") for n in runs[True]["notes"])
    assert not any("--reserve-kv" in n for n in runs[False]["notes"])
    code, out, err = plateau(["plan", str(measured), "--rate", "20", "--slo", "ttft_p99=2s", "--kv-tokens", "4096",
                              "--reserve-kv", "--json"], capsys)
    assert code == 0, err
    assert all(p["model"].endswith("; admission by the whole request (--reserve-kv)") for p in json.loads(out))
