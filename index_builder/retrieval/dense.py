"""Dense n-gram retrieval (Bapna & Firat 2019, section 3.3): encoder-state n-grams in FAISS.

A sentence is encoded with a model bundle's encoder (`encoder.Encoder`); each n-gram of its
reduced set over sub-word positions (`ngrams.ngram_spans`) is the mean of its sub-word states.
The corpus side indexes, per width, every sentence's reduced set (or every position with
`all_positions`) in one FAISS index (`faiss_index`), searched by L2.

Per query, as in IDF n-gram retrieval: for each reduced n-gram (widths widest first, then left
to right) take the pair owning the nearest corpus n-gram of the same width, skipping pairs
already taken or excluded (the next nearest instead); then keep the k best. The score is the
negated squared L2 distance, so higher is better as for the IDF methods.

Widths are sub-word positions; `DEFAULT_WIDTHS` follow the IDF default (8, 4), which were
chosen on words (docs/retrieval-widths.md); sub-word n-grams of these widths are a little
shorter in words. Corpus side reduced by default: indexing every position costs ~2x (width
4) to ~4x (width 8) the memory and the Flat query time.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

import faiss
import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from index_builder.columns import PairTexts
from index_builder.retrieval.base import Neighbour, check_search_args
from index_builder.retrieval.encoder import Encoder, encode_chunk, ngram_blocks
from index_builder.retrieval.faiss_index import check_factory, default_search, depth_knob
from index_builder.retrieval.ngrams import WidthParams, ngram_spans, sorted_widths

DEFAULT_WIDTHS = (8, 4)
DEFAULT_FACTORY = "Flat"
SCORE_DECIMALS = 6
_FIRST_DEPTH = 32  # hits fetched per query n-gram; deepened x4 while all are taken or excluded


@dataclass(frozen=True)
class DenseNgramParams(WidthParams):
    """Build parameters of a dense n-gram store (recorded in its manifest).

    `batch_size` is the sentences per encoding chunk: it fixes the chunks, hence the floats,
    so it is part of what a store was built with.
    """

    KIND = "dense-ngram"

    widths: tuple[int, ...] = DEFAULT_WIDTHS
    all_positions: bool = False
    factory: str = DEFAULT_FACTORY
    search: str = ""  # FAISS ParameterSpace string; "" -> default_search(factory)
    batch_size: int = 64
    train_sample: int = 100_000  # vectors that train an IVF/PQ index
    recall_sample: int = 1_000  # corpus vectors queried to measure recall@10 against Flat
    # Approximate indexes: deepen `search` (nprobe, efSearch) until every width's recall@10
    # reaches this; None keeps `search` as given.
    target_recall: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", sorted_widths(self.widths))
        if not self.factory or not isinstance(self.factory, str):
            raise ValueError(f"factory must be a FAISS factory string, got {self.factory!r}")
        if not self.search:
            object.__setattr__(self, "search", default_search(self.factory))
        for name in ("batch_size", "train_sample", "recall_sample"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        t = self.target_recall
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t <= 1:
                raise ValueError(f"target_recall must be in (0, 1], got {t!r}")
            if self.exact:
                raise ValueError("target_recall applies to approximate indexes, not Flat")

    @property
    def exact(self) -> bool:
        return self.factory == "Flat"

    def check(self, dimension: int) -> None:
        """ValueError unless FAISS can build the factory and, with a target recall, has a
        search depth to tune (checked before encoding a corpus)."""
        check_factory(self.factory, dimension, self.search)
        if self.target_recall is not None:
            depth_knob(self.factory)


@dataclass(frozen=True)
class DenseIndex:
    """One width's FAISS index; FAISS id g is the n-gram of pair `owner[g]` at `start[g]`."""

    width: int
    index: faiss.Index
    owner: np.ndarray  # (G,) int32
    start: np.ndarray  # (G,) int32

    def __post_init__(self) -> None:
        g = len(self.owner)
        if self.index.ntotal != g or len(self.start) != g:
            raise ValueError(
                f"width {self.width}: {self.index.ntotal} vectors, {g} owners, "
                f"{len(self.start)} starts"
            )


