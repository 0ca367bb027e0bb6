"""How a model is laid out over GPUs, and the storage size of each dtype.

Layout (the vLLM / SGLang vocabulary): ``gpus`` GPUs hold ``dp = gpus / tp`` replicas of the
attention, each split ``tp`` ways (tensor parallelism: heads, MLP columns and the vocabulary are
sharded, two all-reduces of the hidden state per layer). Experts:

* ``ep == 1``: each replica's experts are tensor-split like the MLP.
* ``1 < ep <= tp``: each TP group splits its experts over ranks; tokens are already on every rank
  of the group, so the MoE output is still combined by the all-reduce (vLLM's expert parallelism
  with one replica).
* ``ep > tp``: the experts are spread over ``ep`` ranks of several attention replicas (DP
  attention); tokens travel to their experts and back by all-to-all (dispatch and combine).

``moe_ranks = max(tp, ep)`` ranks share one copy of the experts; the tokens routed through that
copy in a step are the batch's share ``batch * moe_ranks / gpus``.

Storage per element: FP4 is NVFP4 (4-bit values plus one FP8 scale per 16: 0.5625 bytes), FP8 one
byte (block scales are under 0.01 %), BF16/FP16 two. ``--dtype`` is the transformer blocks' linear
weights; embeddings and the output head stay in 16 bits, as the FP8 and FP4 checkpoints ship them.
"""

from __future__ import annotations

from typing import get_args

import msgspec

from plateau_bench.errors import ConfigError
from plateau_bench.roofline.model import Dtype, ModelShape

DTYPE_BYTES: dict[Dtype, float] = {"fp4": 0.5625, "fp8": 1.0, "bf16": 2.0, "fp16": 2.0}
DTYPES: tuple[Dtype, ...] = get_args(Dtype)
HEAD_BYTES = 2.0          # embeddings and lm_head
ACTIVATION_BYTES = 2.0    # hidden states exchanged by all-reduce and all-to-all (BF16)


def parse_dtype(text: str, flag: str) -> Dtype:
    for d in DTYPES:
        if text.strip().lower() == d:
            return d
    raise ConfigError(f"{flag}: unknown dtype {text!r}; choose one of {', '.join(DTYPES)}")


class Deployment(msgspec.Struct, frozen=True, kw_only=True):
    gpus: int
    tp: int
    ep: int = 1
    dtype: Dtype = "bf16"
    kv_dtype: Dtype = "bf16"
    input_len: int = 128
    output_len: int = 128
    step_overhead_s: float = 0.5e-3
    mem_fraction: float = 0.9

    @property
    def dp(self) -> int:
        return self.gpus // self.tp

    @property
    def moe_ranks(self) -> int:
        return max(self.tp, self.ep)

    @property
    def alltoall(self) -> bool:
        """Experts spread beyond one TP group: tokens reach them by all-to-all."""
        return self.ep > self.tp

    @property
    def decode_context(self) -> float:
        """Mean context a decoding sequence attends to: the prompt plus half the answer."""
        return self.input_len + self.output_len / 2.0

    def check(self, model: ModelShape) -> None:
        """ConfigError for a layout that cannot run this model."""
        for flag, value in (("--gpus", self.gpus), ("--tp", self.tp), ("--ep", self.ep),
                            ("--input-len", self.input_len), ("--output-len", self.output_len)):
            if value < 1:
                raise ConfigError(f"{flag} must be >= 1 (got {value})")
        if self.gpus % self.tp:
            raise ConfigError(f"--gpus ({self.gpus}) must be a multiple of --tp ({self.tp})")
        if self.gpus % self.ep:
            raise ConfigError(f"--gpus ({self.gpus}) must be a multiple of --ep ({self.ep})")
        if self.ep % self.tp and self.tp % self.ep:
            raise ConfigError(f"--ep ({self.ep}) and --tp ({self.tp}): one must divide the other")
        if self.ep > 1 and not model.is_moe:
            raise ConfigError(f"--ep {self.ep}: {model.name} has no experts")
        if self.ep > max(model.experts, 1):
            raise ConfigError(f"--ep ({self.ep}) exceeds the model's {model.experts} experts")
        if not 0 < self.mem_fraction <= 1:
            raise ConfigError(f"--mem-fraction must be in (0, 1] (got {self.mem_fraction})")
        if not 0 <= self.step_overhead_s < 1:
            raise ConfigError(f"--step-overhead-ms must be >= 0 and under 1000 (got "
                              f"{self.step_overhead_s * 1e3:g} ms)")
