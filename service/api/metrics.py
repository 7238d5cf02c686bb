"""Prometheus metrics in base units, on a registry of the app's own (tests build many apps).

Under `serve` with several workers (cli/workers.py) every worker's values live in files in
PROMETHEUS_MULTIPROC_DIR, and /metrics adds them up, whichever worker answers: counters and
histograms sum, the queue depth sums over live workers (each refreshes its own after every
request), model info is the workers' maximum, batch invariance their minimum.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from service.engine.catalog import Catalog

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass
class Metrics:
    registry: CollectorRegistry
    requests: Counter
    inference: Histogram
    batch_size: Histogram
    queue_depth: Gauge
    tokens: Counter
    rejections: Counter
    model_info: Gauge
    batch_invariant: Gauge
    shared: bool = False  # several workers: values in PROMETHEUS_MULTIPROC_DIR's files
    depth: Callable[[], int] = field(default=lambda: 0)  # the scheduler's, once the models are loaded

    @classmethod
    def create(cls) -> Metrics:
        r = CollectorRegistry()
        shared = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        return cls(
            registry=r,
            requests=Counter("translator_requests", "HTTP requests", ["route", "status"], registry=r),
            inference=Histogram(
                "translator_inference_duration_seconds",
                "time per stage",
                ["stage"],
                buckets=LATENCY_BUCKETS,
                registry=r,
            ),
            batch_size=Histogram("translator_batch_size", "texts decoded together", buckets=BATCH_BUCKETS, registry=r),
            queue_depth=Gauge(
                "translator_queue_depth", "texts waiting or being decoded", registry=r, multiprocess_mode="livesum"
            ),
            tokens=Counter("translator_tokens", "tokens read and generated", ["direction"], registry=r),
            rejections=Counter("translator_rejections", "requests refused", ["reason"], registry=r),
            model_info=Gauge(
                "translator_model_info",
                "loaded models",
                ["name", "source", "target", "family", "attention", "quantization", "provider"],
                registry=r,
                multiprocess_mode="max",
            ),
            batch_invariant=Gauge(
                "translator_batch_invariant",
                "1 when the startup check found a model's translations the same alone and batched on this CPU",
                ["name"],
                registry=r,
                multiprocess_mode="min",
            ),
            shared=shared,
        )

    def after_request(self) -> None:
        if self.shared:  # another worker may answer the next scrape: keep this one's depth current
            self.queue_depth.set(self.depth())

    def exposition(self) -> bytes:
        """The text format of every value: this app's, or every worker's added up."""
        self.queue_depth.set(self.depth())
        if not self.shared:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)

    def describe_models(self, catalog: Catalog) -> None:
        for name, translator in catalog.models.items():
            m = translator.manifest
            self.model_info.labels(
                name,
                m.source_lang,
                m.target_lang,
                m.architecture.family,
                m.architecture.attention,
                m.quantization.mode,
                catalog.provider,
            ).set(1)
