"""The served models: loaded bundles by name, and the route from a language pair to a model.

The service serves every bundle it is given (the configured model, or the committed ones, and
every bundle in a models directory). A request names its pair and, optionally, a model; the
pair's default model is the first loaded that translates it. What a model translates and how it
decodes comes from its bundle's card (`models.bundle.model_card`), never from its name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.artifacts import ArtifactError
from models.bundle import WEIGHTS_FILE, LoadedBundle, ModelCard, load_bundle
from models.quantize import resolve
from models.translator import Translator
from service.errors import NotFound, NotReady, UnsupportedLanguage

log = logging.getLogger("ragmt.service")

DEFAULT_ALIAS = "default"  # a request's model "default" (or none) means the pair's default

Pair = tuple[str, str]


@dataclass(frozen=True)
class LoadedModel:
    name: str
    translator: Translator
    manifest: dict[str, Any]
    path: Path
    bundle: LoadedBundle | None = None  # what dense stores encode queries with
    # how it decodes: none, int8, int8-rows, ort, ort-int8, native-int8 (models.quantize)
    quantize: str = "none"
    int8_weights: str | None = None  # ort-int8's weight type on this CPU: s8, s7 or u8
    native_isa: str | None = None  # native-int8: its products' kernels (avx512-vnni, avx2, ...)
    native_version: str | None = None  # native-int8: its library's source digest

    @property
    def card(self) -> ModelCard:
        assert self.translator.card is not None  # loaded from a bundle, so it has one
        return self.translator.card

    @property
    def pairs(self) -> tuple[Pair, ...]:
        return self.card.pairs

    @property
    def weights_sha256(self) -> str:
        return self.manifest["files"][WEIGHTS_FILE]

    @property
    def decoder_id(self) -> str:
        """What its outputs depend on besides the input: the weights, and how they decode
        (a translation cache shared by replicas keys on it; replicas on CPUs that quantize to
        different int8 weight types translate a little differently, and so do two versions of
        the native library)."""
        how = "" if self.quantize == "none" else f"+{self.quantize}"
        parts = [p for p in (self.int8_weights, self.native_isa, self.native_version) if p]
        return self.weights_sha256 + how + "".join(f"+{p}" for p in parts)

    @property
    def uses_memory(self) -> bool:
        """Whether decoding reads retrieved pairs (the card says it reads sentence pairs)."""
        return self.translator.uses_memory


def bundle_dirs(models_dir: Path | None) -> list[Path]:
    """The bundle directories under `models_dir` (those with a manifest), by name."""
    if models_dir is None or not models_dir.is_dir():
        return []
    return sorted(p for p in models_dir.iterdir() if (p / "manifest.json").is_file())


class ModelRegistry:
    """Loaded models by name; a default per language pair; routing with clear refusals."""

    def __init__(self, device: str = "cpu", quantize: str = "none") -> None:
        self.device = device
        self.quantize = quantize  # for every model loaded (models.quantize.resolve)
        self._models: dict[str, LoadedModel] = {}
        self._defaults: dict[Pair, str] = {}
        self.failed: dict[str, str] = {}  # bundle name -> why it is not served
        self.not_ready_reason: str | None = "model not loaded yet"

    @property
    def models(self) -> list[LoadedModel]:
        return list(self._models.values())

    @property
    def ready(self) -> bool:
        return bool(self._models)

    @property
    def defaults(self) -> dict[Pair, str]:
        """Each served pair and the name of its default model."""
        return dict(self._defaults)

    def load(self, path: Path, name: str | None = None) -> LoadedModel:
        """Verify and load a bundle (slow; call from a thread). Raises ArtifactError."""
        path = Path(path)
        name = name or path.name or DEFAULT_ALIAS
        if name in self._models:
            raise ArtifactError(f"{path}: a model named {name!r} is served already")
        bundle = load_bundle(path, device=self.device)
        quantize = resolve(self.quantize, self.device, bundle.model)
        translator = Translator.from_loaded(bundle, quantize)
        weights = getattr(translator.model, "int8_weights", None)  # what its graphs were built with
        isa = getattr(translator.model, "native_isa", None)
        native = getattr(translator.model, "native_version", None)
        loaded = LoadedModel(
            name, translator, bundle.manifest, path, bundle, quantize, weights, isa, native
        )
        self._models[name] = loaded
        for pair in loaded.pairs:
            self._defaults.setdefault(pair, name)
        self.not_ready_reason = None
        return loaded

    def load_all(self, paths: list[Path]) -> list[LoadedModel]:
        """Load each bundle; one that fails is logged, listed in `failed` and skipped, so one
        bad bundle never takes the others down. The first one's failure is the reason the
        service gives while nothing is served."""
        loaded = []
        for path in paths:
            try:
                loaded.append(self.load(path))
            except ArtifactError as e:  # expected problems: missing, tampered, incompatible
                # Clients see the reason: name the bundle, not where it lives on the server.
                reason = f"model bundle unusable: {e}".replace(str(path), path.name)
                self._refuse(path, reason)
                log.error("model bundle %s unusable: %s", path, e)
            except Exception as e:
                self._refuse(path, f"model bundle failed to load ({type(e).__name__})")
                log.exception("model bundle %s failed to load", path)
            else:
                log.info("loaded model %s from %s", loaded[-1].name, path)
        return loaded

    def set_default(self, pair: Pair, name: str) -> None:
        """Make `name` the default model of `pair`; ValueError when it is not served or does
        not translate the pair (an operator's setting names what is wrong)."""
        if name not in self._models:
            known = ", ".join(sorted(self._models))
            raise ValueError(f"{pair[0]}-{pair[1]}={name}: no served model {name}; served: {known}")
        if pair not in self._models[name].pairs:
            pairs = ", ".join(f"{s}->{t}" for s, t in self._models[name].pairs)
            raise ValueError(f"{pair[0]}-{pair[1]}={name}: {name} translates {pairs} only")
        self._defaults[pair] = name

    def _refuse(self, path: Path, reason: str) -> None:
        self.failed[path.name] = reason
        if not self._models and self.not_ready_reason in (None, "model not loaded yet"):
            self.not_ready_reason = reason

    def get(self, name: str) -> LoadedModel:
        """The model called `name`; 404 naming the served ones."""
        if not self._models:
            raise NotReady(self.not_ready_reason or "not ready")
        if name not in self._models:
            known = ", ".join(sorted(self._models))
            raise NotFound(f"unknown model; available: {known}", code="unknown_model")
        return self._models[name]

    def route(self, source: str, target: str, model: str | None = None) -> LoadedModel:
        """The model for `source`->`target`: the named one (it must translate the pair), or
        the pair's default. 422 `unsupported_language` listing the supported pairs."""
        if not self._models:
            raise NotReady(self.not_ready_reason or "not ready")
        if model is not None and model != DEFAULT_ALIAS:
            found = self.get(model)
            if (source, target) not in found.pairs:
                pairs = [f"{s}->{t}" for s, t in found.pairs]
                raise UnsupportedLanguage(
                    f"model {found.name} translates {', '.join(pairs)} only",
                    supported=[{"source_lang": s, "target_lang": t} for s, t in found.pairs],
                )
            return found
        name = self._defaults.get((source, target))
        if name is None:
            pairs = sorted(self._defaults)
            raise UnsupportedLanguage(
                f"{source}->{target} is not served; served pairs: "
                + ", ".join(f"{s}->{t}" for s, t in pairs),
                supported=[{"source_lang": s, "target_lang": t} for s, t in pairs],
            )
        return self._models[name]

    def default_pair(self) -> Pair:
        """The first served model's first pair (what a request without languages means)."""
        if not self._models:
            raise NotReady(self.not_ready_reason or "not ready")
        return next(iter(self._models.values())).pairs[0]

    def targets(self) -> dict[str, list[str]]:
        """Every served language with the targets it is translated into ([] for a language
        only translated into, as LibreTranslate's clients expect it listed)."""
        out: dict[str, set[str]] = {}
        for source, target in self._defaults:
            out.setdefault(source, set()).add(target)
            out.setdefault(target, set())
        return {s: sorted(t) for s, t in sorted(out.items())}

    def sources_for(self, target: str) -> list[str]:
        """The source languages served into `target`."""
        return sorted(s for s, t in self._defaults if t == target)
