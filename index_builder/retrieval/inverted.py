"""Exact IDF-similarity search over an inverted index of term sets, with safe pruning.

Items (corpus sentences, or corpus n-grams) and queries are sets of terms with IDF weights f.
With I = sum of f over the shared terms, and |X| the sum of f over a set,

    sim(q, c) = 2 I - (|q| + |c| - I) = 3 I - |q| - |c|,

so for one query the ranking key is ``3 I - |c|`` (|q| is a constant). I for every item that
shares a term with the query is one sparse product, query weights x postings; nothing loops
over the corpus in Python. An item that shares no term with positive IDF is not a candidate:
its "similarity" would only measure how short it is.

Pruning: a frequent ("heavy") term's posting list can cover most of the corpus, and almost
every query contains one. The product is first taken over the query's light terms only; the
heavy terms' share of I is then added for those candidates by binary search in the (sorted)
heavy posting lists. An item reached only through heavy terms H has I <= |H| and |c| >= I, so
its key is at most 2 |H|; when the k-th best light candidate scores above that, the answer is
exact, otherwise the row is recomputed with all its terms. The answer never depends on the
pruning, only the time does (tests compare against brute force with pruning on and off).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

# Scores are rounded so that ties between equal term sets (summed in different orders) break
# the same way everywhere: by item index, i.e. by pair id, then by position in the sentence.
DECIMALS = 9
_MARGIN = 1e-6


@dataclass(frozen=True)
class InvertedIndex:
    """Items as term sets: postings (V, G) with sorted item ids per term, and their owners.

    `owner[g]` is the pair id of item g; items are ordered by owner, so the item order is
    also the tie-break order.
    """

    postings: sp.csr_matrix  # (V, G), data all 1.0
    idf: np.ndarray  # (V,) float64
    owner: np.ndarray  # (G,) int
    item_weight: np.ndarray  # (G,) float64: |c|, the sum of f over the item's distinct terms
    heavy_df: int  # terms in more than this many items are "heavy" (pruned first)

    @classmethod
    def from_arrays(
        cls,
        indptr: np.ndarray,
        indices: np.ndarray,
        owner: np.ndarray,
        idf: np.ndarray,
        heavy_df: int | None = None,
    ) -> InvertedIndex:
        """Wrap stored postings; derive |c| per item. `heavy_df` None: a size-based default."""
        n_items = len(owner)
        _check_postings(indptr, indices, len(idf), n_items)
        data = np.ones(len(indices), dtype=np.float64)
        postings = sp.csr_matrix((data, indices, indptr), shape=(len(idf), n_items), copy=False)
        postings.has_sorted_indices = True  # written sorted by `build_postings`
        term_of_entry = np.repeat(np.arange(len(idf)), np.diff(indptr))
        item_weight = np.bincount(indices, weights=idf[term_of_entry], minlength=n_items)
        if heavy_df is None:
            heavy_df = default_heavy_df(n_items)
        return cls(postings, idf, owner, item_weight, heavy_df)

    @property
    def n_items(self) -> int:
        return self.postings.shape[1]


def _check_postings(indptr: np.ndarray, indices: np.ndarray, n_vocab: int, n_items: int) -> None:
    """Refuse postings that would make scipy read out of bounds (a damaged or foreign store)."""
    if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise ValueError("postings must be integer arrays")
    if len(indptr) != n_vocab + 1 or indptr[0] != 0 or indptr[-1] != len(indices):
        raise ValueError(f"postings pointer does not fit {n_vocab} terms, {len(indices)} entries")
    if np.any(np.diff(indptr) < 0):
        raise ValueError("postings pointer decreases")
    if len(indices) and (indices.min() < 0 or indices.max() >= n_items):
        raise ValueError(f"postings name items outside 0..{n_items - 1}")
    rising = np.diff(indices.astype(np.int64)) > 0
    starts = indptr[1:-1]
    rising[starts[(starts > 0) & (starts < len(indices))] - 1] = True  # a new term's list
    if not rising.all():
        raise ValueError("postings are not sorted and distinct within a term")


def default_heavy_df(n_items: int) -> int:
    """Terms in more than ~0.5% of the items go to the pruned path (about the 100 commonest)."""
    return max(32, n_items // 200)


def build_postings(
    item_ptr: np.ndarray, item_terms: np.ndarray, n_vocab: int
) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the postings of items given as CSR term lists (repeats allowed)."""
    n_items = len(item_ptr) - 1
    ones = np.ones(len(item_terms), dtype=np.int8)
    incidence = sp.csr_matrix((ones, item_terms, item_ptr), shape=(n_items, n_vocab))
    incidence.sum_duplicates()  # a term twice in an n-gram is still one set member
    postings = incidence.T.tocsr()
    postings.sort_indices()
    return postings.indptr.astype(np.int64), postings.indices.astype(np.int32)


