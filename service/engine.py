"""The translation engine: loaded models by name and the one typed call that translates.

HTTP, the CLI and tests all go through `TranslationEngine.translate_batch`, so validation,
limits, retrieval, caching and decoding behave the same everywhere. A request takes a lease on
its domain's active store version when admitted and releases it after its last decoding step,
so a hot swap never changes the store under a request. No web framework is imported here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
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
from index_builder.retrieval.serving import search_for
from models.artifacts import ArtifactError
from models.bundle import WEIGHTS_FILE, LoadedBundle, load_bundle
from models.devices import resolve_device
from models.segment import is_blank, segment
from models.translator import DecodeOptions, Translator
from service.batching import DecodeBatcher
from service.domains import GENERAL_DOMAIN, DomainManager, Lease
from service.errors import InvalidInput, NotFound, NotReady, ServiceError, UnsupportedLanguage
from service.metrics import Metrics
from service.shared import TranslationCache

log = logging.getLogger("ragmt.service")

DEFAULT_ALIAS = "default"  # a request's model "default" (or none) means the default model

Neighbours = list[list[tuple[str, str]]] | None  # per text, retrieved (source, target) pairs
Decoded = list[tuple[str, float | None]]  # per text, (translation, memory gate or None)
Sources = list[torch.Tensor | None] | None  # per text, its encoding made by dense retrieval


class DomainNotReady(ServiceError):
    status, code = 503, "domain_not_ready"


@dataclass(frozen=True)
class Limits:
    max_texts: int = 64
    max_chars: int = 2000
    beam_size: int = 4
    max_beam_size: int = 8
    length_penalty: float = DecodeOptions.length_penalty  # one default, the library's
    split_sentences: bool = True  # a text of several sentences is decoded sentence by sentence


@dataclass(frozen=True)
class TranslationRequest:
    texts: Sequence[str]
    source_lang: str = "en"
    target_lang: str = "de"
    domain: str | None = None
    model: str | None = None
    beam_size: int | None = None
    return_neighbours: bool = False


@dataclass(frozen=True)
class TextResult:
    translation: str
    model: str
    domain: str
    store_version: str | None = None  # None: served without a store (general, none built)
    neighbours: list[Neighbour] | None = None  # only when asked for
    gate: float | None = None  # retrieval-memory models that report how much they used it
    cached: bool = False


@dataclass(frozen=True)
class BatchResult:
    results: list[TextResult]
    total_ms: float
    decode_ms: float
    retrieval_ms: float = 0.0
    cache_hits: int = 0


@dataclass(frozen=True)
class LoadedModel:
    name: str
    translator: Translator
    manifest: dict[str, Any]
    path: Path
    bundle: LoadedBundle | None = None  # what dense stores encode queries with

    @property
    def weights_sha256(self) -> str:
        return self.manifest["files"][WEIGHTS_FILE]

    @property
    def uses_memory(self) -> bool:
        """Whether decoding reads retrieved pairs (semi-parametric architectures)."""
        return bool(getattr(self.translator, "uses_memory", False))


@dataclass(frozen=True)
class BatchKey:
    """What decoding batches are grouped by: texts of one batch share model and options."""

    model: str
    options: DecodeOptions = field(default_factory=DecodeOptions)


def _over_limit(field: str, limit: str, limits: Limits) -> InvalidInput:
    """e.g. "texts: exceeds max_texts=64", naming the field and the limit."""
    value = getattr(limits, limit)
    return InvalidInput(
        f"{field}: exceeds {limit}={value}",
        code="limit_exceeded",
        field=field,
        limit=limit,
        max=value,
    )


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _neighbour_json(n: Neighbour) -> list[Any]:
    """Plain JSON types (a shared cache stores JSON; numpy scalars would not encode)."""
    span = [int(x) for x in n.span] if n.span else None
    return [int(n.pair_id), n.source, n.target, float(n.score), span, n.matched]


def _neighbour_of(x: list[Any]) -> Neighbour:
    return Neighbour(x[0], x[1], x[2], x[3], tuple(x[4]) if x[4] else None, x[5])


def _cached_value_ok(v: Any) -> bool:
    """A shared cache may hold entries of another release: anything unexpected is a miss."""
    return (
        isinstance(v, dict)
        and isinstance(v.get("translation"), str)
        and isinstance(v.get("neighbours"), list)
        and all(isinstance(n, list) and len(n) == 6 for n in v["neighbours"])
    )


class TranslationEngine:
    """Holds translators by model name; validates, retrieves, caches and decodes requests."""

    def __init__(
        self,
        limits: Limits,
        device: str = "cpu",
        domains: DomainManager | None = None,
        cache: TranslationCache | None = None,
        cache_ttl_s: int = 0,
        metrics: Metrics | None = None,
        neighbours_k: int = 5,
    ) -> None:
        self.limits = limits
        self.device = str(resolve_device(device))  # ValueError: unusable device, named
        self.domains = domains
        self.cache = cache if cache_ttl_s > 0 else None
        self.cache_ttl_s = cache_ttl_s
        self.metrics = metrics if metrics is not None else Metrics()
        self.neighbours_k = neighbours_k
        self._models: dict[str, LoadedModel] = {}
        self.default_model: str | None = None
        self.not_ready_reason: str | None = "model not loaded yet"
        self._decode_lock = threading.Lock()
        self._batcher: DecodeBatcher | None = None
        self._batcher_loop: asyncio.AbstractEventLoop | None = None

    @property
    def gpu_index(self) -> int | None:
        """The CUDA device index the models run on; None on the CPU."""
        device = torch.device(self.device)
        return None if device.type != "cuda" else (device.index or 0)

    @property
    def ready(self) -> bool:
        return self.default_model is not None

    @property
    def models(self) -> list[LoadedModel]:
        return list(self._models.values())

    def load(self, path: Path, name: str | None = None) -> LoadedModel:
        """Verify and load a bundle (slow; call from a thread). Raises ArtifactError."""
        path = Path(path)
        bundle = load_bundle(path, device=self.device)
        loaded = LoadedModel(
            name=name or path.name or DEFAULT_ALIAS,
            translator=Translator.from_loaded(bundle),
            manifest=bundle.manifest,
            path=path,
            bundle=bundle,
        )
        self._models[loaded.name] = loaded
        if self.default_model is None:
            self.default_model = loaded.name
            self.not_ready_reason = None
        if self.domains is not None:  # stores are checked against the models' languages
            tr = loaded.translator
            self.domains.languages.add((tr.source_lang, tr.target_lang))
            self.domains.bundles[bundle_sha256(bundle.manifest)] = bundle
        return loaded

    def load_default(self, path: Path) -> None:
        """Load the default bundle; on failure stay up but not ready, with the reason recorded."""
        try:
            loaded = self.load(path)
        except ArtifactError as e:  # expected problems: missing, tampered, incompatible
            # Clients see the reason: name the bundle, not where it lives on the server.
            self.not_ready_reason = f"model bundle unusable: {e}".replace(str(path), path.name)
            log.error("model bundle %s unusable: %s", path, e)
        except Exception as e:
            self.not_ready_reason = f"model bundle failed to load ({type(e).__name__})"
            log.exception("model bundle %s failed to load", path)
        else:
            log.info("loaded model %s from %s", loaded.name, path)

    # --- micro-batching -------------------------------------------------------------------

    def start_batching(self, max_queued: int, max_batch: int, wait_s: float) -> asyncio.Task:
        """Start the shared decoding queue on the running loop; returns its consumer task."""
        self._batcher = DecodeBatcher(self._decode_key, self.metrics, max_queued, max_batch, wait_s)
        self._batcher_loop = asyncio.get_running_loop()
        return asyncio.create_task(self._batcher.run())

    @property
    def queued(self) -> int:
        return self._batcher.queued if self._batcher is not None else 0

    def _decode_key(
        self, key: BatchKey, texts: list[str], neighbours: Neighbours, sources: Sources
    ) -> Decoded:
        return self._decode(self._models[key.model], texts, key.options, neighbours, sources)

    def _decode(
        self,
        model: LoadedModel,
        texts: list[str],
        options: DecodeOptions,
        neighbours: Neighbours,
        sources: Sources = None,
    ) -> Decoded:
        """(translation, memory gate or None) per text; blocking, one decode at a time."""
        with self._decode_lock:  # torch's threads are shared: one decode at a time
            if model.uses_memory and neighbours is not None:
                out = model.translator.translate_detailed(
                    texts, options, neighbours, gates=True, sources=sources
                )
                return [(t.text, t.gate) for t in out]
            out = model.translator.translate_detailed(texts, options, sources=sources)
            return [(t.text, None) for t in out]

    async def _decode_async(
        self,
        model: LoadedModel,
        texts: list[str],
        options: DecodeOptions,
        neighbours: Neighbours,
        sources: Sources = None,
    ) -> Decoded:
        """Through the shared batches when called on the app's loop, else directly (CLI)."""
        batcher = self._batcher
        if batcher is not None and asyncio.get_running_loop() is self._batcher_loop:
            key = BatchKey(model.name, options)
            return await batcher.submit(key, texts, neighbours, sources)
        return await anyio.to_thread.run_sync(
            self._decode, model, texts, options, neighbours, sources
        )

    def _search(
        self, lease: Lease, model: LoadedModel, queries: list[str]
    ) -> tuple[list[list[Neighbour]], Sources]:
        """Retrieve (blocking): the neighbours, and the queries' encodings when the store's
        vectors come from this model's own encoder — then the query is encoded once, for
        retrieval and decoding alike. A dense store's encoder shares torch with decoding."""
        if not lease.store.uses_model:
            return lease.retriever.search(queries, self.neighbours_k), None
        with self._decode_lock:
            return search_for(model.translator, lease.retriever, queries, self.neighbours_k)

    # --- validation -----------------------------------------------------------------------

    def default_languages(self) -> tuple[str, str]:
        """(source, target) of the default model; NotReady before it is loaded."""
        tr = self._model(None).translator
        return tr.source_lang, tr.target_lang

    def _model(self, name: str | None) -> LoadedModel:
        if self.default_model is None:
            raise NotReady(self.not_ready_reason or "not ready")
        if name is None or name == DEFAULT_ALIAS:
            return self._models[self.default_model]
        if name not in self._models:
            known = ", ".join(sorted(self._models))
            raise NotFound(f"unknown model; available: {known}", code="unknown_model")
        return self._models[name]

    def _check(self, req: TranslationRequest) -> tuple[LoadedModel, str, DecodeOptions]:
        model = self._model(req.model)
        tr = model.translator
        if (req.source_lang, req.target_lang) != (tr.source_lang, tr.target_lang):
            raise UnsupportedLanguage(
                f"model {model.name} translates {tr.source_lang}->{tr.target_lang} only",
                supported={"source_lang": tr.source_lang, "target_lang": tr.target_lang},
            )
        domain = req.domain if req.domain is not None else GENERAL_DOMAIN
        if self.domains is not None:
            self.domains.state(domain)  # 404 unknown_domain, naming the known ones
        elif domain != GENERAL_DOMAIN:
            raise NotFound(f"unknown domain; available: {GENERAL_DOMAIN}", code="unknown_domain")
        self.check_texts(req.texts)
        beam = self.limits.beam_size if req.beam_size is None else req.beam_size
        if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
            raise InvalidInput("beam_size must be a positive integer", field="beam_size")
        if beam > self.limits.max_beam_size:
            raise _over_limit("beam_size", "max_beam_size", self.limits)
        return (
            model,
            domain,
            DecodeOptions(beam_size=beam, length_penalty=self.limits.length_penalty),
        )

    def check_texts(self, texts: Sequence[str]) -> None:
        """The limits on a batch of texts (count, length, valid Unicode); 422 when over."""
        lim = self.limits
        if not texts:
            raise InvalidInput("texts must not be empty", field="texts")
        if len(texts) > lim.max_texts:
            raise _over_limit("texts", "max_texts", lim)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidInput(f"texts.{i}: must be a string", field=f"texts.{i}")
            if len(text) > lim.max_chars:
                raise _over_limit(f"texts.{i}", "max_chars", lim)
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # e.g. a lone surrogate from a JSON "\ud800" escape
                raise InvalidInput(
                    f"texts.{i}: text is not valid Unicode", field=f"texts.{i}"
                ) from None

    def _lease(self, domain: str) -> Lease | None:
        if self.domains is None:
            return None
        lease = self.domains.lease(domain)
        if lease is None and domain != GENERAL_DOMAIN:
            raise DomainNotReady(f"domain {domain} has no active store version loaded")
        return lease

    # --- caching --------------------------------------------------------------------------

    def cache_key(
        self,
        model: LoadedModel,
        store_version: str | None,
        domain: str,
        options: DecodeOptions,
        text: str,
    ) -> str:
        """Everything that determines a translation; a new store version is a new key."""
        tr = model.translator
        parts = [
            model.weights_sha256,
            store_version,
            domain,
            options.beam_size,
            options.length_penalty,
            self.limits.split_sentences,
            tr.source_lang,
            tr.target_lang,
            self.neighbours_k,
            text,
        ]
        blob = json.dumps(parts, ensure_ascii=False).encode("utf-8")
        return "t:" + hashlib.sha256(blob).hexdigest()

    async def _cache_get(self, keys: list[str]) -> list[dict[str, Any] | None]:
        if self.cache is None:
            return [None] * len(keys)
        try:
            values = await asyncio.gather(*(self.cache.get(k) for k in keys))
        except Exception as e:  # a cache outage costs speed, never a request
            self.metrics.backend_errors.labels("cache_get").inc()
            log.warning("translation cache unavailable: %s", e)
            return [None] * len(keys)
        return [v if _cached_value_ok(v) else None for v in values]

    async def _cache_set(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        if self.cache is None:
            return
        try:
            await asyncio.gather(*(self.cache.set(k, v, self.cache_ttl_s) for k, v in items))
        except Exception as e:
            self.metrics.backend_errors.labels("cache_set").inc()
            log.warning("translation cache unavailable: %s", e)

    # --- the call -------------------------------------------------------------------------

    async def translate_batch(self, req: TranslationRequest) -> BatchResult:
        """Validate `req`, retrieve, decode (shared batches), return results in input order.

        Raises ServiceError subclasses (NotReady, NotFound, InvalidInput, Overloaded, ...).
        Synchronous callers (the CLI) run it with `anyio.run(engine.translate_batch, req)`.
        """
        start = time.perf_counter()
        model, domain, options = self._check(req)
        texts = list(req.texts)
        blank = {i for i, text in enumerate(texts) if is_blank(text)}
        lease = self._lease(domain)  # held until the last decoding step below
        try:
            version = lease.version if lease is not None else None
            keys = [self.cache_key(model, version, domain, options, t) for t in texts]
            found = await self._cache_get(keys)
            for i in blank:  # kept as a blank translation, as `ragmt translate` does
                found[i] = {"translation": "", "gate": None, "neighbours": []}
            todo = [i for i, hit in enumerate(found) if hit is None]
            if self.cache is not None:
                self.metrics.cache_lookup(len(texts) - len(todo) - len(blank), len(todo))
            neighbours: dict[int, list[Neighbour]] = {}
            sources: Sources = None
            retrieval_ms = decode_ms = 0.0
            batcher = self._batcher
            if todo and batcher is not None and asyncio.get_running_loop() is self._batcher_loop:
                batcher.check_room(len(todo))  # a full queue refuses before any retrieval
            # each text's sentences are retrieved for and decoded one by one, then joined
            seg = segment(
                [texts[i] for i in todo],
                self.limits.split_sentences,
                model.translator.source_lang,
            )
            hits: list[list[Neighbour]] = []
            if lease is not None and todo:
                t0 = time.perf_counter()
                hits, sources = await anyio.to_thread.run_sync(
                    self._search, lease, model, seg.segments
                )
                neighbours = dict(zip(todo, seg.gather(hits), strict=True))
                retrieval_ms = _ms(t0)
                self.metrics.retrieval.labels(domain).observe(retrieval_ms / 1000)
            if todo:
                t0 = time.perf_counter()
                pairs = None
                if lease is not None:
                    pairs = [[(n.source, n.target) for n in nbs] for nbs in hits]
                decoded = await self._decode_async(model, seg.segments, options, pairs, sources)
                texts_out = seg.join([t for t, _ in decoded])
                out = zip(texts_out, seg.mean([g for _, g in decoded]), strict=True)
                decode_ms = _ms(t0)
                fresh = []
                for i, (translation, gate) in zip(todo, out, strict=True):
                    value = {
                        "translation": translation,
                        "gate": gate,
                        "neighbours": [_neighbour_json(n) for n in neighbours.get(i, [])],
                    }
                    found[i] = value
                    fresh.append((keys[i], value))
                await self._cache_set(fresh)
        finally:
            if lease is not None:
                lease.release()
        results = [
            TextResult(
                translation=value["translation"],
                model=model.name,
                domain=domain,
                store_version=version,
                neighbours=[_neighbour_of(x) for x in value["neighbours"]]
                if req.return_neighbours
                else None,
                gate=value.get("gate"),
                cached=i not in todo and i not in blank,
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
            cache_hits=len(texts) - len(todo) - len(blank),
        )
