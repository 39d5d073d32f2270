"""The dense-ngram method's side of a retrieval store (`index_builder.store.METHODS`).

Files, per width n: ``w<n>.faiss`` (the FAISS index, `faiss.write_index`), ``w<n>.owner.npy``
(int32 pair id of each FAISS id) and ``w<n>.start.npy`` (int32 sub-word start of each n-gram).
Manifest fields: ``model_sha256`` (`encoder.bundle_sha256` of the bundle that made the
vectors), ``model_path`` (where it was, a hint for loading), ``faiss_factory``,
``dimension``, ``recall_at_10`` (approximate indexes: measured against exact search at build
time, per width and overall, at the search setting kept in ``params.search``, which a
``target_recall`` makes the shallowest that reaches it; None for Flat) and the
`DenseNgramParams`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from index_builder.columns import PairTexts
from index_builder.retrieval.dense import DenseIndex, DenseNgramParams, DenseNgramRetriever
from index_builder.retrieval.encoder import Encoder, encode_corpus
from index_builder.retrieval.faiss_index import (
    RECALL_K,
    RecallProbe,
    apply_search,
    build_index,
    nonfinite_vectors,
    tune_search,
    write_index,
)
from index_builder.store import Store, check_ngrams
from models.artifacts import MANIFEST, ArtifactError
from models.bundle import LoadedBundle
from models.translator import DEFAULT_BUNDLE


def _encoder(model: Path | LoadedBundle | None) -> Encoder:
    if isinstance(model, LoadedBundle):
        return Encoder(model)
    return Encoder.load(DEFAULT_BUNDLE if model is None else Path(model))


def write(
    directory: Path,
    pairs: PairTexts,
    params: Mapping[str, Any],
    model: Path | LoadedBundle | None,
    progress: bool,
    use_ray: bool,
) -> dict[str, Any]:
    """Encode the corpus, build one FAISS index per width, write them; return manifest fields."""
    p = DenseNgramParams.from_dict(params)
    encoder = _encoder(model)
    p.check(encoder.dimension)  # a bad factory string fails before minutes of encoding
    blocks = encode_corpus(
        encoder, pairs.sources, p.widths, p.all_positions, p.batch_size, progress, use_ray
    )
    if not any(len(b.row) for b in blocks):
        raise ValueError("no source sentence has a sub-word token: nothing to index")
    counts: dict[str, int] = {"items": sum(len(b.row) for b in blocks)}
    labels = [f"w{w}" for w in p.widths]
    indexes = []
    for label, block in zip(labels, blocks, strict=True):
        counts[f"items_{label}"] = len(block.row)
        indexes.append(
            build_index(block.vectors, p.factory, p.search, p.train_sample, p.seed, progress, label)
        )
    recall: dict[str, Any] = {}
    if not p.exact:
        probes = [RecallProbe(b.vectors, p.recall_sample, p.seed, RECALL_K) for b in blocks]
        if p.target_recall is not None:
            search, recalls = tune_search(indexes, probes, p.factory, p.search, p.target_recall)
            p = replace(p, search=search)  # the store is searched as it was measured
        else:
            recalls = [probe.recall(index) for index, probe in zip(indexes, probes, strict=True)]
        for label, r, probe in zip(labels, recalls, probes, strict=True):
            recall[label], recall[f"queries_{label}"] = r, probe.queries
        queries = sum(probe.queries for probe in probes)
        recall["all"] = sum(r * probe.queries for r, probe in zip(recalls, probes, strict=True))
        recall["all"] /= max(1, queries)
        recall["k"] = RECALL_K
    for label, block, index in zip(labels, blocks, indexes, strict=True):
        write_index(index, directory / f"{label}.faiss")
        np.save(directory / f"{label}.owner.npy", block.row.astype(np.int32), allow_pickle=False)
        np.save(directory / f"{label}.start.npy", block.start, allow_pickle=False)
    return {
        "params": p.to_dict(),
        "counts": counts,
        "model_sha256": encoder.sha256,
        "model_path": str(Path(encoder.path).resolve()),
        "faiss_factory": p.factory,
        "dimension": encoder.dimension,
        "recall_at_10": recall or None,
    }


def _store_encoder(store: Store, model: Path | LoadedBundle | None) -> Encoder:
    """The encoder a store must be queried with: `model`, or the bundle recorded at build
    time; ArtifactError unless it is the very bundle (by `bundle_sha256`) that made the
    vectors, since another encoder's vectors live in another space."""
    manifest, root = store.manifest, store.root
    want = manifest.get("model_sha256")
    if not isinstance(want, str):
        raise ArtifactError(f"{root}: dense store without a model_sha256")
    if model is None:
        recorded = manifest.get("model_path")
        if not isinstance(recorded, str) or not (Path(recorded) / MANIFEST).is_file():
            raise ArtifactError(
                f"{root}: built with model bundle {want[:12]}… at {recorded!r}, which holds no "
                "bundle now; pass that bundle (--model)"
            )
        model = Path(recorded)
    encoder = _encoder(model)
    if encoder.sha256 != want:
        raise ArtifactError(
            f"{root}: built with model bundle {want[:12]}…, but {encoder.path} is bundle "
            f"{encoder.sha256[:12]}…; its vectors would not be comparable. Pass the bundle the "
            "store was built with, or rebuild the store"
        )
    if encoder.dimension != manifest.get("dimension"):
        raise ArtifactError(
            f"{root}: dimension {manifest.get('dimension')}, encoder {encoder.dimension}"
        )
    source = manifest.get("languages", {}).get("source")
    if encoder.source_lang != source:
        raise ArtifactError(f"{root}: a {source!r} store, a {encoder.source_lang!r} encoder")
    return encoder


def check(store: Store) -> None:
    """A dense store's values, when it is opened: per width, one owner and start per FAISS
    vector, the manifest's dimension, and every vector finite; ValueError naming the file."""
    params = DenseNgramParams.from_dict(store.manifest["params"])
    check_ngrams(store, params.widths)
    for w in params.widths:
        index, owner = store.index(f"w{w}"), store.array(f"w{w}.owner")
        if index.ntotal != len(owner):
            raise ValueError(
                f"width {w}: w{w}.faiss holds {index.ntotal} vectors, w{w}.owner.npy "
                f"{len(owner)} owners"
            )
        if index.d != store.manifest.get("dimension"):
            raise ValueError(
                f"w{w}.faiss: dimension {index.d}, the manifest says "
                f"{store.manifest.get('dimension')!r}"
            )
        count, first = nonfinite_vectors(index)
        if count:
            raise ValueError(f"w{w}.faiss: {count} of its vectors not finite (the first: {first})")


def load(store: Store, model: Path | LoadedBundle | None) -> DenseNgramRetriever:
    """The retriever of an opened dense store, over the FAISS indexes it holds."""
    params = DenseNgramParams.from_dict(store.manifest["params"])
    encoder = _store_encoder(store, model)
    indexes = []
    for width in params.widths:
        index = store.index(f"w{width}")
        apply_search(index, params.search)  # the store's own setting, whoever loads it
        owner, start = store.array(f"w{width}.owner"), store.array(f"w{width}.start")
        indexes.append(DenseIndex(width, index, owner, start))
    return DenseNgramRetriever(encoder, indexes, store.pairs, params)
