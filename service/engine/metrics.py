"""Prometheus metrics under vLLM's names, labels and default buckets, on an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .engine_loop import StepRecord
from .scheduler import RequestTimings, SchedulerStats

__all__ = ["EngineMetrics"]

# vllm/v1/metrics/buckets.py defaults (vLLM 0.33.0).
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip

_LABELS = ("model_name", "engine")


class EngineMetrics:
    """The engine's metric families; one instance per registry (one per process or test)."""

    def __init__(self, registry: CollectorRegistry, model_name: str, engine: str = "0") -> None:
        labels = {"model_name": model_name, "engine": engine}

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, _LABELS, buckets=buckets, registry=registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, _LABELS, registry=registry)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        ).labels(**labels)  # fmt: skip
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        ).labels(**labels)  # fmt: skip
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        ).labels(**labels)
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        ).labels(**labels)
        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        ).labels(**labels)
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        ).labels(**labels)
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        ).labels(**labels)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS, registry=registry
        ).labels(**labels)
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            _LABELS,
            registry=registry,
        ).labels(**labels)
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", _LABELS,
            registry=registry,
        ).labels(**labels)  # fmt: skip
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*_LABELS, "finished_reason"),
            registry=registry,
        )
        self._labels = labels
        self._preemptions_seen = 0

    def on_step(self, record: StepRecord, stats: SchedulerStats) -> None:
        self.on_idle(stats)
        if stats.num_preemptions > self._preemptions_seen:
            self.preemptions.inc(stats.num_preemptions - self._preemptions_seen)
            self._preemptions_seen = stats.num_preemptions

    def on_idle(self, stats: SchedulerStats) -> None:
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_cache_usage)

    def on_first_token(self, ttft_seconds: float) -> None:
        self.ttft.observe(ttft_seconds)

    def on_next_token(self, inter_token_seconds: float) -> None:
        self.itl.observe(inter_token_seconds)

    def on_finished(self, timings: RequestTimings, finish_reason: str) -> None:
        self.e2e.observe(timings.e2e)
        self.queue.observe(timings.time_in_queue)
        self.prefill.observe(timings.time_in_model_prefill)
        self.decode.observe(timings.time_in_model_decode)
        self.inference.observe(timings.time_in_model_inference)
        if timings.completion_tokens > 1:
            self.tpot.observe(timings.time_in_model_decode / (timings.completion_tokens - 1))
        self.prompt_tokens.inc(timings.prompt_tokens)
        self.generation_tokens.inc(timings.completion_tokens)
        self._success.labels(**self._labels, finished_reason=finish_reason).inc()
