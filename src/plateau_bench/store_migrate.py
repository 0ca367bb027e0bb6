"""Reading older ``result.json`` files: each schema version upgraded to the next, as plain JSON.

Version 1 kept level notes in a free-form ``extra`` map, telemetry and client health as flat maps,
an unreached plateau as an object of nulls, and a simulation's settings at the top of ``spec``. The
upgrade moves every known value to its explicit field and keeps the rest where nothing is lost
(unknown telemetry keys go to ``telemetry.raw``). Figures are never recomputed or invented: v1 did
not count hung requests as failures, so an upgraded level says how many there were in a note.
"""

from __future__ import annotations

from typing import Any

from plateau_bench.result import ClientHealth, ServerTelemetry

_TELEMETRY_FIELDS = frozenset(ServerTelemetry.__struct_fields__) - {"raw"}
_CLIENT_FIELDS = frozenset(ClientHealth.__struct_fields__)


def _telemetry_v2(flat: Any, engine: Any) -> dict[str, Any]:
    flat = flat if isinstance(flat, dict) else {}
    out: dict[str, Any] = {k: v for k, v in flat.items() if k in _TELEMETRY_FIELDS}
    out["raw"] = {k: v for k, v in flat.items() if k not in _TELEMETRY_FIELDS}
    out["samples"] = int(flat.get("samples", 0) or 0)
    if engine:
        out["engine"] = engine
    return out


def _client_v2(flat: Any) -> dict[str, Any]:
    flat = flat if isinstance(flat, dict) else {}
    out = {k: v for k, v in flat.items() if k in _CLIENT_FIELDS}
    out["samples"] = int(flat.get("samples", 0) or 0)
    return out


def _level_v2(level: Any) -> Any:
    if not isinstance(level, dict):
        return level  # left for the type check to report
    lv = dict(level)
    extra = lv.pop("extra", None) or {}
    extra = extra if isinstance(extra, dict) else {}
    lv["telemetry"] = _telemetry_v2(lv.get("telemetry"), extra.get("engine"))
    lv["client"] = _client_v2(lv.get("client"))
    for old, new in (("phase", "phase"), ("gain", "gain"), ("cut_off_at_stop", "cut_off_at_stop"),
                     ("gpu_telemetry", "gpu_note"), ("virtual_seconds", "benchmark_s"), ("sim", "sim")):
        if extra.get(old) is not None:
            lv[new] = extra[old]
    notes = [n for n in str(lv.get("window_note", "")).split("; ")[1:] if n]
    if extra.get("hung_requests"):
        notes.append(f"{extra['hung_requests']} request(s) were left unanswered at the end (schema 1 did not "
                     "count them as failures)")
    lv["notes"] = notes
    return lv


def _marker_v2(marker: Any) -> Any:
    """An unreached plateau/knee was an object of nulls; it is ``null`` now."""
    if not isinstance(marker, dict) or marker.get("throughput") is None:
        return None
    return marker


def _spec_v2(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    out = dict(spec)
    if out.pop("simulated", False):
        out = {"workload": spec.get("workload", {}),
               "sim": {k: spec[k] for k in ("preset", "mode", "overrides", "engine", "concurrency",
                                            "num_requests", "duration_s") if k in spec}}
    sweep = out.get("sweep")
    if isinstance(sweep, dict) and sweep.get("mode") == "rate":
        sweep = dict(sweep)
        if sweep.get("rates") == "auto":
            sweep["rates"] = None
        if "steps" in sweep:
            sweep["rate_steps"] = sweep.pop("steps")
        out["sweep"] = sweep
    return out


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    out["levels"] = [_level_v2(lv) for lv in data.get("levels", [])] if isinstance(data.get("levels"), list) \
        else data.get("levels")
    for key in ("plateau", "knee"):
        if key in out:
            out[key] = _marker_v2(out[key])
    if "spec" in out:
        out["spec"] = _spec_v2(out["spec"])
    out["schema_version"] = 2
    return out


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` upgraded to the current schema version (a no-op for current files)."""
    if data.get("schema_version") == 1:
        data = _v1_to_v2(data)
    return data
