"""Could the KV cache be what holds a batch that summaries show held? Its size against the batch's tokens.

Level summaries show a decoding batch that stops growing (``diagnosis_table``), but not what holds it: an
admission cap, or a KV cache that fits only that many sequences. Given the cache's size in tokens (the
roofline's estimate: the memory left after the weights, ``Roofline.kv_capacity_tokens``; or the size a server
states), the batch's need settles much of it. Each running sequence holds its prompt and the tokens it has
generated, so at its longest ``prompt + output``; a cache that must hold ``batch x (prompt + output)``:

* at or above ``KV_NEAR`` of its size is (nearly) full at that batch: the cache may hold the batch rather than
  a cap (an engine admits while a prompt's blocks fit and preempts when the cache runs out);
* below ``KV_ROOM`` of it has room for twice the batch at full length: the cache is not what holds it.

In between, it says the share and leaves the question open. The roofline's size is an estimate (it assumes
the share of memory the engine takes, ``mem_fraction``): the verdict says where the figure comes from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from plateau_bench.result import ResultFile
from plateau_bench.roofline import Roofline

KV_NEAR = 0.8    # the batch at full length fills this share of the cache: the cache may hold it
KV_ROOM = 0.5    # below this share the cache holds twice the batch: not the limit

KvReading = Literal["full", "open", "room"]


@dataclass(frozen=True)
class KvRoom:
    """The KV cache's size in tokens (all replicas together) and where the figure comes from."""

    tokens: float
    source: str

    @classmethod
    def of_roofline(cls, rf: Roofline) -> KvRoom:
        d = rf.deployment
        return cls(float(rf.kv_capacity_tokens), f"the roofline's estimate for {d.gpus}x {rf.gpu}, TP={d.tp}, "
                                                  f"{d.dtype.upper()} weights, {d.mem_fraction:.0%} of memory")


@dataclass(frozen=True)
class Lengths:
    """Prompt and output tokens per request as stated for the whole run (None: not stated), for levels that do
    not carry their own (a table of tok/s without request counts)."""

    prompt: float | None = None
    output: float | None = None


def stated_lengths(result: ResultFile) -> Lengths | None:
    """The lengths an import was given (``plateau import --input-len/--output-len``), else None."""
    if result.kind != "import":
        return None
    given = result.spec.prompt_accuracy
    w = result.spec.workload
    prompt = float(w.input_len) if given.get("input_len") == "given" else None
    output = float(w.output_len) if given.get("output_len") == "given" else None
    return Lengths(prompt, output) if prompt is not None or output is not None else None


@dataclass(frozen=True)
class KvWeight:
    """A held batch weighed against the cache: the share of it the batch needs at full length."""

    share: float
    reading: KvReading
    evidence: str


def weigh_kv(batch: float, prompt: float, output: float, room: KvRoom) -> KvWeight | None:
    """The batch of ``batch`` sequences of ``prompt + output`` tokens against ``room`` (None: unknown lengths
    or size)."""
    per_sequence = prompt + output
    if batch <= 0 or per_sequence <= 0 or room.tokens <= 0:
        return None
    need = batch * per_sequence
    share = need / room.tokens
    fits = room.tokens / per_sequence
    text = (f"KV cache: {room.tokens:,.0f} tokens ({room.source}) hold ~{fits:,.0f} sequences of "
            f"~{prompt:,.0f} + {output:,.0f} tokens at full length; a batch of ~{batch:,.1f} needs "
            f"~{need:,.0f} ({share:.0%} of it)")
    reading: KvReading = "full" if share >= KV_NEAR else "room" if share < KV_ROOM else "open"
    return KvWeight(share, reading, text)
