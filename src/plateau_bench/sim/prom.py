"""The twin's ``/metrics``, under vLLM's Prometheus names, written by the official client library.

A private ``CollectorRegistry`` per server holds one custom collector that reads the engine's
state at scrape time (gauges and counters cost nothing between scrapes) and two histograms fed
once per finished request. Latency histograms are in wall-clock seconds (virtual time divided by
the speed-up), so they compare directly with what a client measures. Inter-token latency is the
request's mean gap, counted once per gap (``output_tokens - 1`` times), since the engine does
not keep per-token times in its fast mode.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from plateau_bench.sim.engine import EngineState

# vLLM's bucket boundaries for these two histograms.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)


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


class _EngineCollector(Collector):
    def __init__(self, model_name: str, state: Callable[[], EngineState],
                 ttft: WeightedHistogram, itl: WeightedHistogram) -> None:
        self._labels = ["model_name", "engine"]
        self._values = [model_name, "0"]
        self._state = state
        self._ttft = ttft
        self._itl = itl

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
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the KV cache config.",
                                 labels=["block_size", "num_gpu_blocks", "engine"])
        info.add_metric([str(s.block_size), str(s.num_gpu_blocks), "0"], 1.0)
        yield info
        for name, doc, hist in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self._ttft),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self._itl),
        ):
            h = HistogramMetricFamily(name, doc, labels=labels)
            h.add_metric(values, hist.cumulative(), hist.total)
            yield h


class SimMetrics:
    """The registry of one server instance."""

    def __init__(self, model_name: str, state: Callable[[], EngineState]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.ttft = WeightedHistogram(TTFT_BUCKETS)
        self.itl = WeightedHistogram(ITL_BUCKETS)
        self.registry.register(_EngineCollector(model_name, state, self.ttft, self.itl))

    def observe_request(self, ttft_s: float, itl_s: float | None, gaps: int) -> None:
        self.ttft.observe(ttft_s)
        if itl_s is not None and gaps > 0:
            self.itl.observe(itl_s, gaps)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
