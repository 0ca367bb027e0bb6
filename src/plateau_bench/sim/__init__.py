"""The simulated engine ("the twin"): scheduler, step-time model, presets, HTTP server.

Public API::

    get_preset(name) -> EngineConfig, list_presets()
    Engine(config, *, chunks=False, trace=False, on_finish=None)     # virtual time, pure
    simulate_level(config, level, workload, *, chunks=False, trace=False, probe=None) -> SimResult
    Probe(sample_s=0.1), window(snapshots, start_s, end_s, num_blocks)   # ground truth: what limited it
    start_sim_server(config, *, host="127.0.0.1", port=0, speed=1.0, metrics=True,
                     faults=None, faults_seed=0) -> SimServerHandle
    parse_faults("hang=0.1,http_429=0.05") -> FaultSpec               # see sim.faults
"""

from __future__ import annotations

from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.embed import SimServerHandle, start_sim_server
from plateau_bench.sim.engine import Engine, EngineState, RequestRejected, StepRecord
from plateau_bench.sim.faults import FaultSpec, parse_faults
from plateau_bench.sim.level import SimResult, simulate_level
from plateau_bench.sim.presets import get_preset, list_presets
from plateau_bench.sim.probe import Probe, window
from plateau_bench.sim.step_model import StepModel

__all__ = [
    "Engine",
    "EngineConfig",
    "EngineState",
    "FaultSpec",
    "Probe",
    "RequestRejected",
    "SimResult",
    "SimServerHandle",
    "StepModel",
    "StepRecord",
    "get_preset",
    "list_presets",
    "parse_faults",
    "simulate_level",
    "start_sim_server",
    "window",
]
