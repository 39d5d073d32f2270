"""Finished translations shared between replicas (Redis) or kept in process, keyed by all that
determines them: a new store version or another option is a new key. A cache outage costs
speed, never a request."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import Any

from index_builder.retrieval.base import Neighbour
from models.translator import DecodeOptions
from service.metrics import Metrics
from service.shared import TranslationCache

log = logging.getLogger("ragmt.service")


def neighbour_json(n: Neighbour) -> list[Any]:
    """Plain JSON types (a shared cache stores JSON; numpy scalars would not encode)."""
    span = [int(x) for x in n.span] if n.span else None
    return [int(n.pair_id), n.source, n.target, float(n.score), span, n.matched, n.edit]


def neighbour_of(x: list[Any]) -> Neighbour:
    edit = x[6] if len(x) > 6 else None
    return Neighbour(x[0], x[1], x[2], x[3], tuple(x[4]) if x[4] else None, x[5], edit)


def _value_ok(v: Any) -> bool:
    """A shared cache may hold entries of another release: anything unexpected is a miss."""
    return (
        isinstance(v, dict)
        and isinstance(v.get("translation"), str)
        and isinstance(v.get("neighbours"), list)
        and all(isinstance(n, list) and len(n) in (6, 7) for n in v["neighbours"])
    )


class ResultCache:
    """get/set of finished translations; a disabled cache (ttl 0) misses every time."""

    def __init__(self, cache: TranslationCache | None, ttl_s: int, metrics: Metrics) -> None:
        self.cache = cache if ttl_s > 0 else None
        self.ttl_s = ttl_s
        self.metrics = metrics

    @property
    def enabled(self) -> bool:
        return self.cache is not None

    @staticmethod
    def key(
        weights_sha256: str,
        pair: tuple[str, str],
        store_version: str | None,
        domain: str,
        options: DecodeOptions,
        text: str,
        glossary_version: str | None = None,
    ) -> str:
        """Everything that determines a translation; a new store or glossary version is a new
        key (without a glossary, the key is what it was before glossaries existed)."""
        parts = [
            weights_sha256,
            store_version,
            domain,
            options.beam_size,
            options.length_penalty,
            options.split_sentences,
            pair[0],
            pair[1],
            options.neighbours_k,
            text,
        ]
        if glossary_version is not None:
            parts.append(glossary_version)
        blob = json.dumps(parts, ensure_ascii=False).encode("utf-8")
        return "t:" + hashlib.sha256(blob).hexdigest()

    async def get(self, keys: list[str]) -> list[dict[str, Any] | None]:
        if self.cache is None:
            return [None] * len(keys)
        try:
            values = await asyncio.gather(*(self.cache.get(k) for k in keys))
        except Exception as e:
            self.metrics.backend_errors.labels("cache_get").inc()
            log.warning("translation cache unavailable: %s", e)
            return [None] * len(keys)
        return [v if _value_ok(v) else None for v in values]

    async def set(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self.cache is None:
            return
        try:
            await asyncio.gather(*(self.cache.set(k, v, self.ttl_s) for k, v in items))
        except Exception as e:
            self.metrics.backend_errors.labels("cache_set").inc()
            log.warning("translation cache unavailable: %s", e)
