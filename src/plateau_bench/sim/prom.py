"""The twin's ``/metrics``, under vLLM's Prometheus names, written by the official client library.

A private ``CollectorRegistry`` per server holds one custom collector that reads the engine's
state at scrape time (gauges and counters cost nothing between scrapes) and histograms fed
once per finished request. Latency histograms are in wall-clock seconds (virtual time divided by
the speed-up), so they compare directly with what a client measures. Inter-token latency is the
request's mean gap, counted once per gap (``output_tokens - 1`` times), since the engine does
not keep per-token times in its fast mode.

The request's own time split is published as vLLM does (``vllm/v1/metrics/stats.py``), from the
engine's arrival: queue (arrival to the step that first admitted it), prefill (from there to its first
token), decode (first to last token), inference (admission to last token) and end-to-end latency, with
vLLM's bucket bounds; and ``vllm:iteration_tokens_total``, a histogram of tokens per engine step, from
the probe's count of steps by their tokens (with one engine only, like the ground truth below).

Besides vLLM's names, the twin publishes its own ground truth (what a real engine does not say), in
wall-clock seconds like the histograms:

* ``plateau:admission_blocked_seconds_total{reason}``: time during which waiting requests were kept
  out, by what kept them out: ``cap`` (max-num-seqs requests running), ``kv`` (the next request's
  blocks did not fit), ``budget`` (the step's token budget was spent), ``preempted`` (the step had to
  evict running requests to find blocks), ``none`` (nobody was waiting);
* ``plateau:engine_busy_seconds_total``: time spent running steps;
* ``plateau:prefill_seconds_total``: the part of it spent on prompt tokens (and their attention).

Their rates over a window divided by one another give the shares ``sim.probe.window`` computes in
virtual time, e.g. ``rate(plateau:admission_blocked_seconds_total{reason="kv"}[1m])`` is the share of
the time the KV cache held admission back.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from plateau_bench.sim.engine import EngineState
from plateau_bench.sim.probe import REASONS, Probe

# vLLM's bucket boundaries for these two histograms.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
# vLLM's bounds for its request-phase histograms (queue, prefill, decode, inference, e2e) and its tokens per step
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
# (metric name, help text, key in SimMetrics.phases)
PHASES = (
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e"),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "queue"),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", "inference"),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "prefill"),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "decode"),
)


class WeightedHistogram:
    """Bucket counts where one observation may count several times."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float, count: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += count
        self.total += value * count

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((repr(float(bound)), float(running)))
        out.append(("+Inf", float(running + self.counts[-1])))
        return out


def step_histogram(steps: dict[int, int]) -> WeightedHistogram:
    """The probe's steps by token count as vLLM's tokens-per-step histogram."""
    hist = WeightedHistogram(ITERATION_TOKEN_BUCKETS)
    for tokens, count in steps.items():
        hist.observe(tokens, count)
    return hist


class _EngineCollector(Collector):
    def __init__(self, model_name: str, state: Callable[[], EngineState], metrics: SimMetrics,
                 probe: Probe | None = None, speed: float = 1.0) -> None:
        self._labels = ["model_name", "engine"]
        self._values = [model_name, "0"]
        self._state = state
        self._metrics = metrics
        self._probe = probe
        self._speed = speed

    def collect(self) -> Iterator[Metric]:
        s = self._state()
        labels, values = self._labels, self._values

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", s.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
        yield counter("vllm:num_preemptions", "Cumulative number of preemptions.", s.preemptions)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.",
                      s.generation_tokens_total)
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                      s.prefix_cache_queries)
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                      s.prefix_cache_hits)
        if s.front_end_cpu_s is not None:
            # the API server's CPU, as prometheus_client's process collector names it (no labels); the
            # twin's front end is one process, busy exactly while it handles a request
            cpu = CounterMetricFamily("process_cpu_seconds", "Total user and system CPU time spent in seconds.")
            cpu.add_metric([], s.front_end_cpu_s / self._speed)
            yield cpu
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the KV cache config.",
                                 labels=["block_size", "num_gpu_blocks", "engine"])
        info.add_metric([str(s.block_size), str(s.num_gpu_blocks), "0"], 1.0)
        yield info
        m = self._metrics
        histograms = [
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl),
            *((name, doc, m.phases[key]) for name, doc, key in PHASES),
        ]
        if self._probe is not None:
            histograms.append(("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                               step_histogram(self._probe.step_tokens)))
        for name, doc, hist in histograms:
            h = HistogramMetricFamily(name, doc, labels=labels)
            h.add_metric(values, hist.cumulative(), hist.total)
            yield h
        if self._probe is not None:
            yield from self._ground_truth(self._probe)

    def _ground_truth(self, probe: Probe) -> Iterator[Metric]:
        """The twin's own record of what limited it (see the module docstring), in wall-clock seconds."""
        blocked = CounterMetricFamily("plateau:admission_blocked_seconds",
                                      "Seconds waiting requests were kept out, by what kept them out.",
                                      labels=[*self._labels, "reason"])
        for reason, seconds in zip(REASONS, probe.blocked_s, strict=True):
            blocked.add_metric([*self._values, reason], seconds / self._speed)
        yield blocked
        for name, doc, seconds in (
            ("plateau:engine_busy_seconds", "Seconds spent running engine steps.", probe.busy_s),
            ("plateau:prefill_seconds", "Seconds of step time spent on prompt tokens.", probe.prefill_s),
        ):
            c = CounterMetricFamily(name, doc, labels=self._labels)
            c.add_metric(self._values, seconds / self._speed)
            yield c


class SimMetrics:
    """The registry of one server instance."""

    def __init__(self, model_name: str, state: Callable[[], EngineState], *, probe: Probe | None = None,
                 speed: float = 1.0) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.ttft = WeightedHistogram(TTFT_BUCKETS)
        self.itl = WeightedHistogram(ITL_BUCKETS)
        self.phases = {key: WeightedHistogram(REQUEST_LATENCY_BUCKETS) for _, _, key in PHASES}
        self.registry.register(_EngineCollector(model_name, state, self, probe, speed))

    def observe_request(self, ttft_s: float, itl_s: float | None, gaps: int) -> None:
        self.ttft.observe(ttft_s)
        if itl_s is not None and gaps > 0:
            self.itl.observe(itl_s, gaps)

    def observe_phases(self, *, queue_s: float, prefill_s: float, decode_s: float) -> None:
        """One finished request's split, in wall-clock seconds (inference and e2e are their sums)."""
        for key, value in (("queue", queue_s), ("prefill", prefill_s), ("decode", decode_s),
                           ("inference", prefill_s + decode_s), ("e2e", queue_s + prefill_s + decode_s)):
            self.phases[key].observe(value)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
