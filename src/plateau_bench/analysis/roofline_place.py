"""Where a plateau sits against the hardware's ceiling, and a what-if kept under it.

The roofline (``plateau_bench.roofline``) gives, for a decoding batch, the fastest a decode step
could run on the hardware and the resource that would bind. A measured level decodes some batch
(the server's running gauge when /metrics were read, else the client's count of requests past
their first token, else output tok/s x TPOT by Little's law) at a measured throughput; its share of
the ceiling at that batch says how much the engine leaves on the table. A plateau at 31 % of the
ceiling is not a hardware limit; one at 90 % is.

The ceiling is evaluated at the measured context (the level's mean prompt plus half its output),
not at the lengths the roofline was built with, so one saved roofline serves several workloads.
The cap what-if (``Verdict.predicted_throughput_doubled_cap``) is lowered to the ceiling at the
batch it assumes when it predicts more: no prediction exceeds what the hardware could do.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from plateau_bench.analysis.diagnosis_common import mean_lengths
from plateau_bench.errors import ResultsError
from plateau_bench.result import LevelResult, Plateau, RooflineLevel, RooflinePlacement, Verdict
from plateau_bench.roofline import Calibration, Roofline, ceiling_at_batch, fit_overhead_and_efficiency

BINDS = {"weights": "reading the weights from memory", "kv": "reading the KV cache from memory",
         "compute": "compute", "interconnect": "the interconnect", "overhead": "the fixed per-step overhead"}
NEAR_CEILING = 0.8     # a plateau above this share of the ceiling is close to a hardware limit
CURVE_POINTS = 48


def decode_batch(lv: LevelResult) -> tuple[float, str] | None:
    """The level's mean decoding batch and where it comes from (server | client | little)."""
    if lv.telemetry.running_mean:
        return lv.telemetry.running_mean, "server"
    if lv.decoding_concurrency > 0:
        return lv.decoding_concurrency, "client"
    if lv.tpot_ms.mean and lv.output_throughput > 0:
        return lv.output_throughput * lv.tpot_ms.mean / 1e3, "little"
    return None


def _context(lv: LevelResult, rf: Roofline) -> float:
    prompt, output = mean_lengths(lv)
    return prompt + output / 2.0 if prompt or output else rf.deployment.decode_context


def _hardware(rf: Roofline) -> str:
    d = rf.deployment
    layout = f"TP={d.tp}" + (f", EP={d.ep}" if d.ep > 1 else "")
    return f"{d.gpus}x {rf.gpu}, {layout}, {d.dtype.upper()} weights"


def _measured(levels: Sequence[LevelResult], rf: Roofline) -> list[tuple[LevelResult, RooflineLevel, str]]:
    out = []
    for lv in levels:
        found = decode_batch(lv)
        if lv.level_failed or lv.completed == 0 or lv.output_throughput <= 0 or found is None:
            continue
        batch, source = found
        ceiling = ceiling_at_batch(rf, max(batch, 1e-3), _context(lv, rf)).tok_s
        out.append((lv, RooflineLevel(label=lv.label, batch=batch, output_throughput=lv.output_throughput,
                                      ceiling_tok_s=ceiling, share=lv.output_throughput / ceiling), source))
    return out


def _curve(rf: Roofline, top: float, context: float) -> list[tuple[float, float]]:
    """The ceiling from batch 1 to four times the largest measured batch, evenly in log space."""
    hi = max(4.0 * top, 8.0)
    steps = [hi ** (i / (CURVE_POINTS - 1)) for i in range(CURVE_POINTS)]
    return [(b, ceiling_at_batch(rf, b, context).tok_s) for b in steps]


def _sentence(best: RooflineLevel, binding: str, hardware: str, kv_sequences: int, saturated: bool) -> str:
    if best.share > 1.0:
        return (f"{best.output_throughput:,.0f} tok/s at a decoding batch of {best.batch:,.0f} is ABOVE the "
                f"roofline for this batch ({best.ceiling_tok_s:,.0f} tok/s on {hardware}, {best.share:.1f}x): "
                "no engine beats the hardware, so the roofline does not describe this deployment (check the "
                "model config, the GPU, --gpus/--tp and the weight dtype); its what-if bound is not applied")
    if not saturated:
        where = "headroom the load has not reached yet"
    elif best.share >= NEAR_CEILING:
        where = "close to the hardware's limit"
    else:
        where = "well below what the hardware allows: the limit is in the engine or its settings"
    return (f"{best.output_throughput:,.0f} tok/s at a decoding batch of {best.batch:,.0f} is {best.share:.0%} of "
            f"the roofline for this batch ({best.ceiling_tok_s:,.0f} tok/s on {hardware}), {where}; the binding "
            f"resource there would be {BINDS.get(binding, binding)}; the memory left after the weights holds "
            f"~{kv_sequences:,} such sequences")


