"""Prometheus metrics of one app, in its own registry (tests build many apps in one process).

Labels are bounded by construction: domains are known, validated names (an unknown domain is
refused before anything is counted), versions come from the stores directory, and reasons
are fixed strings. No client address or key is ever a label.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
SWAP_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """Every series the service exports; `exposition()` is the /metrics body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.latency = Histogram(
            "ragmt_translate_seconds",
            "Translation request latency, by domain and the store version it was served with",
            ["domain", "store_version"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.retrieval = Histogram(
            "ragmt_retrieval_seconds",
            "Neighbour retrieval time per request",
            ["domain"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "ragmt_queue_depth", "Texts waiting for a decoding batch", registry=r
        )
        self.batch_texts = Histogram(
            "ragmt_batch_texts",
            "Texts per shared decoding batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.rejections = Counter(
            "ragmt_rejections_total",
            "Requests refused before decoding, by reason",
            ["reason"],
            registry=r,
        )
        self.cache = Counter(
            "ragmt_cache_lookups_total", "Translation cache lookups", ["result"], registry=r
        )
        self.cache_hit_ratio = Gauge(
            "ragmt_cache_hit_ratio", "Cache hits / lookups since start", registry=r
        )
        self.swap_seconds = Histogram(
            "ragmt_store_swap_seconds",
            "Store activation time (load, validate, flip), by domain and outcome",
            ["domain", "outcome"],
            buckets=SWAP_BUCKETS,
            registry=r,
        )
        self.swap_failures = Counter(
            "ragmt_store_swap_failures_total",
            "Store activations that failed validation (the old version kept serving)",
            ["domain"],
            registry=r,
        )
        self.loaded_versions = Gauge(
            "ragmt_store_versions_loaded",
            "Store versions held in memory (active plus retired ones still leased)",
            ["domain"],
            registry=r,
        )
        self.jobs = Counter(
            "ragmt_store_jobs_total",
            "Store-build jobs finished, by outcome",
            ["outcome"],
            registry=r,
        )
        self.backend_errors = Counter(
            "ragmt_backend_errors_total",
            "Shared-state (Redis) operations that failed and were worked around, by operation",
            ["operation"],
            registry=r,
        )
        self._hits = 0
        self._lookups = 0

    def cache_lookup(self, hits: int, misses: int) -> None:
        """Count a request's cache lookups and refresh the hit ratio."""
        if hits:
            self.cache.labels("hit").inc(hits)
        if misses:
            self.cache.labels("miss").inc(misses)
        self._hits += hits
        self._lookups += hits + misses
        if self._lookups:
            self.cache_hit_ratio.set(self._hits / self._lookups)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