@dataclass(frozen=True)
class QueryTerms:
    """Query rows (term sets) for one index: CSR (M, V) of the IDF of each row's known terms.

    `weight[r]` is |q|, which also counts unknown terms (see `IdfTerms.query_sets`).
    """

    matrix: sp.csr_matrix
    weight: np.ndarray


def _select(keys: np.ndarray, items: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best by (key descending, item ascending)."""
    if len(keys) > k:
        kth = np.partition(keys, len(keys) - k)[len(keys) - k]
        keep = np.flatnonzero(keys >= kth)
        keys, items = keys[keep], items[keep]
    else:
        keep = np.arange(len(keys))
    order = np.lexsort((items, -keys))[:k]
    return keep[order]


class RowSearch:
    """Scores a batch of query rows against one index; `top` answers one row at a time.

    The light-term product for the whole batch is one sparse product; each `top` call then
    works on that row's candidates only.
    """

    def __init__(self, index: InvertedIndex, queries: QueryTerms) -> None:
        self.index = index
        self.queries = queries
        q = queries.matrix
        heavy_terms = np.diff(index.postings.indptr) > index.heavy_df
        is_heavy = heavy_terms[q.indices]
        # Copies: eliminate_zeros compacts indices and indptr in place.
        self._light = sp.csr_matrix(
            (np.where(is_heavy, 0.0, q.data), q.indices.copy(), q.indptr.copy()), shape=q.shape
        )
        self._light.eliminate_zeros()
        self._heavy = sp.csr_matrix(
            (np.where(is_heavy, q.data, 0.0), q.indices.copy(), q.indptr.copy()), shape=q.shape
        )
        self._heavy.eliminate_zeros()
        self._cand = (self._light @ index.postings).tocsr()  # (M, G): light share of I
        self.full_rows = 0  # rows the pruning could not settle (for tests and benchmarks)

    def top(self, row: int, k: int, banned: Collection[int] = ()) -> list[tuple[int, float]]:
        """The k best (item, 3I - |c|) of `row` whose owner is not banned, best first."""
        idx = self.index
        lo, hi = self._cand.indptr[row], self._cand.indptr[row + 1]
        items = self._cand.indices[lo:hi]
        inter = self._cand.data[lo:hi].copy()
        hlo, hhi = self._heavy.indptr[row], self._heavy.indptr[row + 1]
        heavy_ids, heavy_f = self._heavy.indices[hlo:hhi], self._heavy.data[hlo:hhi]
        for term, f in zip(heavy_ids, heavy_f, strict=True):
            plist = idx.postings.indices[idx.postings.indptr[term] : idx.postings.indptr[term + 1]]
            pos = np.minimum(np.searchsorted(plist, items), len(plist) - 1)
            inter += f * (plist[pos] == items)
        best = self._best(items, inter, k, banned)
        bound = 2.0 * float(heavy_f.sum())
        if len(heavy_ids) and (len(best) < k or best[-1][1] <= bound + _MARGIN):
            self.full_rows += 1
            full = self.queries.matrix[row] @ idx.postings  # every term: exact, slower
            best = self._best(full.indices, full.data, k, banned)
        return best

    def _best(
        self, items: np.ndarray, inter: np.ndarray, k: int, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        idx = self.index
        keys = np.round(3.0 * inter - idx.item_weight[items], DECIMALS)
        if banned:
            ok = ~np.isin(idx.owner[items], np.fromiter(banned, dtype=np.int64))
            items, keys = items[ok], keys[ok]
        pick = _select(keys, items, k)
        return [(int(items[i]), float(keys[i])) for i in pick]
