"""Retrieval for a translator: a query encoded once, for the search and for decoding.

A dense store built with the very bundle that translates encodes each query with that model's
encoder, which is also the first half of decoding. The service, `ragmt translate --domain` and
`ragmt eval --stores` load such a store with the translating bundle and hand the pipeline
`retrieve_with(translator, retriever)`, which passes the encodings on to decoding; any other
store (sparse, or dense of another bundle) is searched as it is and decoding encodes as usual.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

from torch import Tensor

from index_builder.retrieval.base import Neighbour, Retriever
from index_builder.retrieval.encoder import bundle_sha256
from models.bundle import LoadedBundle
from models.pipeline import Retrieve
from models.translator import Translator


def store_encoder(
    manifest: dict, served: LoadedBundle, encoder: Path | None = None
) -> Path | LoadedBundle | None:
    """What to load a store's retriever with (`load_retriever`'s `model`).

    `encoder`, when given, wins; else the served bundle when the store's vectors are its own
    (same `bundle_sha256`), so the retriever runs the translator's very module; else None (a
    dense store then loads the bundle its manifest records; sparse stores need none).
    """
    if encoder is not None:
        return encoder
    if manifest.get("model_sha256") == bundle_sha256(served.manifest):
        return served
    return None


def search_for(
    translator: Translator, retriever: Retriever, queries: Sequence[str], k: int
) -> tuple[list[list[Neighbour]], list[Tensor] | None]:
    """`retriever.search(queries, k)`, plus the queries' encodings when the retriever encodes
    with `translator`'s own model (else None): pass them to `translate_detailed(sources=)`."""
    encodes_with = getattr(retriever, "encodes_with", None)
    if encodes_with is None or not encodes_with(translator.model):
        return retriever.search(queries, k), None
    states = translator.source_states(queries)
    return retriever.search(queries, k, states=states), states  # type: ignore[call-arg]


def retrieve_with(
    translator: Translator, retriever: Retriever, torch_lock: threading.Lock | None = None
) -> Retrieve:
    """The pipeline's retrieval step for `translator` from `retriever` (`search_for`).

    `torch_lock`: held while searching; pass it when the search runs a torch encoder (a dense
    store), whose threads decoding shares (the service decodes under that lock).
    """

    def retrieve(queries: Sequence[str], k: int) -> tuple[list[list[Neighbour]], list | None]:
        with torch_lock if torch_lock is not None else nullcontext():
            return search_for(translator, retriever, queries, k)

    return retrieve
