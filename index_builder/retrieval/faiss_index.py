"""FAISS indexes of n-gram vectors: chosen by a factory string, trained on a sample, measured
against exact search, written with `faiss.write_index` and read back only from verified bytes.

`Flat` is exact. `IVF…` (with `,Flat`, `,PQ…`, optionally `,RFlat` to re-rank) and `HNSW…`
are approximate: their search knobs (`nprobe`, `efSearch`) are a FAISS ParameterSpace string
kept with the store (`DEFAULT_SEARCH` when none is given), and their recall@10 against exact
search is measured on a sample of corpus vectors at build time.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
from tqdm import tqdm

RECALL_K = 10
_ADD_BLOCK = 1 << 16


def default_search(factory: str) -> str:
    """Search knobs for an approximate factory string: deep enough for recall@10 >= 0.95 at
    our store sizes (see docs/retrieval-stores.md); empty for Flat."""
    if "HNSW" in factory:
        return "efSearch=128"
    if factory.startswith("IVF"):
        return "nprobe=16"
    return ""


def check_factory(factory: str, dimension: int, search: str) -> None:
    """ValueError naming the problem when FAISS cannot build `factory` or set `search`."""
    try:
        index = faiss.index_factory(dimension, factory, faiss.METRIC_L2)
    except RuntimeError as e:
        raise ValueError(f"FAISS cannot build index {factory!r}: {str(e).splitlines()[0]}") from e
    apply_search(index, search)


def apply_search(index: faiss.Index, search: str) -> None:
    if not search:
        return
    try:
        faiss.ParameterSpace().set_index_parameters(index, search)
    except RuntimeError as e:
        raise ValueError(f"FAISS search parameters {search!r}: {str(e).splitlines()[0]}") from e


def build_index(
    vectors: np.ndarray,
    factory: str,
    search: str,
    train_sample: int,
    seed: int,
    progress: bool = False,
    label: str = "",
) -> faiss.Index:
    """A `factory` index holding `vectors` (N, D) float32, in order (FAISS id = row).

    Indexes that need training are trained on at most `train_sample` rows drawn with `seed`.
    """
    n, dim = vectors.shape
    index = faiss.index_factory(dim, factory, faiss.METRIC_L2)
    if not index.is_trained:
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(n, size=min(n, train_sample), replace=False))
        with tqdm(total=1, desc=f"training {factory} {label}", disable=not progress) as bar:
            try:
                index.train(np.ascontiguousarray(vectors[rows]))
            except RuntimeError as e:
                msg = str(e).splitlines()[0]
                raise ValueError(f"cannot train {factory!r} on {len(rows)} vectors: {msg}") from e
            bar.update(1)
    with tqdm(total=n, desc=f"adding {label}", unit=" vectors", disable=not progress) as bar:
        for lo in range(0, n, _ADD_BLOCK):
            block = np.ascontiguousarray(vectors[lo : lo + _ADD_BLOCK])
            index.add(block)
            bar.update(len(block))
    apply_search(index, search)
    return index


def recall_at_k(
    index: faiss.Index, vectors: np.ndarray, sample: int, seed: int, k: int = RECALL_K
) -> tuple[float, int]:
    """(recall@k, queries): the share of the exact k nearest (brute force, `faiss.knn`) that
    `index` returns, averaged over up to `sample` corpus vectors used as queries."""
    probe = RecallProbe(vectors, sample, seed, k)
    return probe.recall(index), probe.queries


class RecallProbe:
    """A sample of corpus vectors and their exact k nearest, computed once, so that recall can
    be measured under several search settings of one index at the cost of the searches."""

    def __init__(self, vectors: np.ndarray, sample: int, seed: int, k: int = RECALL_K) -> None:
        n = len(vectors)
        rng = np.random.default_rng(seed + 1)
        rows = np.sort(rng.choice(n, min(n, sample), replace=False)) if n else np.zeros(0, int)
        self.sample = np.ascontiguousarray(vectors[rows])
        self.k = min(k, n)
        self.exact = (
            faiss.knn(self.sample, vectors, self.k, metric=faiss.METRIC_L2)[1] if n else None
        )

    @property
    def queries(self) -> int:
        return len(self.sample)

    def recall(self, index: faiss.Index) -> float:
        if self.exact is None:
            return 1.0
        _, approx = index.search(self.sample, self.k)
        hits = [len(set(a[a >= 0]) & set(e[e >= 0])) / max(1, int((e >= 0).sum()))
                for a, e in zip(approx, self.exact, strict=True)]  # fmt: skip
        return float(np.mean(hits))


# The knob that trades search time for recall, per index family. nprobe is bounded by the
# number of inverted lists (all probed: exhaustive); efSearch by this.
_DEPTH_KNOBS = {"IVF": "nprobe", "HNSW": "efSearch"}
_MAX_EF_SEARCH = 4096


def depth_knob(factory: str) -> str:
    """The search knob of `factory` that buys recall with time; ValueError if it has none."""
    for prefix, knob in _DEPTH_KNOBS.items():
        if factory.startswith(prefix) or f",{prefix}" in factory:
            return knob
    raise ValueError(f"no search depth to tune for {factory!r} (IVF… and HNSW… have one)")


def with_depth(search: str, knob: str, value: int) -> str:
    """`search` with `knob` set to `value` (added when absent), other settings kept."""
    parts = [p for p in search.split(",") if p and not p.startswith(f"{knob}=")]
    return ",".join([f"{knob}={value}", *parts])


def depth_of(search: str, knob: str) -> int | None:
    """`knob`'s value in `search`, None when it is not set."""
    for part in search.split(","):
        if part.startswith(f"{knob}="):
            return int(part.split("=", 1)[1])
    return None


