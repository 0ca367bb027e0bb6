"""``--roofline`` on sweep, diagnose and report: the verdict says where the plateau sits against the
hardware, the what-if stays under the ceiling, and bad flags are one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau_bench.roofline import ceiling_at_batch, read_roofline

from support.loading import Cli, plateau

DATA = Path(__file__).parents[2] / "examples" / "models"
HARDWARE = ["--gpu", "rtx-pro-6000", "--gpus", "8", "--tp", "8", "--ep", "8", "--dtype", "fp8"]
ROOFLINE = ["--roofline", str(DATA / "gqa_moe_230b.json"), *HARDWARE]


@pytest.fixture(scope="module")
def seed_a(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run A's shape on the twin, in virtual time: capped at 256 running requests."""
    out = tmp_path_factory.mktemp("seed-a") / "run"
    done = cli("sim", "--preset", "seed-a-tp8ep", "--input-len", "128", "--output-len", "512", "--concurrency",
               "1,64,128,256,512,1024", "--out", str(out))
    assert done.exit_code == 0, done.output
    return out


def test_diagnose_places_the_plateau_on_the_roofline(seed_a: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plateau(["diagnose", str(seed_a), "--json", *ROOFLINE], capsys)
    assert code == 0, err
    verdict = json.loads(out)["verdict"]
    assert verdict["constraint"] == "admission_cap"
    placed = verdict["roofline"]
    assert 240 <= placed["batch"] <= 256
    assert 0.25 < placed["share"] < 0.33          # Run A measured 0.28 of the ceiling at batch 256
    assert placed["binding"] == "weights"
    assert placed["share"] == pytest.approx(placed["levels"][-1]["output_throughput"] / placed["ceiling_tok_s"],
                                            rel=0.02)
    # The cap what-if is compared with the ceiling at the batch it assumes, never above it.
    assert verdict["predicted_throughput_doubled_cap"] <= placed["what_if_ceiling_tok_s"]
    assert any("the roofline allows up to" in line for line in verdict["what_if"])


def test_diagnose_prints_the_roofline_line(seed_a: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["diagnose", str(seed_a), *ROOFLINE], capsys)
    assert code == 0
    assert "Roofline:" in out and "of the roofline for this batch" in out
    code, out, _ = plateau(["diagnose", str(seed_a)], capsys)
    assert code == 0 and "Roofline:" not in out


def test_a_saved_roofline_gives_the_same_placement(seed_a: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["roofline", "--model", str(DATA / "gqa_moe_230b.json"), *HARDWARE, "--json"], capsys)
    assert code == 0
    saved = tmp_path / "roofline.json"
    saved.write_text(out)
    rf = read_roofline(saved)
    code, out, _ = plateau(["diagnose", str(seed_a), "--json", "--roofline", str(saved)], capsys)
    assert code == 0
    placed = json.loads(out)["verdict"]["roofline"]
    assert placed["ceiling_tok_s"] == pytest.approx(ceiling_at_batch(rf, placed["batch"],
                                                                     placed["context_tokens"]).tok_s)
    code, _, err = plateau(["diagnose", str(seed_a), "--roofline", str(saved), "--gpu", "h100-sxm"], capsys)
    assert code == 2 and "names its hardware: drop --gpu" in err and "Traceback" not in err


@pytest.mark.slow   # draws and inlines five figures
def test_report_draws_the_roofline(seed_a: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "report.html"
    code, _, err = plateau(["report", str(seed_a), "--html", str(html), "--png", str(tmp_path / "png"), *ROOFLINE],
                           capsys)
    assert code == 0, err
    text = html.read_text()
    assert "Against the hardware" in text and "of the roofline for this batch" in text
    assert (tmp_path / "png" / "roofline.png").stat().st_size > 1000
    code, _, _ = plateau(["report", str(seed_a), "--html", str(tmp_path / "plain.html")], capsys)
    assert code == 0 and "Against the hardware" not in (tmp_path / "plain.html").read_text()


@pytest.mark.parametrize(("args", "fragment"), [
    (["--gpu", "rtx-pro-6000"], "--gpu describes the hardware for --roofline: give --roofline CONFIG too"),
    (["--roofline", str(DATA / "gqa_moe_230b.json")], "give one of --gpu NAME"),
    (["--roofline", str(DATA / "gqa_moe_230b.json"), "--gpu", "h42"], "h42"),
    (["--roofline", "/nonexistent/config.json", "--gpu", "h100-sxm"], "/nonexistent/config.json"),
    (["--roofline", str(DATA / "gqa_moe_230b.json"), *HARDWARE[:-2], "--dtype", "fp3"], "unknown dtype"),
])
def test_bad_roofline_flags_are_one_line(seed_a: Path, args: list[str], fragment: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["diagnose", str(seed_a), *args], capsys)
    assert code == 2
    assert fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_sweep_takes_the_roofline_before_any_load(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["sweep", "--gpu", "h100-sxm", "--quiet"], capsys)
    assert code == 2 and "give --roofline CONFIG too" in err


@pytest.mark.slow   # a real-time sweep over HTTP against the embedded twin
def test_sweep_saves_the_placement_in_its_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["sweep", "--concurrency", "1,4,16", "--max-level-time", "3s", "--min-level-time", "1s",
                            "--sim-speed", "20", "--quiet", "--out", str(tmp_path / "s"),
                            "--roofline", str(DATA / "dense_gqa_llama.json"), "--gpu", "h100-sxm"], capsys)
    assert code == 0, err
    saved = json.loads((tmp_path / "s" / "result.json").read_text())["verdict"]["roofline"]
    assert [lv["label"] for lv in saved["levels"]] == ["C=1", "C=4", "C=16"]
    # The tiny twin is far faster than an 8B model on one H100: the verdict says the roofline is not this
    # deployment instead of a share above 100 %.
    assert saved["share"] > 1 and "does not describe this deployment" in saved["text"]
