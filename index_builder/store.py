"""Retrieval stores: versioned, verified directories that a retriever is loaded from.

Layout::

    STORES_DIR/<domain>/ACTIVE              the active version id (replaced atomically)
    STORES_DIR/<domain>/<version>/
        manifest.json                       kind, format version, method, sizes, sha256 of all,
                                            optionally an HMAC `signature` (see `sign_store`)
        sources.bin, sources.offsets.npy    pair texts: UTF-8 blob + int64 offsets
        targets.bin, targets.offsets.npy
        ...                                 the method's files (see `METHODS`)

A version id is ``<UTC time to the millisecond>-<8 hex of the content hash>``, so ids sort by
build time; the content hash covers the corpus, the method and its parameters, and for dense
stores the encoder bundle (`bundle_sha256`), whose vectors they hold. A store is written
with `atomic_directory` (an interrupted build leaves only a hidden temporary directory).

`open_store` reads each file once, checks its sha256 on the very bytes it then parses (arrays
are ``.npy`` read with ``allow_pickle=False``: no pickle) and validates the values (finite,
in range, ids within bounds, sizes as the manifest says). Checksums catch corruption, not an
edit whose checksums were recomputed: a server that must refuse those opens stores with a
signing key, and only stores signed with that key (`build_store(signing_key=...)`,
`sign_store`) are accepted.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from index_builder.columns import PairTexts, TextColumn
from index_builder.corpus import CorpusError, Pair
from index_builder.retrieval.base import Retriever
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.retrieval.text import TOKEN_VIEW, Vocabulary
from index_builder.store_files import (
    SIGNATURE,
    check_key,
    check_signature,
    manifest_signature,
    manifest_text,
    read_files,
    read_manifest,
    replace_file,
)
from models.artifacts import MANIFEST, ArtifactError, atomic_directory, write_manifest

if TYPE_CHECKING:
    from models.bundle import LoadedBundle

__all__ = [
    "ACTIVE",
    "FORMAT_VERSION",
    "BuildOptions",
    "KIND",
    "METHODS",
    "SIGNATURE",
    "Store",
    "active_version",
    "build_store",
    "check_domain",
    "check_ngrams",
    "corpus_sha256",
    "list_versions",
    "load_retriever",
    "manifest_signature",
    "open_store",
    "set_active",
    "sign_store",
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
    """An opened store: its manifest, pair texts and method files, parsed, checked, in memory.

    `open_store` reads each file once and never again, so a store in use survives its files
    being truncated, rewritten or deleted (a memory map would SIGBUS on the next read). The
    cost: each process that opens a store holds all of it in RAM, not shared through the page
    cache: texts and arrays at their size on disk, FAISS indexes as FAISS holds them (on the
    CPU, also when a retriever searches a GPU clone). Opening peaks at that plus the largest
    file once more, while it is parsed.
    """

    root: Path
    manifest: dict[str, Any]
    pairs: PairTexts
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)  # <name>.npy
    columns: Mapping[str, TextColumn] = field(default_factory=dict, repr=False)  # <name>.bin
    indexes: Mapping[str, Any] = field(default_factory=dict, repr=False)  # <name>.faiss

    @property
    def method(self) -> str:
        return self.manifest["method"]

    def array(self, name: str) -> np.ndarray:
        """The array of ``<name>.npy``, read-only."""
        return self._part(self.arrays, name, ".npy")

    def column(self, name: str) -> TextColumn:
        """The strings of ``<name>.bin`` and ``<name>.offsets.npy``."""
        return self._part(self.columns, name, ".bin")

    def index(self, name: str) -> Any:
        """The FAISS index of ``<name>.faiss``."""
        return self._part(self.indexes, name, ".faiss")

    def _part(self, parts: Mapping[str, Any], name: str, suffix: str) -> Any:
        if name not in parts:
            raise ArtifactError(f"{self.root}: {name}{suffix} is not in the manifest")
        return parts[name]


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
    a loaded bundle) is only read by methods with `uses_model`. `check(store)` validates the
    values of the method's files when the store is opened (ValueError naming the file), so
    that a store which opens serves.
    """

    write: Callable[[Path, PairTexts, Mapping[str, Any], BuildOptions], dict[str, Any]]
    load: Callable[[Store, Path | LoadedBundle | None], Retriever]
    uses_model: bool = False
    check: Callable[[Store], None] = lambda store: None