def tune_search(
    indexes: list[faiss.Index],
    probes: list[RecallProbe],
    factory: str,
    search: str,
    target: float,
) -> tuple[str, list[float]]:
    """The shallowest search (doubling `nprobe` or `efSearch` from `search`'s value) at which
    every index recalls at least `target` of the exact top k; (search, recalls).

    One setting serves all the indexes (a store keeps one search string). ValueError when the
    deepest setting still misses the target: the codes are too coarse for it, and a store that
    silently recalls less than it was asked to is worse than no store.
    """
    knob = depth_knob(factory)
    depth = depth_of(search, knob) or 1
    deepest = (
        _MAX_EF_SEARCH
        if knob == "efSearch"
        else max(i.nlist for i in map(faiss.extract_index_ivf, indexes))
    )
    while True:
        search = with_depth(search, knob, depth)
        recalls = []
        for index, probe in zip(indexes, probes, strict=True):
            apply_search(index, search)
            recalls.append(probe.recall(index))
        if min(recalls) >= target:
            return search, recalls
        if depth >= deepest:
            raise ValueError(
                f"{factory} recalls {min(recalls):.3f} of the exact top {probes[0].k} at "
                f"{search} (the deepest search), below the target {target}: use finer codes "
                "(e.g. SQ8 instead of PQ) or a lower target"
            )
        depth = min(depth * 2, deepest)


def write_index(index: faiss.Index, path: Path) -> None:
    faiss.write_index(index, str(path))


def index_from_bytes(data: bytes) -> faiss.Index:
    """The FAISS index serialised in `data`: bytes a store has already checked, so that FAISS
    parses exactly the bytes that were hashed; ValueError when FAISS cannot read them."""
    try:
        return faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
    except RuntimeError as e:
        raise ValueError(f"not a readable FAISS index: {str(e).splitlines()[0]}") from e


def nonfinite_vectors(index: faiss.Index) -> tuple[int, int]:
    """(how many, first id) of the vectors `index` holds, as it reconstructs them, that have a
    non-finite component; (0, -1) when none has. Such a vector makes distances NaN or inf."""
    count, first = 0, -1
    for lo in range(0, index.ntotal, _ADD_BLOCK):
        block = index.reconstruct_n(lo, min(_ADD_BLOCK, index.ntotal - lo))  # (B, D)
        bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if len(bad) and first < 0:
            first = lo + int(bad[0])
        count += len(bad)
    return count, first
