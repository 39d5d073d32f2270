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
its key is at most 2 |H|; when the k-th best candidate scores above that, the answer is
exact. Otherwise the rarest heavy terms join the candidate set until the rest, H', has
2 |H'| below the k-th key found so far (which can only rise), and that answer is exact; only
when nearly everything would join is the row recomputed with all its terms at once. Before
all this, for k = 1, an item with exactly the query's term set is looked up by hash: it is
the best possible match. The answer never depends on the pruning, only the time does (tests
compare against brute force with pruning on and off).
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
    sets: ExactSets  # items by their set of positive-IDF terms

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
        sets = ExactSets.build(indices, term_of_entry, idf, n_items)
        return cls(postings, idf, owner, item_weight, heavy_df, sets)

    @property
    def n_items(self) -> int:
        return self.postings.shape[1]


@dataclass(frozen=True)
class ExactSets:
    """Items grouped by their set of positive-IDF terms, through an order-free 64-bit hash.

    An item whose positive terms are exactly the query's has the highest possible key,
    ``2 |q|`` (3I - |c| <= 2I <= 2|q|, with equality only for the same set), so when one
    exists it is the answer and no product is needed. Most query n-grams made only of
    frequent words ("and the", "of the lord") have such a twin; they are the expensive ones.
    Hash hits are verified against the postings, so a collision cannot change an answer.
    """

    term_hash: np.ndarray  # (V,) uint64; 0 for terms with f = 0
    sorted_hash: np.ndarray  # (G,) uint64, ascending
    order: np.ndarray  # (G,) items in hash order, ascending item within equal hashes
    n_terms: np.ndarray  # (G,) number of positive-IDF terms of each item

    @classmethod
    def build(
        cls, indices: np.ndarray, term_of_entry: np.ndarray, idf: np.ndarray, n_items: int
    ) -> ExactSets:
        rng = np.random.default_rng(20190602)  # fixed: hashes are rebuilt at every load
        term_hash = rng.integers(1, 2**64 - 1, size=len(idf), dtype=np.uint64, endpoint=True)
        term_hash[idf <= 0] = 0
        item_hash = np.zeros(n_items, dtype=np.uint64)
        np.add.at(item_hash, indices, term_hash[term_of_entry])  # wraps mod 2^64
        positive = idf[term_of_entry] > 0
        n_terms = np.bincount(indices[positive], minlength=n_items).astype(np.int32)
        order = np.argsort(item_hash, kind="stable")
        return cls(term_hash, item_hash[order], order, n_terms)

    def ranges(self, rows: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
        """For each row (a term set), the range of `order` holding items with its hash."""
        h = np.zeros(rows.shape[0], dtype=np.uint64)
        nonempty = np.diff(rows.indptr) > 0
        if nonempty.any():
            sums = np.add.reduceat(self.term_hash[rows.indices], rows.indptr[:-1][nonempty])
            h[nonempty] = sums  # uint64 additions wrap mod 2^64, like the build
        lo = np.searchsorted(self.sorted_hash, h, side="left")
        hi = np.searchsorted(self.sorted_hash, h, side="right")
        return lo, hi


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
        self._twin_lo, self._twin_hi = index.sets.ranges(q)
        # How often pruning needed help (for tests and benchmarks): rows whose candidate set
        # was widened by some heavy terms, and rows computed with all their terms.
        self.expanded_rows = 0
        self.full_rows = 0

    def top(self, row: int, k: int, banned: Collection[int] = ()) -> list[tuple[int, float]]:
        """The k best (item, 3I - |c|) of `row` whose owner is not banned, best first."""
        idx = self.index
        q = self.queries.matrix
        terms = q.indices[q.indptr[row] : q.indptr[row + 1]]
        f_terms = q.data[q.indptr[row] : q.indptr[row + 1]]
        if not len(terms):
            return []
        if k == 1:
            hit = self._exact(row, terms, banned)
            if hit is not None:
                return [(hit, round(2.0 * float(f_terms.sum()), DECIMALS))]
        lo, hi = self._cand.indptr[row], self._cand.indptr[row + 1]
        items = self._cand.indices[lo:hi]
        inter = self._cand.data[lo:hi].copy()
        hlo, hhi = self._heavy.indptr[row], self._heavy.indptr[row + 1]
        heavy_ids, heavy_f = self._heavy.indices[hlo:hhi], self._heavy.data[hlo:hhi]
        heavy = list(zip(heavy_ids.tolist(), heavy_f.tolist(), strict=True))
        for term, f in heavy:
            inter += f * _member(self._plist(term), items)
        heavy.sort(key=lambda tf: -tf[1])  # rarest first: the cheapest to move into the product
        moved_size = 0
        while True:
            best = self._best(items, inter, k, banned)
            bound = 2.0 * sum(f for _, f in heavy)
            if not heavy or (len(best) == k and best[-1][1] > bound + _MARGIN):
                return best
            # Move the rarest heavy terms into the candidate set until the items reachable
            # only through the rest cannot reach the current k-th key (one term if no k-th).
            target = best[-1][1] - _MARGIN if len(best) == k else np.inf
            moved = []
            while heavy and (not moved or 2.0 * sum(f for _, f in heavy) >= target):
                moved.append(heavy.pop(0)[0])
            moved_size += sum(len(self._plist(t)) for t in moved)
            if not heavy or moved_size > self.index.n_items // 8:
                self.full_rows += 1
                full = q[row] @ idx.postings  # every term at once
                return self._best(full.indices, full.data, k, banned)
            self.expanded_rows += 1
            items = np.union1d(items, np.concatenate([self._plist(t) for t in moved]))
            inter = np.zeros(len(items))
            for t, f in zip(terms.tolist(), f_terms.tolist(), strict=True):
                inter += f * _member(self._plist(t), items)

    def _plist(self, term: int) -> np.ndarray:
        p = self.index.postings
        return p.indices[p.indptr[term] : p.indptr[term + 1]]

    def _exact(self, row: int, terms: np.ndarray, banned: Collection[int]) -> int | None:
        """The first item with exactly the row's positive terms and an allowed owner."""
        idx, p = self.index, self.index.postings
        lo, hi = int(self._twin_lo[row]), int(self._twin_hi[row])
        if lo == hi:
            return None
        found = idx.sets.order[lo:hi]  # ascending items: the argsort was stable
        found = found[idx.sets.n_terms[found] == len(terms)]
        if banned:
            first = found[:64]
            owners = idx.owner[first].tolist()
            head = [i for i, o in zip(first.tolist(), owners, strict=True) if o not in banned]
            if head or len(found) <= 64:
                found = head
            else:
                found = found[~np.isin(idx.owner[found], np.fromiter(banned, dtype=np.int64))]
        for item in found[:8]:  # past the first, only a hash collision could fail the check
            item = int(item)
            if all(_contains(p.indices[p.indptr[t] : p.indptr[t + 1]], item) for t in terms):
                return item
        return None

    def _best(
        self, items: np.ndarray, inter: np.ndarray, k: int, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        """Top k by (rounded key descending, item ascending), banned owners left out.

        Only candidates within a hair of the k-th key are rounded and sorted.
        """
        idx = self.index
        keys = 3.0 * inter - idx.item_weight[items]
        if k == 1:
            return self._best1(items, keys, banned)
        if banned:
            ok = ~np.isin(idx.owner[items], np.fromiter(banned, dtype=np.int64))
            items, keys = items[ok], keys[ok]
        if len(keys) > k:
            kth = np.partition(keys, len(keys) - k)[len(keys) - k]
            near = np.flatnonzero(keys >= kth - _MARGIN)
            items, keys = items[near], keys[near]
        keys = np.round(keys, DECIMALS)
        order = np.lexsort((items, -keys))[:k]
        return [(int(items[i]), float(keys[i])) for i in order]

    def _best1(
        self, items: np.ndarray, keys: np.ndarray, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        """`_best` for k = 1 without a pass over all candidates per banned owner.

        Takes the top group (equal rounded key); if all its owners are banned, drops every
        candidate of those owners and looks again: at most len(banned) + 1 rounds. `keys` is
        the caller's scratch array and is overwritten.
        """
        owners = self.index.owner[items] if banned else None
        while len(keys):
            m = keys.max()
            if m == -np.inf:
                break
            near = np.flatnonzero(keys >= m - _MARGIN)
            rounded = np.round(keys[near], DECIMALS)
            group = near[rounded == rounded.max()]
            group = group[np.argsort(items[group], kind="stable")]
            if owners is None:
                return [(int(items[group[0]]), float(rounded.max()))]
            for i in group:
                if int(owners[i]) not in banned:
                    return [(int(items[i]), float(rounded.max()))]
            for o in set(owners[group].tolist()):
                keys[owners == o] = -np.inf
        return []


def _member(sorted_ids: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Boolean mask: which `items` occur in the sorted array `sorted_ids`."""
    if not len(sorted_ids):
        return np.zeros(len(items), dtype=bool)
    items = items.astype(sorted_ids.dtype, copy=False)  # else numpy casts the posting list
    pos = np.minimum(np.searchsorted(sorted_ids, items), len(sorted_ids) - 1)
    return sorted_ids[pos] == items


def _contains(sorted_ids: np.ndarray, item: int) -> bool:
    # Same dtype as the array: a mismatch makes numpy cast (copy) the whole posting list.
    pos = int(np.searchsorted(sorted_ids, sorted_ids.dtype.type(item)))
    return pos < len(sorted_ids) and int(sorted_ids[pos]) == item
