"""One load level over real HTTP: client, load loop, telemetry and client health together.

``HttpLevelRunner`` is the sweep's ``LevelRunner`` for a real endpoint. Per level it opens a client
whose connection pool matches the level's concurrency, starts the ``/metrics`` scraper, the local
GPU poller and the load generator's health sampler, and runs the load loop. For steady and open-loop
levels it asks the ``StopRule`` it was given (the analysis's precision rule) whether the estimate is
precise enough, and when it is lets the level drain (``driver.load``). Every finished request is
handed to ``on_record`` at once (the result writer streams it to disk).

With a ``WorkerPool`` (``--workers``) the load itself runs in the pool's processes while this process
keeps the telemetry, the precision rule and the records; the level comes out the same ``LevelRun``,
with each process's health samples and the processes that ran it.

Warm steady levels (``LevelSpec.warm``, a sweep's default) run on one live closed loop kept from level to
level (``driver.warm``, one level of it in ``driver.warm_level``): the server is never emptied between
them, and ``end_warm`` drains or cancels that load once the sweep is done with it. Where the load does not
run in this one process (a pool, Ray, multi-turn sessions, a trace's schedule) they are measured cold, and
the level says so. ``aclose`` (or ``async with``) stops a live load the sweep left running.

It returns the raw ``LevelRun``: records and samples, no statistic (``analysis.level`` makes those).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import time
from collections.abc import Callable, Sequence

from plateau_bench.aio import level_finisher, old_objects_frozen, stop_asked
from plateau_bench.driver import kernel_tcp
from plateau_bench.driver.client import StreamingClient
from plateau_bench.driver.health import HealthSampler
from plateau_bench.driver.level_telemetry import LevelTelemetry
from plateau_bench.driver.load import GRACE_MIN_S, run_level
from plateau_bench.driver.load_state import DEAD_TARGET_FAILURES, LoadProgress, Sender
from plateau_bench.driver.pool import PoolOutcome, WorkerPool
from plateau_bench.driver.sessions import SessionPool, SessionSender
from plateau_bench.driver.target import on_this_host
from plateau_bench.driver.warm import WarmLoad
from plateau_bench.driver.warm_level import CHECK_S, WarmLevelContext, run_warm_level
from plateau_bench.errors import ErrorClass
from plateau_bench.level_run import LevelRun, StopRequested, StopRule, WarmEnd
from plateau_bench.progress import LevelProgress
from plateau_bench.records import RequestRecord
from plateau_bench.result import INTERRUPT_NOTE
from plateau_bench.spec import LevelSpec, TargetSpec
from plateau_bench.telemetry.gpu import open_nvml
from plateau_bench.telemetry.scraper import TelemetryScraper
from plateau_bench.workload.feed import LevelKey, PromptFeed, prompts_ahead, prompts_first
from plateau_bench.workload.prompts import Prompt
from plateau_bench.workload.source import PromptSource

_MONITOR_S = 0.5


class _TrackingSender:
    """Wraps the client to know which requests are in flight (for the convergence window)."""

    def __init__(self, client: StreamingClient, progress: LevelProgress | None, inner: Sender | None = None) -> None:
        self.client = client
        self.inner: Sender = inner if inner is not None else client   # a SessionSender for multi-turn sessions
        self.progress = progress
        self.in_flight: dict[int, int] = {}

    async def send(self, *, index: int, prompt: str, prompt_tokens: int, max_tokens: int, scheduled_ns: int,
                   worker: int = -1, warmup: bool = False) -> RequestRecord:
        self.in_flight[index] = time.monotonic_ns() - self.client.t0_ns
        if self.progress is not None:
            self.progress.in_flight = len(self.in_flight)
        try:
            return await self.inner.send(index=index, prompt=prompt, prompt_tokens=prompt_tokens,
                                         max_tokens=max_tokens, scheduled_ns=scheduled_ns, worker=worker,
                                         warmup=warmup)
        finally:
            self.in_flight.pop(index, None)
            if self.progress is not None:
                self.progress.in_flight = len(self.in_flight)

    def partial_record(self, index: int, *, error: ErrorClass, detail: str) -> RequestRecord | None:
        return self.client.partial_record(index, error=error, detail=detail)

    def complete_until_ns(self) -> int:
        now = time.monotonic_ns() - self.client.t0_ns
        return min(self.in_flight.values(), default=now)


class _Collector:
    """Receives finished records: keeps them, counts refused connections, feeds progress and the writer."""

    def __init__(self, progress: LevelProgress | None, on_record: Callable[[RequestRecord], None] | None,
                 abort: asyncio.Event) -> None:
        self.records: list[RequestRecord] = []
        self.refused = 0
        self.progress = progress
        self.on_record = on_record
        self.abort = abort

    def __call__(self, r: RequestRecord) -> None:
        # A server that died answers every request at once with a refused connection; without
        # this the level would spin through thousands of instant failures until its time is up.
        self.refused = self.refused + 1 if r.error == ErrorClass.CONNECT else 0
        if self.refused >= DEAD_TARGET_FAILURES:
            self.abort.set()
        self.records.append(r)
        if self.progress is not None:
            self.progress.record(r)
            if r.error == ErrorClass.HUNG:
                self.progress.hung += 1
        if self.on_record:
            self.on_record(r)


class HttpLevelRunner:
    def __init__(
        self,
        target: TargetSpec,
        prompts: Sequence[Prompt] | PromptSource,
        *,
        metrics_url: str | None,
        metrics_required: bool = False,
        count_tokens: Callable[[str], int] | None = None,
        progress: Callable[[], LevelProgress | None] = lambda: None,
        seed: int = 0,
        gpu_metrics_urls: Sequence[str] = (),
        pool: WorkerPool | None = None,
        sessions: SessionPool | None = None,
        schedule_ns: Sequence[int] | None = None,
        single: bool = False,
        dataset_from: int = 0,
        grace_min_s: float = GRACE_MIN_S,
        check_s: float = CHECK_S,
    ) -> None:
        self.target = target
        self.sessions = sessions
        self.schedule_ns = schedule_ns   # a trace's send offsets at time scale 1 (prompt i at offset i)
        # a list given as is is cycled, its repeats counted (``workload.feed``)
        self.source = prompts if isinstance(prompts, PromptSource) else PromptSource.given(list(prompts))
        self.single = single              # the run's one level: its first measurement takes the prepared prompts
        self.dataset_from = dataset_from  # where the next level starts in a dataset (a resumed run: past the saved)
        self.metrics_url = metrics_url
        self.metrics_required = metrics_required
        self.count_tokens = count_tokens
        self.progress = progress
        self.seed = seed
        self.gpu_metrics_urls = list(gpu_metrics_urls)
        self.pool = pool
        self.engine: str | None = None
        # Local GPUs (when the load runs on the GPU host): power, utilisation, clocks, through NVML.
        self._nvml, self.gpu_note = open_nvml()
        # NVML's GPUs are the server's only when it runs here.
        self._gpus_serve = self._nvml is not None and on_this_host(target)
        self._server_here = on_this_host(target)
        self.grace_min_s = grace_min_s   # the shortest drain before a request in flight is hung
        self.check_s = check_s           # between a warm level's checks of its stop rule
        self._live: WarmLoad | None = None   # the live load warm steady levels share, until ``end_warm``

    async def run_level(
        self,
        level: LevelSpec,
        *,
        label: str,
        on_record: Callable[[RequestRecord], None] | None,
        stop_rule: StopRule | None,
        repeat: int = 1,
        attempt: int = 1,
    ) -> LevelRun:
        if stop_asked():
            raise StopRequested(label)
        asked_warm = (level.warm and level.mode == "steady" and stop_rule is not None
                      and level.num_requests is None)
        cold_because = self._cold_because() if asked_warm else None
        if asked_warm and stop_rule is not None and cold_because is None:
            return await self._warm_level(level, label, on_record, stop_rule, repeat, attempt)
        if self._live is not None:   # a cold level never runs beside the live load (the sweep ends it first)
            await self._close_live()
        key = LevelKey(label=label, attempt=attempt, repeat=repeat, base=self.single and attempt == 1 and repeat == 1,
                       dataset_from=self.dataset_from)
        feed = self.source.feed(key, ahead=prompts_ahead(level))
        if self.pool is None:
            await feed.prime(prompts_first(level))   # before the level's clock starts
        try:
            run = await self._run(level, label, on_record, stop_rule, repeat, key, feed)
        finally:
            feed.close()
        self.dataset_from += run.prompts.span if run.prompts is not None else 0
        if cold_because is not None:
            run.notes.append(f"measured cold: warm levels need the load in one process ({cold_because})")
        return run

    def _cold_because(self) -> str | None:
        """Why a level asked to be warm runs cold here (None: it runs warm)."""
        if self.pool is not None:
            return "the load runs in load processes (--workers, --ray)"
        if self.sessions is not None:
            return "multi-turn sessions"
        if self.schedule_ns is not None:
            return "a trace's schedule"
        return None

    async def _warm_level(self, level: LevelSpec, label: str, on_record: Callable[[RequestRecord], None] | None,
                          stop_rule: StopRule, repeat: int, attempt: int) -> LevelRun:
        """A warm level on the live load, started by the first one (``driver.warm_level``)."""
        if self._live is None:
            self._live = WarmLoad(self.target, count_tokens=self.count_tokens, grace_min_s=self.grace_min_s)
            await self._live.open()
        live = self._live
        key = LevelKey(label=label, attempt=attempt, repeat=repeat, dataset_from=self.dataset_from)
        try:
            feed = self.source.feed(key, ahead=prompts_ahead(level))
            await feed.prime(prompts_first(level))
            tcp_before = self._tcp_counters()
            telemetry = LevelTelemetry(self.metrics_url, self._nvml, self.gpu_metrics_urls, t0_ns=live.t0)
            self.engine = await telemetry.start(metrics_required=self.metrics_required) or self.engine
            context = WarmLevelContext(label=label, feed=feed, on_record=on_record, progress=self.progress(),
                                       telemetry=telemetry, check_s=self.check_s)
            with old_objects_frozen():
                run = await run_warm_level(live, level, stop_rule, context)
        except StopRequested:   # a first Ctrl-C before the level measured anything: the sweep ends the load
            raise
        except BaseException:   # a failure or a second Ctrl-C: nothing of the live load is left running
            await self._close_live()
            raise
        self.dataset_from += run.prompts.span if run.prompts is not None else 0
        run.engine = self.engine
        run.gpu_note = None if run.gpu_samples else self.gpu_note
        run.gpus_serve = bool(run.gpu_samples) and self._gpus_serve
        run.kernel_tcp = kernel_tcp.delta(tcp_before, self._tcp_counters(), server_here=self._server_here)
        return run

    async def end_warm(self, drain: bool) -> WarmEnd | None:
        """End the live load of warm levels, if any: its last requests drained (their final records; they
        belong to the last warm level) or cancelled (how many). None when there is none."""
        live = self._live
        if live is None:
            return None
        started = time.monotonic()
        try:
            if drain:
                records, cancelled = await live.drain(), 0
            else:
                records, cancelled = await live.cancel()
        finally:
            await self._close_live()
        return WarmEnd(records=records, cancelled=cancelled, seconds=time.monotonic() - started if drain else 0.0)

    async def _close_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            await live.close()

    async def aclose(self) -> None:
        """Stop whatever of the live load still runs (a sweep that ended without ``end_warm``)."""
        await self._close_live()

    async def __aenter__(self) -> HttpLevelRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _tcp_counters(self) -> dict[str, int] | None:
        """This host's TCP counters, when the connections are this host's (not Ray actors elsewhere)."""
        if self.pool is not None and not self.pool.launcher.local:
            return None
        return kernel_tcp.read_counters()

    async def _run(self, level: LevelSpec, label: str, on_record: Callable[[RequestRecord], None] | None,
                   stop_rule: StopRule | None, repeat: int, key: LevelKey, feed: PromptFeed) -> LevelRun:
        progress = self.progress()
        if progress is not None and stop_rule is not None:
            progress.precision = stop_rule.precision
        started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")
        tcp_before = self._tcp_counters()
        t0 = time.monotonic_ns()
        abort, finish, cancel = asyncio.Event(), asyncio.Event(), asyncio.Event()
        collect = _Collector(progress, on_record, abort)
        telemetry = LevelTelemetry(self.metrics_url, self._nvml, self.gpu_metrics_urls, t0_ns=t0)
        self.engine = await telemetry.start(metrics_required=self.metrics_required) or self.engine
        # Load processes (--workers, --ray) drain at every stop: the cancel does not reach them.
        watch = _Watch(level, stop_rule, collect.records, telemetry.scraper, progress, finish, t0,
                       cancel if self.pool is None else None)
        asked_at_ns: list[int] = []

        def finish_now() -> None:   # the user's first Ctrl-C (aio.first_interrupt_finishes): the level ends at once
            asked_at_ns.append(time.monotonic_ns())
            finish.set()
            (cancel if self.pool is None else abort).set()
            if progress is not None:
                progress.draining = True

        try:
            with old_objects_frozen(), level_finisher(finish_now):
                load = await (self._local(level, t0, collect, abort, finish, cancel, watch, feed, repeat)
                              if self.pool is None else self._pooled(self.pool, level, t0, collect, abort, finish,
                                                                     watch, key))
        finally:
            samples = await telemetry.stop()
        kernel = kernel_tcp.delta(tcp_before, self._tcp_counters(), server_here=self._server_here)
        return LevelRun(
            level=level, label=label, records=collect.records, server_samples=samples.server,
            gpu_samples=samples.gpu, dcgm_samples=samples.dcgm, health_samples=load.health,
            notes=[*samples.notes, *load.notes, *_ended_early(asked_at_ns, t0, load), *_wall_bound(level, load)],
            started_at=started_at,
            t0_monotonic_ns=t0, cut_off_at_stop=load.cancelled, cancelled_at_end=load.cancelled_at_end,
            target_gone=collect.refused >= DEAD_TARGET_FAILURES,
            engine=self.engine, gpu_note=None if samples.gpu else self.gpu_note, load_processes=load.processes,
            gpus_serve=bool(samples.gpu) and self._gpus_serve, kernel_tcp=kernel,
            lost_workers=load.lost, worker_clocks=load.clocks,
            prompts=load.prompts if load.prompts is not None else feed.use())

    async def _local(self, level: LevelSpec, t0: int, collect: _Collector, abort: asyncio.Event,
                     finish: asyncio.Event, cancel: asyncio.Event, watch: _Watch, feed: PromptFeed,
                     repeat: int = 1) -> PoolOutcome:
        """The load in this process: one client, one event loop."""
        # An unbounded open loop may need many connections; the pool opens them only as needed.
        width = level.concurrency or level.max_concurrency or 4096
        load_progress = LoadProgress()
        async with StreamingClient(self.target, concurrency=width, t0_ns=t0,
                                   count_tokens=self.count_tokens) as client:
            sessions = SessionSender(client, self.sessions) if self.sessions is not None else None
            sender = _TrackingSender(client, watch.progress, sessions)
            health = HealthSampler(t0_ns=t0, in_flight=lambda: len(sender.in_flight))
            health.start()
            monitor = asyncio.create_task(watch.run(lambda: len(sender.in_flight), sender.complete_until_ns))
            try:
                await run_level(sender, feed, level, t0_ns=t0, on_record=collect, stop=abort, finish=finish,
                                cancel=cancel, seed=self.seed + repeat - 1, progress=load_progress,
                                grace_min_s=self.grace_min_s,
                                offsets_ns=self._offsets(level),
                                session_open=sessions.in_session if sessions is not None else None)
            finally:
                monitor.cancel()
                health_samples = await health.stop()
        return PoolOutcome(health=health_samples, cancelled=load_progress.cancelled, processes=1, lost=0, notes=[],
                           cancelled_at_end=load_progress.cancelled_at_end, hung_at_bound=load_progress.hung_at_bound)

    async def _pooled(self, pool: WorkerPool, level: LevelSpec, t0: int, collect: _Collector, abort: asyncio.Event,
                      finish: asyncio.Event, watch: _Watch, key: LevelKey) -> PoolOutcome:
        """The load shared by the pool's processes; every record comes back through ``collect``."""
        running = await pool.begin(level, t0_ns=t0, on_record=collect, prompts=key, ahead=prompts_ahead(level))
        monitor = asyncio.create_task(watch.run(running.in_flight, running.complete_until_ns))
        try:
            return await running.wait(abort=abort, finish=finish)
        finally:
            monitor.cancel()


    def _offsets(self, level: LevelSpec) -> list[int] | None:
        if self.schedule_ns is None:
            return None
        scale = level.time_scale or 1.0
        return [round(o / scale) for o in self.schedule_ns]


