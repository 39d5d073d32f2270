"""Retrieval stores: versioned, verified directories that a retriever is loaded from.

Layout::

    STORES_DIR/<domain>/ACTIVE              the active version id (replaced atomically)
    STORES_DIR/<domain>/<version>/
        manifest.json                       kind, format version, method, sizes, sha256 of all
        sources.bin, sources.offsets.npy    pair texts: UTF-8 blob + int64 offsets (mmap)
        targets.bin, targets.offsets.npy
        ...                                 the method's files (see `METHODS`)

A version id is ``<UTC time to the millisecond>-<8 hex of the content hash>``, so ids sort by
build time; the content hash covers the corpus, the method and its parameters, and for dense
stores the encoder bundle (`bundle_sha256`), whose vectors they hold. A store is written
with `atomic_directory` (an interrupted build leaves only a hidden temporary directory) and
`open_store` verifies the manifest and every checksum before it reads any other byte. Arrays
are ``.npy`` read with ``allow_pickle=False``: no pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from index_builder.columns import PairTexts, TextColumn
from index_builder.corpus import CorpusError, Pair
from index_builder.retrieval.base import Retriever
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.retrieval.text import TOKEN_VIEW, Vocabulary
from models.artifacts import (
    MANIFEST,
    ArtifactError,
    atomic_directory,
    read_manifest,
    write_manifest,
)

if TYPE_CHECKING:
    from models.bundle import LoadedBundle

__all__ = [
    "ACTIVE",
    "FORMAT_VERSION",
    "BuildOptions",
    "KIND",
    "METHODS",
    "Store",
    "active_version",
    "build_store",
    "check_domain",
    "corpus_sha256",
    "list_versions",
    "load_retriever",
    "open_store",
    "set_active",
]

KIND = "retrieval-store"
FORMAT_VERSION = 1
ACTIVE = "ACTIVE"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Domain names become directory names, URL path segments and metric labels: one rule for the
# CLI, the service's routes and settings, and the worker.
DOMAIN_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
DOMAIN_RE = re.compile(DOMAIN_PATTERN)
DOMAIN_RULE = (
    "lower-case letters, digits, '_' and '-', starting with a letter or digit, "
    "at most 64 characters"
)


def check_domain(name: str) -> str:
    """`name` if it is a valid domain name; else ValueError saying what the rule is."""
    if not isinstance(name, str) or not DOMAIN_RE.fullmatch(name):
        raise ValueError(f"invalid domain name {str(name)[:80]!r}: use {DOMAIN_RULE}")
    return name


@dataclass(frozen=True)
class Store:
    """An opened, verified store: its manifest and memory-mapped pair texts."""

    root: Path
    manifest: dict[str, Any]
    pairs: PairTexts

    @property
    def method(self) -> str:
        return self.manifest["method"]

    def array(self, name: str) -> np.ndarray:
        """The method array ``<name>.npy``, memory-mapped; it must be listed in the manifest."""
        rel = f"{name}.npy"
        if rel not in self.manifest["files"]:
            raise ArtifactError(f"{self.root}: {rel} is not in the manifest")
        try:
            return np.load(self.root / rel, mmap_mode="r", allow_pickle=False)
        except ValueError as e:
            raise ArtifactError(f"{self.root}: {rel} is not a plain numeric array: {e}") from e


class _Arrays(Mapping[str, np.ndarray]):
    """A store's arrays by name, loaded on first access."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getitem__(self, name: str) -> np.ndarray:
        return self._store.array(name)

    def __iter__(self) -> Iterator[str]:
        return (f[: -len(".npy")] for f in self._store.manifest["files"] if f.endswith(".npy"))

    def __len__(self) -> int:
        return sum(1 for _ in self)


# --- methods: how each writes its files and loads its retriever -----------------------------


@dataclass(frozen=True)
class BuildOptions:
    """How a store is built, beyond what it is built from; not recorded as parameters.

    `model` is the bundle whose encoder makes dense vectors (a path, an already loaded bundle,
    or None for the committed default bundle); `use_ray` spreads the encoding over Ray workers
    (the store comes out identical).
    """

    progress: bool = False
    model: Path | LoadedBundle | None = None
    use_ray: bool = False


@dataclass(frozen=True)
class Method:
    """One retrieval method's side of the store format.

    `write(directory, pairs, params, options)` writes the method's files into the (temporary)
    store directory and returns manifest fields: ``params`` (normalised, recorded) and
    ``counts`` (``items`` = n-grams or vectors indexed), plus for dense methods
    ``model_sha256``, ``model_path``, ``faiss_factory``, ``dimension`` and ``recall_at_10``.
    `load(store, model)` builds the retriever from a verified store; `model` (a bundle path or
    a loaded bundle) is only read by methods with `uses_model`.
    """

    write: Callable[[Path, PairTexts, Mapping[str, Any], BuildOptions], dict[str, Any]]
    load: Callable[[Store, Path | LoadedBundle | None], Retriever]
    uses_model: bool = False


