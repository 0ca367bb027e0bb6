"""``plateau tune`` against llama.cpp's server, which the tune starts and stops itself, once per setting.

The grid is ``--parallel 2..16`` (2, 4, 8, 16), started at 4, checked by the brute-force grid. What is
held: the tune spends fewer restarts than the grid and recommends a setting within 10 % of the grid's
best measured throughput, and every prediction names the sweeps it was calibrated on (those measured
before it). What is not: the calibration's accuracy past the caps it saw. llama.cpp's step time on a CPU is
not the twin's fixed cost plus a cost per sequence and per slot (the calibration guide says why), so the
tune's recalibration after each measurement is what finds the best setting here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import pytest

from plateau_bench.answers import Prediction
from plateau_bench.sweep.tune import TuneResult

from support import real_servers

if TYPE_CHECKING:
    from conftest import PlateauCli

pytestmark = pytest.mark.real_server
CTX_TOKENS = 8192   # llama-server -c: the KV cache, shared by the slots


def _serve_template() -> str:
    binary, gguf = real_servers.llamacpp_binary(), real_servers.gguf_model("mid")
    real_servers.require_provisioned("llamacpp", [binary, gguf])
    # The test process keeps the load generator's core; each server the tune starts goes to the others.
    cores = sorted(real_servers.server_cpus())
    pin = f"taskset -c {','.join(map(str, cores))} " if shutil.which("taskset") and hasattr(os, "sched_setaffinity") \
        else ""
    return (f"{pin}{binary} -m {gguf} -a {real_servers.SERVED_MODEL_NAME} --host 127.0.0.1 --port {{port}} "
            f"--parallel {{parallel}} -c {CTX_TOKENS} -t 1 -tb 1 --metrics --slots --no-webui")


@pytest.mark.timeout(1500)   # four llama.cpp servers, each swept (~4 min on two cores)
def test_tune_recommends_the_brute_force_best_for_fewer_restarts(tmp_path: Path, plateau_cli: PlateauCli) -> None:
    code, output = plateau_cli.invoke(
        "tune", "--serve", _serve_template(), "--param", "parallel=2..16", "--start", "parallel=4",
        "--input-len", "32", "--output-len", "64", "--min-level-time", "2s", "--max-level-time", "8s",
        "--max-concurrency", "32", "--brute-force", "--quiet", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    done = msgspec.json.decode((tmp_path / "tune.json").read_bytes(), type=TuneResult)
    table = "\n".join(f"{t.setting} {t.why}: predicted {t.predicted_tok_s} from {t.predicted_from}, measured "
                      f"{t.measured_tok_s}" for t in done.trials)
    assert done.predicted and done.brute_force_restarts == 4 and done.restarts < 4, table
    assert all(t.measured_tok_s for t in done.trials), table
    best = max(t.measured_tok_s or 0.0 for t in done.trials)
    assert done.recommended_tok_s is not None and done.recommended_tok_s >= 0.9 * best, table
    # Each round's prediction came from the sweeps measured before it: the start's own, then one more
    # per candidate measured.
    tuned = [t for t in done.trials if t.why in ("start", "candidate")]
    assert [len(t.predicted_from) for t in sorted(tuned, key=lambda t: len(t.predicted_from))] == \
        [1, *range(1, len(tuned))], table
    assert all(t.predicted_from[0] == {"parallel": 4} for t in done.trials), table
    assert (tmp_path / "run-parallel-16.server.log").stat().st_size > 0
    _two_caps_predict_a_third(plateau_cli, tmp_path, done)


def _two_caps_predict_a_third(cli: PlateauCli, tune_dir: Path, done: TuneResult) -> None:
    """The grid's own sweeps at ``--parallel 2`` and ``4`` calibrate a twin (two caps: the per-slot cost can be
    fitted) that predicts ``--parallel 8``, measured by the same grid. Held: the calibration and prediction run
    on real sweeps, and the prediction says it reaches past the calibrated caps, what carries it there and
    that llama.cpp's step may not follow (the note the engine named in the sweeps brings). Not
    held: its accuracy. llama.cpp keeps one KV stream per slot, and a step's attention spans every stream
    between the lowest and highest slot in its batch, so under load each token costs about the same whatever
    the number decoding, and the step grows with ``--parallel`` by amounts two caps do not foretell (the
    calibration guide says why). What the prediction read is printed. The KV cache is given as a user
    gives it (the server's ``-c``): llama.cpp's /metrics does not state it."""
    model = tune_dir / "model-2-4.json"
    code, output = cli.invoke("calibrate", str(tune_dir / "run-parallel-2"), str(tune_dir / "run-parallel-4"),
                              "--out", str(model))
    assert code == 0, output
    code, output = cli.invoke("predict", str(model), "--max-num-seqs", "8", "--kv-tokens", str(CTX_TOKENS), "--json")
    assert code == 0, output
    predicted = msgspec.json.decode(output, type=Prediction)
    assert predicted.plateau is not None, output
    reach = [note for note in predicted.notes if note.startswith("extrapolates: a cap of 8 against 2-4 calibrated")]
    assert reach and "llama.cpp keeps a KV stream per slot" in reach[0], predicted.notes
    measured = next(t.measured_tok_s for t in done.trials if t.setting == {"parallel": 8})
    assert measured, done.trials
    print(f"\nllama.cpp parallel 2+4 -> 8: predicted {predicted.plateau.throughput:,.0f} tok/s (held-out band "
          f"{predicted.held_out_low} to {predicted.held_out_high}), measured {measured:,.0f}: "
          f"{predicted.plateau.throughput / measured - 1:+.1%}\n{predicted.model}")
