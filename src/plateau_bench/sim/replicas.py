"""Data-parallel replicas of the engine behind a load balancer, in one virtual clock.

``ReplicaSet`` offers the engine's interface (``submit``, ``run``, ``run_until``, ``abort``,
``sent_tokens``, ``next_event_time``, ``state``), so the level driver and the HTTP server use N
replicas exactly as they use one. Each request goes to one replica when it arrives:

* ``round_robin``: in turn;
* ``least_outstanding``: the replica with the fewest requests submitted and not finished (ties: the
  lowest index), as a least-outstanding-requests router does.

The replicas advance in one time order (conservative synchronisation): the replica whose next step
ends first runs, and only up to the next event of any other replica, so a request one replica's
finish sends to another arrives before that other replica's next step begins, and multi-step jumps
stop at the horizon. Every replica's steps are exactly the single engine's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Literal

from plateau_bench.errors import ConfigError
from plateau_bench.sim.config import EngineConfig
from plateau_bench.sim.engine import Engine, EngineState, SimRequest

Balancer = Literal["round_robin", "least_outstanding"]
BALANCERS: tuple[Balancer, ...] = ("round_robin", "least_outstanding")
_INF = float("inf")


def parse_balancer(text: str) -> Balancer:
    name = text.strip().lower().replace("-", "_")
    aliases = {"rr": "round_robin", "lor": "least_outstanding", "least_outstanding_requests": "least_outstanding"}
    name = aliases.get(name, name)
    for b in BALANCERS:
        if b == name:
            return b
    raise ConfigError(f"--balancer must be round-robin or least-outstanding (got {text!r})")


class ReplicaSet:
    """N engines of one configuration behind a balancer (see the module docstring)."""

    def __init__(self, config: EngineConfig, replicas: int, balancer: Balancer = "round_robin", *,
                 chunks: bool = False, on_finish: Callable[[SimRequest], None] | None = None) -> None:
        if replicas < 1:
            raise ConfigError(f"--replicas must be >= 1 (got {replicas})")
        self.config = config
        self.balancer = balancer
        self.on_finish = on_finish
        self.replicas = [Engine(config, chunks=chunks, on_finish=self._finished_on(i), rid_base=i << 40)
                         for i in range(replicas)]
        self.outstanding = [0] * replicas
        self.sent_to = [0] * replicas
        self._home: dict[int, int] = {}        # id(request) -> replica
        self._turn = 0
        self.now = 0.0
        self.trace = None

    def _finished_on(self, index: int) -> Callable[[SimRequest], None]:
        def finished(req: SimRequest) -> None:
            self.outstanding[index] -= 1
            self._home.pop(id(req), None)
            self.now = self.replicas[index].now
            if self.on_finish is not None:
                self.on_finish(req)
        return finished

    def _pick(self) -> int:
        if self.balancer == "round_robin":
            index = self._turn
            self._turn = (index + 1) % len(self.replicas)
            return index
        return min(range(len(self.replicas)), key=lambda i: (self.outstanding[i], i))

    def submit(self, prompt_tokens: int, max_tokens: int, *, arrival: float | None = None, worker: int = -1,
               payload: object = None, block_hashes: list[int] | None = None) -> SimRequest:
        index = self._pick()
        req = self.replicas[index].submit(prompt_tokens, max_tokens, arrival=arrival if arrival is not None
                                          else self.now, worker=worker, payload=payload, block_hashes=block_hashes)
        self.outstanding[index] += 1
        self.sent_to[index] += 1
        self._home[id(req)] = index
        return req

    def set_block_hashes(self, req: SimRequest, block_hashes: list[int]) -> None:
        """Prefix caching: each replica has a cache of its own, so a prefix is reused where it was sent."""
        index = self._home.get(id(req))
        if index is not None:
            self.replicas[index].set_block_hashes(req, block_hashes)

    def abort(self, req: SimRequest) -> None:
        index = self._home.pop(id(req), None)
        if index is not None:
            self.replicas[index].abort(req)
            self.outstanding[index] -= 1

    def sent_tokens(self, req: SimRequest) -> int:
        index = self._home.get(id(req))
        return self.replicas[index].sent_tokens(req) if index is not None else req.sent

    def next_event_time(self) -> float | None:
        times = [t for t in (e.next_event_time() for e in self.replicas) if t is not None]
        return min(times) if times else None

    @property
    def idle(self) -> bool:
        return all(e.idle for e in self.replicas)

    def run(self) -> None:
        self.run_until(_INF)

    def run_until(self, t_limit: float) -> None:
        """Advance every replica to ``t_limit`` in one time order (see the module docstring)."""
        stalled: set[int] = set()   # replicas that cannot move until something new reaches them
        while True:
            events = heapq.nsmallest(2, ((t, i) for i, e in enumerate(self.replicas)
                                         if i not in stalled and (t := e.next_event_time()) is not None))
            if not events or events[0][0] > t_limit:
                break
            _, first = events[0]
            horizon = min(t_limit, events[1][0]) if len(events) > 1 else t_limit
            engine = self.replicas[first]
            before = (engine.now, engine.next_event_time(), len(self._home), sum(self.outstanding))
            engine.run_until(horizon)
            if (engine.now, engine.next_event_time(), len(self._home), sum(self.outstanding)) == before:
                stalled.add(first)   # e.g. waiting requests no step can admit (the single engine stops too)
            else:
                stalled.clear()
        if t_limit != _INF:
            for e in self.replicas:
                if e.idle:
                    e.run_until(t_limit)
            self.now = max(self.now, t_limit)
        else:
            self.now = max([self.now, *(e.now for e in self.replicas)])

    def state(self) -> EngineState:
        parts = [e.state() for e in self.replicas]
        blocks = sum(p.num_gpu_blocks for p in parts)
        used = sum(p.kv_blocks_used for p in parts)
        return EngineState(max(p.now for p in parts), sum(p.running for p in parts), sum(p.waiting for p in parts),
                           used, blocks, parts[0].block_size, used / blocks if blocks else 0.0,
                           sum(p.preemptions for p in parts), sum(p.prompt_tokens_total for p in parts),
                           sum(p.generation_tokens_total for p in parts), sum(p.prefix_cache_queries for p in parts),
                           sum(p.prefix_cache_hits for p in parts),
                           None if parts[0].front_end_cpu_s is None else sum(p.front_end_cpu_s or 0.0 for p in parts))