def _save_sparse(
    directory: Path, retriever: IdfSentenceRetriever | IdfNgramRetriever
) -> dict[str, int]:
    retriever.terms.vocab.column().save(directory, "vocab")
    for name, arr in retriever.arrays().items():
        np.save(directory / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    return retriever.counts()


def _vocab(store: Store) -> Vocabulary:
    return Vocabulary(list(TextColumn.open(store.root, "vocab")))


def _write_idf_sentence(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    if params:
        raise ValueError(f"idf-sentence takes no parameters, got {sorted(params)}")
    retriever = IdfSentenceRetriever.build(pairs, options.progress)
    return {"params": {}, "counts": _save_sparse(directory, retriever)}


def _load_idf_sentence(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    return IdfSentenceRetriever.from_arrays(_Arrays(store), _vocab(store), store.pairs)


def _write_idf_ngram(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    p = IdfNgramParams.from_dict(params)
    retriever = IdfNgramRetriever.build(pairs, p, options.progress)
    return {"params": p.to_dict(), "counts": _save_sparse(directory, retriever)}


def _load_idf_ngram(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    params = IdfNgramParams.from_dict(store.manifest["params"])
    return IdfNgramRetriever.from_arrays(_Arrays(store), _vocab(store), store.pairs, params)


def _write_dense_ngram(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    from index_builder.retrieval import dense_store  # torch and FAISS: only when asked for

    return dense_store.write(directory, pairs, params, options.model, options.progress,
                             options.use_ray)  # fmt: skip


def _load_dense_ngram(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    from index_builder.retrieval import dense_store

    return dense_store.load(store, model)


METHODS: dict[str, Method] = {
    "idf-sentence": Method(_write_idf_sentence, _load_idf_sentence),
    "idf-ngram": Method(_write_idf_ngram, _load_idf_ngram),
    "dense-ngram": Method(_write_dense_ngram, _load_dense_ngram, uses_model=True),
}


# --- building -----------------------------------------------------------------------------


def corpus_sha256(pairs: Sequence[Pair]) -> str:
    """Hash of the pairs' texts (not of any file): the same corpus read from TSV or TMX agrees."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(json.dumps([p.source, p.target], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _check_name(what: str, name: str) -> None:
    if what == "domain":
        check_domain(name)
    elif not _NAME.fullmatch(name):
        raise ValueError(f"invalid {what} {name!r}: use letters, digits, '.', '_' and '-'")


def build_store(
    pairs: Sequence[Pair],
    domain: str,
    method: str,
    out_dir: Path,
    params: Mapping[str, Any] | None = None,
    languages: tuple[str, str] = ("en", "de"),
    progress: bool = False,
    *,
    model: Path | LoadedBundle | None = None,
    use_ray: bool = False,
) -> Path:
    """Build a store of `pairs` under ``out_dir/<domain>/<version>/``; return its path.

    Does not change the domain's ACTIVE version (see `set_active`). Raises `CorpusError` for
    an empty corpus and ValueError for a bad domain, method or parameter, before writing.
    `model` and `use_ray` are for methods that encode with a model (dense-ngram).
    """
    _check_name("domain", domain)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {', '.join(METHODS)}")
    if not METHODS[method].uses_model and (model is not None or use_ray):
        raise ValueError(f"{method} uses no model: a model bundle and Ray do not apply")
    if not pairs:
        raise CorpusError("empty corpus: no pairs to index")
    params = dict(params or {})
    started = time.time()
    corpus_hash = corpus_sha256(pairs)
    identity: list[Any] = [corpus_hash, method, params]
    if METHODS[method].uses_model:  # the vectors are the encoder's: stores of two differ
        identity.append(_encoder_sha256(model))
    content = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(started))
    version = f"{stamp}.{int(started * 1000) % 1000:03d}Z-{content[:8]}"
    final = Path(out_dir) / domain / version
    if final.exists():
        raise ArtifactError(f"{final} already exists")
    texts = PairTexts.from_strings([p.source for p in pairs], [p.target for p in pairs])
    with atomic_directory(final) as tmp:
        texts.sources.save(tmp, "sources")
        texts.targets.save(tmp, "targets")
        options = BuildOptions(progress, model, use_ray)
        written = METHODS[method].write(tmp, texts, params, options)
        counts = written["counts"]
        write_manifest(
            tmp,
            {
                "kind": KIND,
                "format_version": FORMAT_VERSION,
                "method": method,
                "domain": domain,
                "version": version,
                "languages": {"source": languages[0], "target": languages[1]},
                "token_view": TOKEN_VIEW,
                "pairs": len(pairs),
                "items": counts["items"],
                "counts": counts,
                "params": written["params"],
                "corpus_sha256": corpus_hash,
                "model_sha256": written.get("model_sha256"),
                "model_path": written.get("model_path"),
                "faiss_factory": written.get("faiss_factory"),
                "dimension": written.get("dimension"),
                "recall_at_10": written.get("recall_at_10"),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "build_seconds": round(time.time() - started, 3),
            },
        )
    return final


def _encoder_sha256(model: Path | LoadedBundle | None) -> str | None:
    """`bundle_sha256` of the bundle a dense store is built with (None: the committed default),
    for the version id; None when its manifest cannot be read (the build then fails on it)."""
    from index_builder.retrieval.encoder import bundle_sha256
    from models.bundle import LoadedBundle
    from models.translator import DEFAULT_BUNDLE

    if isinstance(model, LoadedBundle):
        return bundle_sha256(model.manifest)
    path = Path(DEFAULT_BUNDLE if model is None else model) / MANIFEST
    try:
        return bundle_sha256(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


# --- opening ------------------------------------------------------------------------------


def _resolve(path: Path) -> Path:
    """A version directory as given, or a domain directory's ACTIVE version."""
    path = Path(path)
    if not (path / MANIFEST).is_file() and (path / ACTIVE).is_file():
        version = active_version(path.parent, path.name)
        if version is not None:
            return path / version
    return path


def open_store(path: Path) -> Store:
    """Verify a store (manifest, kind, format version, every checksum), then map its pairs.

    `path` is a version directory or a domain directory with an ACTIVE version. Any problem
    is an `ArtifactError` naming the store and what is wrong.
    """
    root = _resolve(path)
    manifest = read_manifest(root, KIND, FORMAT_VERSION)
    method = manifest.get("method")
    if method not in METHODS:
        raise ArtifactError(
            f"{root}: unknown retrieval method {method!r}; this ragmt knows {', '.join(METHODS)}"
        )
    if manifest.get("token_view") != TOKEN_VIEW:
        raise ArtifactError(
            f"{root}: built with token view {manifest.get('token_view')!r}, "
            f"this ragmt tokenises with {TOKEN_VIEW!r}; rebuild the store"
        )
    try:
        pairs = PairTexts(TextColumn.open(root, "sources"), TextColumn.open(root, "targets"))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{root}: unreadable pair texts: {e}") from e
    if len(pairs) != manifest.get("pairs"):
        raise ArtifactError(f"{root}: {len(pairs)} pairs, manifest says {manifest.get('pairs')}")
    return Store(root, manifest, pairs)


def load_retriever(store: Path | Store, model: Path | LoadedBundle | None = None) -> Retriever:
    """Build the retriever of a store: a path is opened and verified first.

    `model` is the bundle a dense store encodes queries with (default: the one recorded at
    build time); it must be the very bundle the store was built with. Sparse stores ignore it.
    """
    if not isinstance(store, Store):
        store = open_store(store)
    try:
        return METHODS[store.method].load(store, model)
    except ArtifactError:
        raise
    except (KeyError, ValueError) as e:
        raise ArtifactError(f"{store.root}: inconsistent {store.method} store: {e}") from e


# --- versions -----------------------------------------------------------------------------


def list_versions(stores_dir: Path, domain: str) -> list[str]:
    """Version ids of a domain's complete stores (directories with a manifest), oldest first."""
    _check_name("domain", domain)
    d = Path(stores_dir) / domain
    if not d.is_dir():
        return []
    return sorted(
        p.name
        for p in d.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file()
    )


def active_version(stores_dir: Path, domain: str) -> str | None:
    """The domain's active version id, or None when it has none."""
    _check_name("domain", domain)
    pointer = Path(stores_dir) / domain / ACTIVE
    try:
        version = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{pointer}: unreadable: {e}") from e
    if not _NAME.fullmatch(version) or not (pointer.parent / version).is_dir():
        raise ArtifactError(f"{pointer}: names {version!r}, which is not a store of {domain}")
    return version


def set_active(stores_dir: Path, domain: str, version: str) -> None:
    """Point the domain's ACTIVE file at `version` (verified first) with an atomic replace."""
    _check_name("domain", domain)
    _check_name("version", version)
    d = Path(stores_dir) / domain
    store = open_store(d / version)
    if store.manifest.get("domain") != domain:
        raise ArtifactError(
            f"{store.root}: a store of {store.manifest.get('domain')!r}, not {domain!r}"
        )
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{ACTIVE}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(version + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / ACTIVE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
