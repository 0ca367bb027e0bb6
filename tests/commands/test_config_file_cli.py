"""--config FILE and --print-config: a benchmark's flags in a YAML file, flags over the file, the same
checks, and every result directory keeping the file that measures it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support.loading import plateau


def keys(text: str) -> dict[str, object]:
    loaded = yaml.safe_load(text)
    assert isinstance(loaded, dict)
    return loaded


def test_flags_override_the_file_and_credentials_are_never_printed(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text("concurrency: [1, 4]\nmode: burst\ninput-len: 64\noutput_len: 16\ndrain: false\n"
                      "header: ['X-Team: a', 'Authorization: Bearer zz-secret']\n")
    code, out, err = plateau(["sweep", "--config", str(config), "--print-config", "-c", "1,2,8", "--api-key",
                              "sk-secret", "--url", "http://user:pw-secret@127.0.0.1:9"], capsys)
    assert code == 0, err
    assert keys(out) == {"url": "http://127.0.0.1:9", "header": ["X-Team: a"], "concurrency": "1,2,8",
                         "mode": "burst", "drain": False, "input-len": "64", "output-len": "16"}
    assert "zz-secret" not in out and "sk-secret" not in out and "pw-secret" not in out
    assert "# left out: api-key: a credential, never written" in out
    assert "# left out: url: its user and password, never written" in out


@pytest.mark.parametrize(("text", "fragment"), [
    ("input-lenn: 5\n", "unknown key 'input-lenn' (did you mean input-len?)"),
    ("max-concurrency: lots\n", "max-concurrency: "),
    ("concurrency: [1, 2\n", "not YAML (line 2)"),
    ("- 1\n- 2\n", "expected flags and their values"),
    ("config: other.yaml\n", "config cannot be set in a config file"),
    ("seed: {a: 1}\n", "seed: expected a value or a list"),
])
def test_a_bad_file_is_one_line_naming_the_file_and_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             text: str, fragment: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    code, out, err = plateau(["sweep", "--config", str(config), "--print-config"], capsys)
    assert code == 2 and not out
    assert err.startswith(f"plateau: error: config file {config}") and fragment in err, err
    assert len(err.strip().split("\n")) == 1 and "Traceback" not in err


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plateau(["run", "--config", str(tmp_path / "none.yaml")], capsys)
    assert code == 2 and err.strip() == f"plateau: error: cannot read config file {tmp_path / 'none.yaml'}: " \
                                        "No such file or directory"


def test_the_plateau_checks_apply_to_values_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not only the flags' types: the commands' own checks see a file's values as they see flags."""
    config = tmp_path / "sim.yaml"
    config.write_text("concurrency: 0\nmode: burst\n")
    code, _, err = plateau(["sim", "--config", str(config)], capsys)
    assert code == 2 and err.startswith("plateau: error:") and "--concurrency" in err, err


def test_a_result_directory_keeps_the_config_that_measures_it_again(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "r1", tmp_path / "r2"
    code, _, err = plateau(["sim", "-c", "1,4", "--mode", "burst", "--output-len", "32", "--max-num-seqs", "2",
                            "--out", str(first)], capsys)
    assert code == 0, err
    saved = (first / "config.yaml").read_text()
    assert keys(saved) == {"mode": "burst", "concurrency": "1,4", "output-len": "32", "max-num-seqs": 2}
    assert "out" not in keys(saved)
    code, _, err = plateau(["sim", "--config", str(first / "config.yaml"), "--out", str(second)], capsys)
    assert code == 0, err
    spec = [json.loads((d / "result.json").read_text())["spec"] for d in (first, second)]
    assert spec[0] == spec[1]
    assert [lv["concurrency"] for lv in json.loads((second / "result.json").read_text())["levels"]] == [1, 4]


def test_a_refused_directory_keeps_its_own_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Results are never replaced, and neither is the config that goes with them."""
    out = tmp_path / "r"
    assert plateau(["sim", "-c", "2", "--mode", "burst", "--out", str(out)], capsys)[0] == 0
    before = (out / "config.yaml").read_text()
    code, _, err = plateau(["sim", "-c", "8", "--mode", "burst", "--out", str(out)], capsys)
    assert code == 2 and "plateau: error:" in err
    assert (out / "config.yaml").read_text() == before


def test_print_config_measures_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["sim", "-c", "4", "--out", str(tmp_path / "r"), "--print-config"], capsys)
    assert code == 0 and keys(out) == {"concurrency": "4", "out": str(tmp_path / "r")}
    assert not (tmp_path / "r").exists()


@pytest.mark.slow   # two sweeps of the embedded engine in real time (~10 s)
def test_a_sweeps_config_sends_new_prompt_text_unless_the_salt_was_given(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    first, second, third = tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"
    argv = ["sweep", "-c", "1,2", "--mode", "burst", "--output-len", "8", "--sim-speed", "8", "--quiet"]
    assert plateau([*argv, "--out", str(first)], capsys)[0] == 0
    saved = keys((first / "config.yaml").read_text())
    assert saved == {"sim-speed": 8.0, "concurrency": "1,2", "mode": "burst", "output-len": "8", "quiet": True}
    assert plateau(["sweep", "--config", str(first / "config.yaml"), "--out", str(second)], capsys)[0] == 0
    specs = [json.loads((d / "result.json").read_text())["spec"] for d in (first, second)]
    salts = [s["workload"].pop("prompt_salt") for s in specs]
    for s in specs:   # the embedded engine listens on a new port each time
        assert s["target"].pop("url").startswith("http://127.0.0.1:")
    assert specs[0] == specs[1] and salts[0] != salts[1]   # the same benchmark, new prompt text
    assert plateau([*argv, "--prompt-salt", str(salts[0]), "--out", str(third)], capsys)[0] == 0
    assert keys((third / "config.yaml").read_text())["prompt-salt"] == salts[0]   # asked for: kept


def test_a_header_named_secret_on_the_command_line_is_not_written(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plateau(["sweep", "--print-config", "--header", "X-Tenant:hunter2", "--header", "X-Team:a",
                            "--secret-header", "X-Tenant"], capsys)
    assert code == 0 and "hunter2" not in out and keys(out)["header"] == ["X-Team:a"]
