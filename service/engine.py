"""The translation engine: the one typed call that translates a request, through the pipeline.

HTTP, the CLI and tests all go through `TranslationEngine.translate_batch`. It orchestrates,
and the jobs live apart: the served models and the route from a language pair to one
(`service.registry`), what a request may ask (`service.validation`), finished translations
(`service.result_cache`), and the translation path itself (`models.pipeline`: prepare, decode,
finish), with the micro-batcher between prepare and decode so concurrent requests share
decoding batches. A request takes a lease on its domain's active store version when admitted
and releases it after its last decoding step, so a hot swap never changes the store under a
request. No web framework is imported here.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
import torch

from index_builder.retrieval.base import Neighbour
from index_builder.retrieval.encoder import bundle_sha256
from index_builder.retrieval.serving import retrieve_with
from models import pipeline
from models.devices import resolve_device
from models.glossary import Glossary
from models.pipeline import Prepared
from models.quantize import CPU_ONLY
from models.segment import is_blank
from models.translator import DecodeOptions, Translation
from service.batching import DecodeBatcher
from service.domains import GENERAL_DOMAIN, DomainManager, Lease
from service.errors import NotFound, ServiceError, UnsupportedLanguage
from service.glossaries import GlossaryStore
from service.metrics import Metrics
from service.registry import DEFAULT_ALIAS, LoadedModel, ModelRegistry
from service.result_cache import ResultCache, neighbour_json, neighbour_of
from service.shared import TranslationCache
from service.validation import Limits, check_texts, request_options

__all__ = [
    "DEFAULT_ALIAS",
    "BatchKey",
    "BatchResult",
    "DomainNotReady",
    "Limits",
    "LoadedModel",
    "TextResult",
    "TranslationEngine",
    "TranslationRequest",
]

log = logging.getLogger("ragmt.service")


class DomainNotReady(ServiceError):
    status, code = 503, "domain_not_ready"


@dataclass(frozen=True)
class TranslationRequest:
    texts: Sequence[str]
    source_lang: str = "en"
    target_lang: str = "de"
    domain: str | None = None
    model: str | None = None
    beam_size: int | None = None
    return_neighbours: bool = False
    format: str = "text"  # "html": each text an HTML fragment or page, its tags kept
    glossary: bool = True  # enforce the domain's glossary (when it has one for the pair)


@dataclass(frozen=True)
class TextResult:
    translation: str
    model: str
    domain: str
    store_version: str | None = None  # None: served without a store (general, none built)
    neighbours: list[Neighbour] | None = None  # only when asked for
    gate: float | None = None  # retrieval-memory models that report how much they used it
    cached: bool = False
    glossary_version: str | None = None  # the glossary enforced; None: none
    edit_seq: int | None = None  # the last live edit of the domain's memory it saw
    edits: dict[int, Any] | None = None  # the edits that added neighbours, by number


@dataclass(frozen=True)
class BatchResult:
    results: list[TextResult]
    total_ms: float
    decode_ms: float
    retrieval_ms: float = 0.0
    cache_hits: int = 0


@dataclass(frozen=True)
class BatchKey:
    """What decoding batches are grouped by: sentences of one batch share model and options."""

    model: str
    options: DecodeOptions = field(default_factory=DecodeOptions)
    pair: tuple[str, str] | None = None  # one of the model's pairs; None: its first


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


class TranslationEngine:
    """Routes, validates, retrieves, caches and decodes requests through the pipeline."""

    def __init__(
        self,
        limits: Limits,
        device: str = "cpu",
        domains: DomainManager | None = None,
        cache: TranslationCache | None = None,
        cache_ttl_s: int = 0,
        metrics: Metrics | None = None,
        quantize: str = "auto",
    ) -> None:
        self.limits = limits
        self.device = str(resolve_device(device))  # ValueError: unusable device, named
        self.domains = domains
        self.metrics = metrics if metrics is not None else Metrics()
        self.results = ResultCache(cache, cache_ttl_s, self.metrics)
        if quantize in CPU_ONLY and torch.device(self.device).type != "cpu":
            raise ValueError(f"quantize={quantize} is for CPU decoding, not {self.device}")
        self.registry = ModelRegistry(self.device, quantize)
        self._decode_lock = threading.Lock()  # torch's threads are shared: one decode at a time
        self._batcher: DecodeBatcher | None = None
        self._batcher_loop: asyncio.AbstractEventLoop | None = None
        self._glossaries: GlossaryStore | None = None

    @property
    def glossaries(self) -> GlossaryStore | None:
        """The domains' glossaries, kept beside their stores (None until the stores are)."""
        if self.domains is None:
            return None
        if self._glossaries is None or self._glossaries.root != self.domains.stores_dir:
            self._glossaries = GlossaryStore(self.domains.stores_dir)
        return self._glossaries

    async def _glossary(self, domain: str, pair: tuple[str, str]) -> Glossary | None:
        """The domain's glossary when it has terms for `pair`."""
        store = self.glossaries
        found = await store.current(domain) if store is not None else None
        if found is None or (found.source_lang, found.target_lang) != pair:
            return None
        return found

    @property
    def gpu_index(self) -> int | None:
        """The CUDA device index the models run on; None on the CPU."""
        device = torch.device(self.device)
        return None if device.type != "cuda" else (device.index or 0)

    @property
    def ready(self) -> bool:
        return self.registry.ready

    @property
    def not_ready_reason(self) -> str | None:
        return self.registry.not_ready_reason

    @property
    def models(self) -> list[LoadedModel]:
        return self.registry.models

    def load_models(self, paths: list[Path]) -> None:
        """Load every bundle; one that fails is logged and skipped, the rest served."""
        for loaded in self.registry.load_all(paths):
            self._register(loaded)

    def _register(self, loaded: LoadedModel) -> LoadedModel:
        if self.domains is not None:  # stores are checked against the models' languages
            self.domains.languages.update(loaded.pairs)
            if loaded.bundle is not None:
                self.domains.bundles[bundle_sha256(loaded.manifest)] = loaded.bundle
        return loaded

    def default_languages(self) -> tuple[str, str]:
        """(source, target) of the first served model; NotReady before one is loaded."""
        return self.registry.default_pair()

    def check_texts(self, texts: Sequence[str]) -> None:
        check_texts(texts, self.limits)

    # --- micro-batching -------------------------------------------------------------------

    def start_batching(self, max_queued: int, max_batch: int, wait_s: float) -> asyncio.Task:
        """Start the shared decoding queue on the running loop; returns its consumer task."""
        self._batcher = DecodeBatcher(self._decode_key, self.metrics, max_queued, max_batch, wait_s)
        self._batcher_loop = asyncio.get_running_loop()
        return asyncio.create_task(self._batcher.run())

    @property
    def queued(self) -> int:
        return self._batcher.queued if self._batcher is not None else 0

    def _on_loop(self) -> bool:
        return self._batcher is not None and asyncio.get_running_loop() is self._batcher_loop

    def _decode_key(
        self, key: BatchKey, sentences: list[str], pairs: list | None, sources: list | None
    ) -> list[Translation]:
        """The pipeline's decode step (blocking, one decode at a time)."""
        model = self.registry.get(key.model)
        with self._decode_lock:
            translator = model.translator.for_pair(*key.pair) if key.pair else model.translator
            return pipeline.decode(translator, sentences, key.options, pairs, sources)

    async def _decode(
        self, model: LoadedModel, options: DecodeOptions, prepared: Prepared, pair: tuple[str, str]
    ) -> list[Translation]:
        """Through the shared batches when called on the app's loop, else directly (CLI)."""
        key = BatchKey(model.name, options, pair)
        args = (prepared.sentences, prepared.pairs, prepared.encodings)
        if self._on_loop():
            assert self._batcher is not None
            return await self._batcher.submit(key, *args, weight=len(prepared.texts))
        return await anyio.to_thread.run_sync(self._decode_key, key, *args)

    # --- admission ------------------------------------------------------------------------

    def _check(self, req: TranslationRequest) -> tuple[LoadedModel, str, DecodeOptions]:
        model = self.registry.route(req.source_lang, req.target_lang, req.model)
        domain = req.domain if req.domain is not None else GENERAL_DOMAIN
        if self.domains is not None:
            self.domains.state(domain)  # 404 unknown_domain, naming the known ones
        elif domain != GENERAL_DOMAIN:
            raise NotFound(f"unknown domain; available: {GENERAL_DOMAIN}", code="unknown_domain")
        check_texts(req.texts, self.limits)
        return model, domain, request_options(self.limits, req.beam_size, req.format)

    def _lease(self, domain: str, pair: tuple[str, str]) -> Lease | None:
        """The domain's active store for `pair`. A customer domain's store of another pair is
        refused, saying which pair it holds; the general domain, every request's fallback,
        is then translated without retrieval (its memory is English->German: a
        German->English request has nothing to look up in it)."""
        if self.domains is None:
            return None
        lease = self.domains.lease(domain)
        if lease is None and domain != GENERAL_DOMAIN:
            raise DomainNotReady(f"domain {domain} has no active store version loaded")
        if lease is not None:
            langs = lease.store.manifest.get("languages") or {}
            store_pair = (langs.get("source"), langs.get("target"))
            if store_pair != pair:
                lease.release()
                if domain == GENERAL_DOMAIN:
                    return None
                raise UnsupportedLanguage(
                    f"domain {domain}'s memory is {store_pair[0]}->{store_pair[1]}, "
                    f"not {pair[0]}->{pair[1]}",
                    supported={"source_lang": store_pair[0], "target_lang": store_pair[1]},
                )
        return lease

    def _edits_of(self, domain: str, shown: list[Neighbour] | None) -> dict[int, Any] | None:
        """The live edits that added the neighbours shown (their provenance)."""
        seqs = {n.edit for n in shown or () if n.edit is not None}
        if not seqs or self.domains is None:
            return None
        found = {s: self.domains.edits.edit_of(domain, s) for s in seqs}
        return {s: e for s, e in found.items() if e is not None}

    # --- the call -------------------------------------------------------------------------

    async def translate_batch(self, req: TranslationRequest) -> BatchResult:
        """Validate `req`, route it, retrieve, decode (shared batches), return results in
        input order.

        Raises ServiceError subclasses (NotReady, NotFound, InvalidInput, Overloaded, ...).
        Synchronous callers (the CLI) run it with `anyio.run(engine.translate_batch, req)`.
        """
        start = time.perf_counter()
        model, domain, options = self._check(req)
        pair = (req.source_lang, req.target_lang)
        translator = model.translator.for_pair(*pair)  # the routed pair is one of its own
        texts = list(req.texts)
        glossary = await self._glossary(domain, pair) if req.glossary else None
        glossary_version = glossary.version if glossary is not None else None
        lease = self._lease(domain, pair)  # held until the last decoding step below
        retrieval_ms = decode_ms = 0.0
        hits = 0
        try:
            version = lease.version if lease is not None else None
            edit_seq = lease.edits if lease is not None and lease.edits else None
            memory = f"{version}+{edit_seq}" if edit_seq else version  # an edit: a new key
            keys = [
                ResultCache.key(
                    model.decoder_id, pair, memory, domain, options, t, glossary_version
                )
                for t in texts
            ]
            blank = {i for i, text in enumerate(texts) if is_blank(text)}
            found = await self.results.get(keys)
            for i in blank:  # kept as a blank translation, as `ragmt translate` does
                found[i] = {"translation": "", "gate": None, "neighbours": []}
            todo = [i for i, hit in enumerate(found) if hit is None]
            hits = len(texts) - len(todo) - len(blank)
            if self.results.enabled:
                self.metrics.cache_lookup(hits, len(todo))
            if todo and self._on_loop():
                assert self._batcher is not None
                self._batcher.check_room(len(todo))  # a full queue refuses before retrieval
            if todo:
                retrieve = None
                if lease is not None:  # a dense store's search runs torch: one at a time
                    lock = self._decode_lock if lease.store.uses_model else None
                    retrieve = retrieve_with(translator, lease.retriever, lock)
                prepared = await anyio.to_thread.run_sync(
                    pipeline.prepare,
                    translator,
                    [texts[i] for i in todo],
                    options,
                    retrieve,
                    True,  # provenance: the neighbours are returned and cached
                    glossary,
                )
                retrieval_ms = prepared.retrieval_ms
                if prepared.hits is not None:
                    self.metrics.retrieval.labels(domain).observe(retrieval_ms / 1000)
                t0 = time.perf_counter()
                decoded = await self._decode(model, options, prepared, pair)
                decode_ms = _ms(t0)
                fresh = []
                for i, out in zip(todo, pipeline.finish(prepared, decoded), strict=True):
                    value = {
                        "translation": out.text,
                        "gate": out.gate,
                        "neighbours": [neighbour_json(n) for n in out.neighbours],
                    }
                    found[i] = value
                    fresh.append((keys[i], value))
                await self.results.set(fresh)
        finally:
            if lease is not None:
                lease.release()
        shown = [
            [neighbour_of(x) for x in value["neighbours"]]
            if value is not None and req.return_neighbours
            else None
            for value in found
        ]
        results = [
            TextResult(
                translation=value["translation"],
                model=model.name,
                domain=domain,
                store_version=version,
                neighbours=shown[i],
                gate=value.get("gate"),
                cached=i not in todo and i not in blank,
                glossary_version=glossary_version,
                edit_seq=edit_seq,
                edits=self._edits_of(domain, shown[i]),
            )
            for i, value in enumerate(found)
            if value is not None
        ]
        total_ms = _ms(start)
        self.metrics.latency.labels(domain, version or "none").observe(total_ms / 1000)
        return BatchResult(
            results=results,
            total_ms=total_ms,
            decode_ms=decode_ms,
            retrieval_ms=retrieval_ms,
            cache_hits=hits,
        )