class _Watch:
    """Feeds the live view and asks the precision rule whether the level may drain."""

    def __init__(self, level: LevelSpec, stop_rule: StopRule | None, records: list[RequestRecord],
                 scraper: TelemetryScraper | None, progress: LevelProgress | None, finish: asyncio.Event,
                 t0: int, cancel: asyncio.Event | None) -> None:
        self.level = level
        self.stop_rule = stop_rule
        self.records = records
        self.scraper = scraper
        self.progress = progress
        self.finish = finish
        self.t0 = t0
        self.cancel = cancel   # --no-drain: set instead of draining when the rule stops on its precision

    async def run(self, in_flight: Callable[[], int], complete_until_ns: Callable[[], int]) -> None:
        level, stop_rule, progress, scraper = self.level, self.stop_rule, self.progress, self.scraper
        while not self.finish.is_set():
            await asyncio.sleep(_MONITOR_S)
            elapsed = (time.monotonic_ns() - self.t0) / 1e9
            if progress is not None:
                progress.in_flight = in_flight()
                if scraper is not None and scraper.samples:
                    last = scraper.samples[-1]
                    progress.server_running = last.get("running")
                    progress.server_waiting = last.get("waiting")
            if stop_rule is None or level.mode == "burst" or level.time_scale is not None:
                continue   # a burst and a trace replay send all their requests
            workers = level.concurrency or 1  # open loop: records carry worker -1, one "worker"
            complete = complete_until_ns()
            ci_rel, done = stop_rule.check(self.records, elapsed_s=elapsed, workers=workers, complete_until_ns=complete)
            if progress is not None:
                progress.ci_rel = ci_rel
            if done:
                if (self.cancel is not None and level.mode == "steady"
                        and stop_rule.may_cancel_in_flight(ci_rel, elapsed)):
                    self.cancel.set()
                self.finish.set()
                if progress is not None:
                    progress.draining = True


def _ended_early(asked_at_ns: list[int], t0_ns: int, load: PoolOutcome) -> list[str]:
    if not asked_at_ns:
        return []
    return [f"{INTERRUPT_NOTE}{(asked_at_ns[0] - t0_ns) / 1e9:.1f} s: nothing was sent after it, and the "
            f"{load.cancelled_at_end + load.cancelled} request(s) then in flight were cancelled (not measured)"]


def _wall_bound(level: LevelSpec, load: PoolOutcome) -> list[str]:
    if not load.hung_at_bound or level.max_wall_s is None:
        return []
    return [f"{load.hung_at_bound} request(s) silent at --max-level-time ({level.max_wall_s:g} s) or after it were "
            "declared hung then (no token for the grace period or the whole bound), not left to the client's timeout"]