def _save_sparse(
    directory: Path, retriever: IdfSentenceRetriever | IdfNgramRetriever
) -> dict[str, int]:
    retriever.terms.vocab.column().save(directory, "vocab")
    for name, arr in retriever.arrays().items():
        np.save(directory / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    return retriever.counts()


def _vocab(store: Store) -> Vocabulary:
    return Vocabulary(list(store.column("vocab")))


def _check_idf(store: Store, postings: Sequence[tuple[str, int]]) -> None:
    """An IDF store's values: one IDF per vocabulary entry, >= 0 (finite: checked for every
    store), and per `postings` (label, items) a term pointer and item ids in bounds. The order
    within each posting list is checked when the index is built (`InvertedIndex`)."""
    n_vocab, idf = len(store.column("vocab")), store.array("idf")
    if idf.dtype.kind != "f" or len(idf) != n_vocab:
        raise ValueError(f"idf.npy: {len(idf)} {idf.dtype} values for {n_vocab} vocab.bin terms")
    _refuse(idf < 0, idf, "idf.npy", "negative")
    _check_count(store, "vocabulary", n_vocab, "vocab.bin")
    for label, n_items in postings:
        indptr, indices = store.array(f"{label}.indptr"), store.array(f"{label}.indices")
        what, of = f"{label}.indptr.npy", f"{label}.indices.npy"
        if indptr.dtype.kind not in "iu" or len(indptr) != n_vocab + 1:
            raise ValueError(
                f"{what}: {len(indptr)} {indptr.dtype} values, expected {n_vocab + 1} integers"
            )
        if indptr[0] != 0 or indptr[-1] != len(indices):
            raise ValueError(
                f"{what}: runs {indptr[0]}..{indptr[-1]}, not 0..{len(indices)} ({of})"
            )
        falls = np.flatnonzero(np.diff(indptr) < 0)
        if len(falls):
            i = int(falls[0])
            raise ValueError(f"{what}: decreases at index {i + 1} ({indptr[i]} to {indptr[i + 1]})")
        _check_ids(of, indices, n_items)


def _check_idf_sentence(store: Store) -> None:
    _check_count(store, "items", len(store.pairs), "sources.bin")
    _check_idf(store, [("sentences", len(store.pairs))])


def _check_idf_ngram(store: Store) -> None:
    widths = IdfNgramParams.from_dict(store.manifest["params"]).widths
    check_ngrams(store, widths)
    _check_idf(store, [(f"w{w}", len(store.array(f"w{w}.owner"))) for w in widths])


def _write_idf_sentence(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    if params:
        raise ValueError(f"idf-sentence takes no parameters, got {sorted(params)}")
    retriever = IdfSentenceRetriever.build(pairs, options.progress)
    return {"params": {}, "counts": _save_sparse(directory, retriever)}


def _load_idf_sentence(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    return IdfSentenceRetriever.from_arrays(store.arrays, _vocab(store), store.pairs)


def _write_idf_ngram(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    p = IdfNgramParams.from_dict(params)
    retriever = IdfNgramRetriever.build(pairs, p, options.progress)
    return {"params": p.to_dict(), "counts": _save_sparse(directory, retriever)}


def _load_idf_ngram(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    params = IdfNgramParams.from_dict(store.manifest["params"])
    return IdfNgramRetriever.from_arrays(store.arrays, _vocab(store), store.pairs, params)


def _write_dense_ngram(
    directory: Path, pairs: PairTexts, params: Mapping[str, Any], options: BuildOptions
) -> dict[str, Any]:
    from index_builder.retrieval import dense_store  # torch and FAISS: only when asked for

    return dense_store.write(directory, pairs, params, options.model, options.progress,
                             options.use_ray)  # fmt: skip


def _load_dense_ngram(store: Store, model: Path | LoadedBundle | None) -> Retriever:
    from index_builder.retrieval import dense_store

    return dense_store.load(store, model)


def _check_dense_ngram(store: Store) -> None:
    from index_builder.retrieval import dense_store

    dense_store.check(store)


METHODS: dict[str, Method] = {
    "idf-sentence": Method(_write_idf_sentence, _load_idf_sentence, check=_check_idf_sentence),
    "idf-ngram": Method(_write_idf_ngram, _load_idf_ngram, check=_check_idf_ngram),
    "dense-ngram": Method(
        _write_dense_ngram, _load_dense_ngram, uses_model=True, check=_check_dense_ngram
    ),
}


# --- values: what a store must hold beyond matching checksums ----------------------------


def _refuse(bad: np.ndarray, values: np.ndarray, what: str, problem: str) -> None:
    """ValueError "<what>: N values are <problem> (<first> at index i)" if any of `bad`."""
    n = int(np.count_nonzero(bad))
    if n:
        i = int(np.flatnonzero(bad)[0])
        are = "values are" if n > 1 else "value is"
        raise ValueError(f"{what}: {n} {are} {problem} ({values[i]} at index {i})")


def _check_ids(what: str, ids: np.ndarray, n: int) -> None:
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{what}: {ids.dtype} values, expected integer ids")
    _refuse((ids < 0) | (ids >= n), ids, what, f"outside the ids 0..{n - 1}")


def _check_count(store: Store, key: str, actual: int, what: str) -> None:
    recorded = store.manifest["counts"].get(key)
    if actual != recorded:
        raise ValueError(f"{what}: {actual} items, the manifest's counts.{key} is {recorded!r}")


def check_ngrams(store: Store, widths: Sequence[int]) -> None:
    """The n-gram arrays of each width, ``w<n>.owner`` (pair ids) and ``w<n>.start`` (>= 0):
    one of each per n-gram, as many as ``counts.items_w<n>``, their sum ``counts.items``;
    ValueError naming the file. Every n-gram method's `check` runs it."""
    for w in widths:
        owner, start = store.array(f"w{w}.owner"), store.array(f"w{w}.start")
        _check_ids(f"w{w}.owner.npy", owner, len(store.pairs))
        _check_count(store, f"items_w{w}", len(owner), f"w{w}.owner.npy")
        if start.dtype.kind not in "iu" or len(start) != len(owner):
            raise ValueError(
                f"w{w}.start.npy: {len(start)} {start.dtype} values, expected {len(owner)} integers"
            )
        _refuse(start < 0, start, f"w{w}.start.npy", "negative")
    _check_count(store, "items", sum(len(store.array(f"w{w}.owner")) for w in widths), "n-grams")


def _check_values(store: Store) -> None:
    """What every store must hold, whatever its method: counts as an object whose ``items``
    is the manifest's, and every float array finite."""
    counts = store.manifest.get("counts")
    if not isinstance(counts, dict) or counts.get("items") != store.manifest.get("items"):
        raise ValueError(f"the manifest's counts {counts!r} do not match its items")
    for name, values in store.arrays.items():
        if values.dtype.kind == "f":
            _refuse(~np.isfinite(values), values, f"{name}.npy", "not finite")


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
    signing_key: bytes | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Build a store of `pairs` under ``out_dir/<domain>/<version>/``; return its path.

    Does not change the domain's ACTIVE version (see `set_active`). Raises `CorpusError` for
    an empty corpus and ValueError for a bad domain, method or parameter, before writing.
    `model` and `use_ray` are for methods that encode with a model (dense-ngram). With a
    `signing_key` the manifest is signed (see `manifest_signature`), for servers that require
    signed stores. `extra`: more manifest entries (a version folded from live edits records
    ``edits_through`` and ``folded_from``).
    """
    if signing_key is not None:
        check_key(signing_key)
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
        manifest = write_manifest(
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
                **(extra or {}),
            },
        )
        if signing_key is not None:  # fsynced with the directory, which is not visible yet
            manifest[SIGNATURE] = manifest_signature(manifest, signing_key)
            (tmp / MANIFEST).write_text(manifest_text(manifest), encoding="utf-8")
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


def open_store(path: Path, signing_key: bytes | None = None) -> Store:
    """Open a store: read each file once, check its sha256 on the bytes it then parses, and
    validate the values. The `Store` holds it all in memory and never reads the files again.

    `path` is a version directory or a domain directory with an ACTIVE version. Checksums
    catch corruption, not an edit whose checksums were recomputed: with a `signing_key`,
    only a store signed with that key opens. Any problem is an `ArtifactError` naming the
    store, the file and what is wrong.
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
    if signing_key is not None:
        check_signature(root, manifest, signing_key)
    arrays, columns, indexes = read_files(root, manifest["files"])
    try:
        pairs = PairTexts(columns["sources"], columns["targets"])
    except KeyError as e:
        raise ArtifactError(f"{root}: {e.args[0]}.bin is not in the manifest") from e
    except ValueError as e:
        raise ArtifactError(f"{root}: unreadable pair texts: {e}") from e
    if len(pairs) != manifest.get("pairs"):
        raise ArtifactError(f"{root}: {len(pairs)} pairs, manifest says {manifest.get('pairs')}")
    store = Store(
        root,
        manifest,
        pairs,
        MappingProxyType(arrays),
        MappingProxyType(columns),
        MappingProxyType(indexes),
    )
    try:
        _check_values(store)
        METHODS[method].check(store)
    except ArtifactError:
        raise
    except (KeyError, ValueError) as e:
        raise ArtifactError(f"{root}: inconsistent {method} store: {e}") from e
    return store


# --- signatures ---------------------------------------------------------------------------


def sign_store(path: Path, key: bytes) -> dict[str, Any]:
    """Sign a store built without a key (or re-sign it with a new one): open and validate it,
    so that no damaged store is signed, then replace its manifest.json atomically with the
    signed manifest, which is returned."""
    check_key(key)
    store = open_store(path)
    manifest = dict(store.manifest)
    manifest[SIGNATURE] = manifest_signature(manifest, key)
    replace_file(store.root / MANIFEST, manifest_text(manifest), store.root.parent)
    return manifest


def load_retriever(
    store: Path | Store,
    model: Path | LoadedBundle | None = None,
    *,
    signing_key: bytes | None = None,
) -> Retriever:
    """Build the retriever of a store: a path is opened first (with `signing_key`, if given).

    `model` is the bundle a dense store encodes queries with (default: the one recorded at
    build time); it must be the very bundle the store was built with. Sparse stores ignore it.
    """
    if not isinstance(store, Store):
        store = open_store(store, signing_key)
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


def set_active(
    stores_dir: Path,
    domain: str,
    version: str,
    *,
    signing_key: bytes | None = None,
    opened: Store | None = None,
) -> None:
    """Point the domain's ACTIVE file at `version` (opened and validated first, with
    `signing_key` if given) with an atomic replace. `opened`: that version already opened
    (and so validated) by the caller, which is then not read again."""
    _check_name("domain", domain)
    _check_name("version", version)
    d = Path(stores_dir) / domain
    if opened is not None and opened.root.resolve() == (d / version).resolve():
        store = opened
    else:
        store = open_store(d / version, signing_key)
    if store.manifest.get("domain") != domain:
        raise ArtifactError(
            f"{store.root}: a store of {store.manifest.get('domain')!r}, not {domain!r}"
        )
    replace_file(d / ACTIVE, version + "\n", d)
