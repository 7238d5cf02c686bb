"""Prometheus metrics in base units, on a registry of the app's own (tests build many apps)."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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

    @classmethod
    def create(cls) -> Metrics:
        r = CollectorRegistry()
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
            queue_depth=Gauge("translator_queue_depth", "texts waiting or being decoded", registry=r),
            tokens=Counter("translator_tokens", "tokens read and generated", ["direction"], registry=r),
            rejections=Counter("translator_rejections", "requests refused", ["reason"], registry=r),
            model_info=Gauge(
                "translator_model_info",
                "loaded models",
                ["name", "source", "target", "family", "attention", "quantization", "provider"],
                registry=r,
            ),
        )

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
