"""The translation engine: loaded models by name and the one typed call that translates.

HTTP, the CLI and tests all go through `TranslationEngine.translate_batch`, so validation,
limits and decoding behave the same everywhere. No web framework is imported here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from models.artifacts import ArtifactError
from models.bundle import WEIGHTS_FILE, load_bundle
from models.translator import DecodeOptions, Translator
from service.errors import InvalidInput, NotFound, NotReady, UnsupportedLanguage

log = logging.getLogger("ragmt.service")

DEFAULT_ALIAS = "default"  # a request's model "default" (or none) means the default model
GENERAL_DOMAIN = "general"


@dataclass(frozen=True)
class Limits:
    max_texts: int = 64
    max_chars: int = 2000
    beam_size: int = 4
    max_beam_size: int = 8


@dataclass(frozen=True)
class TranslationRequest:
    texts: Sequence[str]
    source_lang: str = "en"
    target_lang: str = "de"
    domain: str | None = None
    model: str | None = None
    beam_size: int | None = None


@dataclass(frozen=True)
class TextResult:
    translation: str
    model: str
    domain: str


@dataclass(frozen=True)
class BatchResult:
    results: list[TextResult]
    total_ms: float
    decode_ms: float


@dataclass(frozen=True)
class LoadedModel:
    name: str
    translator: Translator
    manifest: dict[str, Any]
    path: Path
    # Retrieval stores (a later issue) add domains; until then only the general one exists.
    domains: tuple[str, ...] = field(default=(GENERAL_DOMAIN,))

    @property
    def weights_sha256(self) -> str:
        return self.manifest["files"][WEIGHTS_FILE]


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


class TranslationEngine:
    """Holds translators by model name; serialises decoding so requests don't share torch."""

    def __init__(self, limits: Limits, device: str = "cpu") -> None:
        self.limits = limits
        self.device = device
        self._models: dict[str, LoadedModel] = {}
        self.default_model: str | None = None
        self.not_ready_reason: str | None = "model not loaded yet"
        self._decode_lock = threading.Lock()

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
        )
        self._models[loaded.name] = loaded
        if self.default_model is None:
            self.default_model = loaded.name
            self.not_ready_reason = None
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
        if domain not in model.domains:
            raise NotFound(
                f"unknown domain; available: {', '.join(model.domains)}", code="unknown_domain"
            )
        self._check_texts(req.texts)
        beam = self.limits.beam_size if req.beam_size is None else req.beam_size
        if not isinstance(beam, int) or isinstance(beam, bool) or beam < 1:
            raise InvalidInput("beam_size must be a positive integer", field="beam_size")
        if beam > self.limits.max_beam_size:
            raise _over_limit("beam_size", "max_beam_size", self.limits)
        return model, domain, DecodeOptions(beam_size=beam)

    def _check_texts(self, texts: Sequence[str]) -> None:
        lim = self.limits
        if not texts:
            raise InvalidInput("texts must not be empty", field="texts")
        if len(texts) > lim.max_texts:
            raise _over_limit("texts", "max_texts", lim)
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise InvalidInput(f"texts.{i}: text must not be empty", field=f"texts.{i}")
            if len(text) > lim.max_chars:
                raise _over_limit(f"texts.{i}", "max_chars", lim)
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # e.g. a lone surrogate from a JSON "\ud800" escape
                raise InvalidInput(
                    f"texts.{i}: text is not valid Unicode", field=f"texts.{i}"
                ) from None

    def _decode(
        self, model: LoadedModel, texts: list[str], options: DecodeOptions
    ) -> tuple[list[str], float]:
        with self._decode_lock:  # one decode at a time: torch's threads are shared
            start = time.perf_counter()
            out = model.translator.translate(texts, options)
            return out, _ms(start)

    async def translate_batch(self, req: TranslationRequest) -> BatchResult:
        """Validate `req`, decode in a worker thread, return results in input order.

        Raises ServiceError subclasses (NotReady, NotFound, InvalidInput, ...).
        Synchronous callers (the CLI) run it with `anyio.run(engine.translate_batch, req)`.
        """
        start = time.perf_counter()
        model, domain, options = self._check(req)
        texts = list(req.texts)
        out, decode_ms = await anyio.to_thread.run_sync(self._decode, model, texts, options)
        results = [TextResult(t, model.name, domain) for t in out]
        return BatchResult(results=results, total_ms=_ms(start), decode_ms=decode_ms)