def place_on_roofline(levels: Sequence[LevelResult], plateau: Plateau | None, verdict: Verdict,
                      rf: Roofline) -> Verdict:
    """The verdict with ``roofline`` set (and its what-if kept under the ceiling); unchanged when no
    level shows a decoding batch."""
    measured = _measured(levels, rf)
    if not measured:
        return verdict
    on_plateau = [m for m in measured if plateau is None or (m[0].concurrency or 0) >= plateau.concurrency]
    lv, best, source = max(on_plateau or measured, key=lambda m: m[1].output_throughput)
    context = _context(lv, rf)
    binding = ceiling_at_batch(rf, max(best.batch, 1e-3), context).binding
    kv_sequences = int(rf.kv_capacity_tokens // max(context + mean_lengths(lv)[1] / 2.0, 1.0))
    hardware = _hardware(rf)
    placement = RooflinePlacement(
        model=rf.model.name, hardware=hardware, batch=best.batch, batch_source=source, context_tokens=context,
        ceiling_tok_s=best.ceiling_tok_s, share=best.share, binding=binding,
        kv_capacity_tokens=rf.kv_capacity_tokens, kv_sequences=kv_sequences,
        text=_sentence(best, binding, hardware, kv_sequences, verdict.constraint != "not_saturated"),
        levels=[m[1] for m in measured],
        curve=_curve(rf, max(m[1].batch for m in measured), context))
    return _cap_what_if(verdict, placement, rf, context)


def _cap_what_if(verdict: Verdict, placement: RooflinePlacement, rf: Roofline, context: float) -> Verdict:
    predicted, batch = verdict.predicted_throughput_doubled_cap, verdict.what_if_batch
    if predicted is None or batch is None or batch <= 0 or placement.share > 1.0:
        return msgspec.structs.replace(verdict, roofline=placement)
    ceiling = ceiling_at_batch(rf, batch, context).tok_s
    placement = msgspec.structs.replace(placement, what_if_ceiling_tok_s=ceiling, what_if_capped=predicted > ceiling)
    if predicted <= ceiling:
        note = (f"the roofline allows up to {ceiling:,.0f} tok/s at a batch of {batch:,.0f}: the prediction "
                f"({predicted:,.0f}) is {predicted / ceiling:.0%} of it")
        return msgspec.structs.replace(verdict, roofline=placement, what_if=[*verdict.what_if, note])
    note = (f"the roofline caps this: at a batch of {batch:,.0f} the hardware allows at most {ceiling:,.0f} tok/s, "
            f"below the {predicted:,.0f} the measured slope extrapolates to")
    return msgspec.structs.replace(verdict, roofline=placement, predicted_throughput_doubled_cap=ceiling,
                                   what_if=[*verdict.what_if, note])



def decode_points(levels: Sequence[LevelResult], rf: Roofline) -> tuple[list[tuple[float, float, float]],
                                                                        list[LevelResult]]:
    """A measured sweep's decode steps, (batch, mean TPOT in seconds, context) per successful level, and the
    levels they come from."""
    measured = [m for m in _measured(levels, rf) if m[0].tpot_ms.mean]
    if not measured:
        raise ResultsError("no successful level with a decoding batch and a TPOT to calibrate from")
    points = [(placed.batch, float(lv.tpot_ms.mean or 0.0) / 1e3, _context(lv, rf)) for lv, placed, _ in measured]
    return points, [lv for lv, _, _ in measured]


def calibrate_from_levels(levels: Sequence[LevelResult], rf: Roofline) -> tuple[Calibration, list[LevelResult]]:
    """The step overhead and one efficiency factor (``roofline.fit_overhead_and_efficiency``) that explain a
    measured sweep's decode steps: each successful level's batch over its mean TPOT, at its own context."""
    points, used = decode_points(levels, rf)
    return fit_overhead_and_efficiency(rf, points), used
