"""Flags of the commands that answer from a calibrated model or saved results (``predict``, ``plan``,
``compare``, ``import``), declared once: the model, the lengths, the latency targets, a GPU's cost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plateau_bench.answers import CalibratedModel, Settings
from plateau_bench.commands.engine_flags import EngineSettings
from plateau_bench.commands.groups import OptionGroup
from plateau_bench.errors import ConfigError
from plateau_bench.spec import WorkloadSpec

ModelOrRun = Annotated[Path, typer.Argument(help="A model from plateau calibrate --out, or a result directory "
                                            "(calibrated on the spot).")]
Slo = Annotated[str | None, typer.Option("--slo", help="Latency targets, e.g. ttft_p99=2s,tpot_p99=100ms: predict "
                                         "finds the largest level meeting them, plan the fewest replicas.")]
GpuCost = Annotated[float | None, typer.Option("--gpu-cost", help="Cost of one GPU per hour (any currency).")]


class GivenLengths(OptionGroup, frozen=True, kw_only=True):
    """Prompt and output tokens per request as plain counts, in place of what the data say: the calibration's
    mean lengths (``predict``, ``plan``) or the imported source's (``import``); None keeps those."""

    input_len: Annotated[int | None, typer.Option("--input-len", help="Prompt tokens per request (default: the "
                                                  "calibration's for predict and plan, the source's for "
                                                  "import).")] = None
    output_len: Annotated[int | None, typer.Option("--output-len", help="Output tokens per request (default: the "
                                                   "calibration's for predict and plan, the source's for "
                                                   "import).")] = None

    def check(self) -> None:
        for flag, value in (("--input-len", self.input_len), ("--output-len", self.output_len)):
            if value is not None and value < 1:
                raise ConfigError(f"{flag} must be >= 1 (got {value})")

    def workload(self, model: CalibratedModel) -> WorkloadSpec:
        """The validated workload: these lengths, or the mean ones the model was calibrated at."""
        self.check()
        workload = WorkloadSpec(
            input_len=self.input_len if self.input_len is not None else max(1, round(model.input_len)),
            output_len=self.output_len if self.output_len is not None else max(1, round(model.output_len)))
        workload.validate()
        return workload


AS_GIVEN = GivenLengths()


def settings(engine: EngineSettings) -> Settings:
    """The scheduler's limits to predict at (None: the calibrated ones)."""
    engine.check()
    return Settings(max_num_seqs=engine.max_num_seqs, kv_tokens=engine.kv_tokens,
                    max_num_batched_tokens=engine.max_num_batched_tokens, reserve_kv=engine.reserve_kv)
