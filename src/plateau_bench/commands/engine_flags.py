"""The engine's settings as flags, declared once: the scheduler's limits (``sim``, ``serve-sim``,
``predict``, ``plan``) and, for the twin, its step time, replicas and prefix cache (``sim``, ``serve-sim``:
a scenario served in real time replays in virtual time with the same flags)."""

from __future__ import annotations

from typing import Annotated

import msgspec
import typer

from plateau_bench.commands.groups import OptionGroup
from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig

ENGINE = "Engine settings"

Balancer = Annotated[str | None, typer.Option("--balancer", help="round-robin | least-outstanding: how requests "
                                              "are spread over the replicas (sim and serve-sim: default "
                                              "round-robin; plan: default both, side by side).",
                                              rich_help_panel=ENGINE)]


class EngineSettings(OptionGroup, frozen=True, kw_only=True):
    """The scheduler's limits (None keeps the engine's own: the preset's, or the calibrated one) and its
    admission."""

    max_num_seqs: Annotated[int | None, typer.Option(
        "--max-num-seqs", help="Admission cap: requests running at once (vLLM --max-num-seqs, SGLang "
        "--max-running-requests; default: the preset's or the calibrated one).", rich_help_panel=ENGINE)] = None
    kv_tokens: Annotated[int | None, typer.Option("--kv-tokens", help="KV-cache capacity in tokens (default: the "
                                                  "preset's or the calibrated one).", rich_help_panel=ENGINE)] = None
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        "--max-num-batched-tokens", help="Per-step token budget (default: the preset's or the calibrated one).",
        rich_help_panel=ENGINE)] = None
    reserve_kv: Annotated[bool, typer.Option(
        "--reserve-kv", help="Admit a request only when its whole prompt and answer fit in the KV cache, and never "
        "preempt (TensorRT-LLM's default, GUARANTEED_NO_EVICT; default: admit what fits now and preempt when the "
        "cache fills, as vLLM and SGLang do).", rich_help_panel=ENGINE)] = False

    def check(self) -> None:
        if self.max_num_seqs == 0:
            raise ConfigError("--max-num-seqs 0 admits no request; use at least 1")


class TwinEngineFlags(EngineSettings, frozen=True, kw_only=True):
    """Everything the twin's engine can be told (``sim``, ``serve-sim``)."""

    max_model_len: Annotated[int | None, typer.Option("--max-model-len", help="Longest prompt + output.",
                                                      rich_help_panel=ENGINE)] = None
    t0_ms: Annotated[float | None, typer.Option("--t0-ms", help="Step time: fixed part (ms).",
                                                rich_help_panel=ENGINE)] = None
    a_ms: Annotated[float | None, typer.Option("--a-ms", help="Step time: per decode sequence (ms).",
                                               rich_help_panel=ENGINE)] = None
    b_ms: Annotated[float | None, typer.Option("--b-ms", help="Step time: per prefill token (ms).",
                                               rich_help_panel=ENGINE)] = None
    c_us: Annotated[float | None, typer.Option("--c-us", help="Step time: per KV token read (us).",
                                               rich_help_panel=ENGINE)] = None
    slot_us: Annotated[float | None, typer.Option("--slot-us", help="Step time: per allocated slot of the "
                                                  "admission cap, used or not (us; llama.cpp's --parallel).",
                                                  rich_help_panel=ENGINE)] = None
    replicas: Annotated[int | None, typer.Option("--replicas", help="Data-parallel copies of the engine behind a "
                                                 "load balancer (default 1).", rich_help_panel=ENGINE)] = None
    balancer: Balancer = None
    front_end_ms: Annotated[float | None, typer.Option(
        "--front-end-ms", help="CPU time (ms) the API server spends on each request before the engine queues it, "
        "one request at a time (default 0: no front end).", rich_help_panel=ENGINE)] = None
    no_prefix_cache: Annotated[bool, typer.Option("--no-prefix-cache", help="Turn off prefix caching (on by "
                                                  "default, as in vLLM).", rich_help_panel=ENGINE)] = False

    def configure(self, base: EngineConfig) -> EngineConfig:
        """``base`` (a preset or a derived engine) with these settings applied."""
        from plateau_bench.sim.replicas import parse_balancer

        config = base.with_overrides(
            max_num_seqs=self.max_num_seqs, kv_tokens=self.kv_tokens,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len, t0_ms=self.t0_ms, a_ms=self.a_ms, b_ms=self.b_ms, c_us=self.c_us,
            slot_us=self.slot_us,
            replicas=self.replicas, balancer=parse_balancer(self.balancer) if self.balancer is not None else None,
            front_end_ms=self.front_end_ms)
        if self.no_prefix_cache:
            config = msgspec.structs.replace(config, prefix_caching=False)
        if self.reserve_kv:
            config = msgspec.structs.replace(config, reserve_kv=True)
        self.check()
        return config


AS_CALIBRATED, AS_PRESET = EngineSettings(), TwinEngineFlags()