@dataclass
class _Taken:
    pair_id: int
    score: float
    span: tuple[int, int]
    width: int
    item: int


class DenseNgramRetriever:
    """Dense n-gram retrieval over one FAISS index per width (see the module docstring)."""

    def __init__(
        self,
        encoder: Encoder,
        indexes: Sequence[DenseIndex],
        pairs: PairTexts,
        params: DenseNgramParams,
    ) -> None:
        self.encoder, self.pairs, self.params = encoder, pairs, params
        self.indexes = {x.width: x for x in indexes}
        if sorted(self.indexes, reverse=True) != list(params.widths):
            raise ValueError("FAISS indexes do not match the widths of the parameters")
        for x in indexes:
            if x.index.d != encoder.dimension:
                raise ValueError(
                    f"width {x.width}: index dimension {x.index.d}, encoder {encoder.dimension}"
                )
            if len(x.owner) and (x.owner.min() < 0 or x.owner.max() >= len(pairs)):
                raise ValueError(f"width {x.width}: n-gram owners outside 0..{len(pairs) - 1}")

    def to_gpu(self, device: int) -> None:
        """Search on GPU `device` from now on (FAISS GPU clones, index_builder.retrieval.
        faiss_gpu); the encoder runs wherever its bundle's model is. Imported only here, so
        a CPU-only host never loads GPU code."""
        from index_builder.retrieval.faiss_gpu import index_to_gpu

        for w, x in list(self.indexes.items()):
            self.indexes[w] = replace(x, index=index_to_gpu(x.index, device))

    def encodes_with(self, model: nn.Module) -> bool:
        """Whether this store's vectors come from `model`'s own encoder (the very module), so
        that a translator of `model` can encode a query once for retrieval and decoding; an
        int8 or ONNX Runtime decoder made from it (`models.quantize`, `models.ort_decoder`)
        names it as its `float_model`."""
        return self.encoder.model is model or getattr(model, "float_model", None) is (
            self.encoder.model
        )

    def query_vectors(
        self, queries: Sequence[str], states: Sequence[torch.Tensor] | None = None
    ) -> tuple[list[list[int]], dict[int, dict[tuple[int, int], int]], dict[int, np.ndarray]]:
        """Sub-word ids of each query and, per width, its reduced n-gram vectors.

        Returns (ids, rows, vectors): ``rows[w][(q, start)]`` is the row of query q's n-gram at
        `start` in ``vectors[w]`` (M_w, D). Queries are encoded in chunks of the store's size,
        sorted by length (less padding); `states[q]`, when given, is query q's encoding
        `(T_q, D)` by this store's encoder (`Translator.source_states` of the same model), and
        nothing is encoded here.
        """
        ids = self.encoder.token_ids(queries)
        if states is not None:
            if len(states) != len(queries):
                raise ValueError(f"{len(states)} query encodings for {len(queries)} queries")
            for q, (x, toks) in enumerate(zip(states, ids, strict=True)):
                if toks and (x.dim() != 2 or tuple(x.shape) != (len(toks), self.encoder.dimension)):
                    raise ValueError(
                        f"query {q}: an encoding of shape {tuple(x.shape)} for {len(toks)} "
                        f"sub-words of dimension {self.encoder.dimension}: not this store's "
                        "encoder's"
                    )
        widths = self.params.widths
        present = sorted((q for q in range(len(ids)) if ids[q]), key=lambda q: (len(ids[q]), q))
        rows: dict[int, dict[tuple[int, int], int]] = {w: {} for w in widths}
        parts: dict[int, list[np.ndarray]] = {w: [] for w in widths}
        bs = self.params.batch_size
        for lo in range(0, len(present), bs):
            chunk = present[lo : lo + bs]
            chunk_ids = [ids[q] for q in chunk]
            if states is None:
                blocks = encode_chunk(self.encoder, chunk_ids, widths, False)
            else:
                made = pad_sequence([states[q].float().cpu() for q in chunk], batch_first=True)
                blocks = ngram_blocks(made, chunk_ids, widths, False)
            for w, block in zip(widths, blocks, strict=True):
                base = sum(len(p) for p in parts[w])
                for g, (r, a) in enumerate(zip(block.row, block.start, strict=True)):
                    rows[w][(chunk[int(r)], int(a))] = base + g
                parts[w].append(block.vectors)
        dim = self.encoder.dimension
        vectors = {
            w: np.concatenate(parts[w]) if parts[w] else np.zeros((0, dim), np.float32)
            for w in widths
        }
        return ids, rows, vectors

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
        states: Sequence[torch.Tensor] | None = None,
    ) -> list[list[Neighbour]]:
        """`Retriever.search`; `states`: the queries' encodings made already (see
        `query_vectors`)."""
        check_search_args(queries, k, exclude)
        return self.search_encoded(self.query_vectors(queries, states), k, exclude)

    def search_encoded(
        self,
        encoded: tuple[list[list[int]], dict[int, dict[tuple[int, int], int]], dict[int, Any]],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
    ) -> list[list[Neighbour]]:
        """`search` of queries encoded by `query_vectors` (a caller that also compares them
        with other vectors, the live edits' overlay, encodes them once)."""
        ids, rows, vectors = encoded
        hits = {}
        for w, x in self.indexes.items():
            depth = min(_FIRST_DEPTH, x.index.ntotal)
            if depth and len(vectors[w]):
                hits[w] = (*x.index.search(vectors[w], depth), depth)
        out = []
        for q, toks in enumerate(ids):
            banned = set(exclude[q]) if exclude is not None else set()
            taken: list[_Taken] = []
            for w in self.params.widths:
                if w not in hits:
                    continue
                for span in ngram_spans(len(toks), w):
                    found = self._nearest(w, hits[w], vectors[w], rows[w][(q, span[0])], banned)
                    if found is None:
                        continue
                    item, distance = found
                    pair_id = int(self.indexes[w].owner[item])
                    banned.add(pair_id)
                    taken.append(_Taken(pair_id, -distance, span, w, item))
            order = sorted(range(len(taken)), key=lambda i: (-taken[i].score, i))[:k]
            out.append([self._neighbour(taken[i]) for i in order])
        return out

    def _nearest(
        self,
        width: int,
        hits: tuple[np.ndarray, np.ndarray, int],
        vectors: np.ndarray,
        row: int,
        banned: set[int],
    ) -> tuple[int, float] | None:
        """(FAISS id, squared distance) of the nearest n-gram whose pair is not banned.

        FAISS pads missing hits with id -1 (fewer vectors than asked, or an approximate index
        that found no more): those are skipped, and the search is deepened only while it
        returned a full list and the index holds more.
        """
        x = self.indexes[width]
        distances, labels, depth = hits[0][row], hits[1][row], hits[2]
        while True:
            for d, g in zip(distances.tolist(), labels.tolist(), strict=True):
                if g >= 0 and int(x.owner[g]) not in banned:
                    return g, d
            if (labels < 0).any() or depth >= x.index.ntotal:
                return None
            depth = min(depth * 4, x.index.ntotal)
            d2, l2 = x.index.search(vectors[row : row + 1], depth)
            distances, labels = d2[0], l2[0]

    def _neighbour(self, t: _Taken) -> Neighbour:
        x = self.indexes[t.width]
        source = self.pairs.sources[t.pair_id]
        start = int(x.start[t.item])
        theirs = self.encoder.token_ids([source])[0]
        return Neighbour(
            pair_id=t.pair_id,
            source=source,
            target=self.pairs.targets[t.pair_id],
            score=round(float(t.score), SCORE_DECIMALS),
            span=t.span,
            matched=self.encoder.piece_text(theirs[start : start + t.width]),
        )
