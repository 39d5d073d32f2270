"""Exact IDF-similarity search over an inverted index of term sets, with safe pruning.

Items (corpus sentences, or corpus n-grams) and queries are sets of terms with IDF weights f.
With I = sum of f over the shared terms, and |X| the sum of f over a set,

    sim(q, c) = 2 I - (|q| + |c| - I) = 3 I - |q| - |c|,

so for one query the ranking key is ``3 I - |c|`` (|q| is a constant). I for every item that
shares a term with the query is one sparse product, query weights x postings; nothing loops
over the corpus in Python. An item that shares no term with positive IDF is not a candidate:
its "similarity" would only measure how short it is.

Pruning: a frequent ("heavy") term's posting list can cover most of the corpus, and almost
every query contains one. The product is first taken over the query's light terms only; each
candidate's full I is then one gather over its own few terms. An item reached only through
heavy terms H has I <= |H| and I <= |c|, so its key 3I - |c| is at most 2|H|, at most
3|H| - |c| and at most 2|c|: when the k-th best key so far beats 2|H|, the answer is exact.
Otherwise the rarest heavy terms are moved in until the rest, H', has 2|H'| below that key
(which can only rise), and of a moved term's items only those with |c| in the window
[kth / 2, 3|H| - kth] are scored (each term's items are kept sorted by |c|, so the window is
a slice); only when that is still a large share of the index is the row recomputed with all
its terms at once. Before all this, for k = 1, an item with exactly the query's term set is
looked up by hash: it is the best possible match. The answer never depends on the pruning,
only the time does (tests compare against brute force and against no pruning).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

# Scores are rounded so that ties between equal term sets (summed in different orders) break
# the same way everywhere: by item index, i.e. by pair id, then by position in the sentence.
DECIMALS = 9
_MARGIN = 1e-6
_FEW = 64  # fewer candidates than this are scored without a bound check first
_MAX_PADDED = 16  # items with at most this many terms get a padded (G, P) term table


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
    heavy_weight: np.ndarray  # (G,) float64: the sum of f over the item's heavy terms
    heavy_df: int  # terms in more than this many items are "heavy" (pruned first)
    sets: ExactSets  # items by their set of positive-IDF terms
    lists: ItemLists  # each item's terms, and each term's items by |c|

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
        # Plain arrays: slicing a memory map costs a Python call per slice, and top() slices.
        indptr, indices, owner = np.asarray(indptr), np.asarray(indices), np.asarray(owner)
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
        heavy_f = np.where(np.diff(indptr) > heavy_df, idf, 0.0)
        heavy_weight = np.bincount(indices, weights=heavy_f[term_of_entry], minlength=n_items)
        lists = ItemLists.build(postings, item_weight)
        return cls(postings, idf, owner, item_weight, heavy_weight, heavy_df, sets, lists)

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


@dataclass(frozen=True)
class ItemLists:
    """The postings turned around, derived at load (0.17 s for both bible n-gram indexes).

    `table` (or `ragged`, for long items such as sentences): each item's distinct terms, so
    I of any candidate set is one gather over a few terms per item, not a binary search per
    (term, candidate). `by_weight`, `sorted_weight`, `rank_ptr`/`ranks`: each term's items
    in ascending |c| (as ranks into `by_weight`), so "the items of term t with |c| in a
    window" is a slice (see `RowSearch`).
    """

    by_weight: np.ndarray  # (G,) items in ascending |c|, ascending item within equal |c|
    sorted_weight: np.ndarray  # (G,) |c| of by_weight
    rank_ptr: np.ndarray  # (V + 1,)
    ranks: np.ndarray  # (entries,) each term's items as positions in by_weight, ascending
    table: np.ndarray | None  # (G, P) int32: terms ascending, padded with V
    ragged: tuple[np.ndarray, np.ndarray] | None  # (ptr, terms) CSR when there is no table

    @classmethod
    def build(cls, postings: sp.csr_matrix, item_weight: np.ndarray) -> ItemLists:
        ones = np.ones(postings.nnz, dtype=np.int8)
        incidence = sp.csr_matrix((ones, postings.indices, postings.indptr), shape=postings.shape)
        items = incidence.T.tocsr()  # (G, V); a transpose is a counting sort: terms ascending
        by_weight = np.argsort(item_weight, kind="stable").astype(postings.indices.dtype)
        ranked = items[by_weight].T.tocsr()  # (V, G) over weight ranks, ascending per term
        items.sort_indices()
        ranked.sort_indices()
        counts = np.diff(items.indptr)
        table, ragged = None, (items.indptr, items.indices)
        if len(counts) and counts.max() <= _MAX_PADDED:  # n-grams; sentences can be long
            table = np.full((len(counts), counts.max()), postings.shape[0], dtype=np.int32)
            item = np.repeat(np.arange(len(counts)), counts)
            table[item, np.arange(items.nnz) - items.indptr[item]] = items.indices
            ragged = None
        return cls(by_weight, item_weight[by_weight], ranked.indptr, ranked.indices, table, ragged)

    def within(self, terms: Sequence[int], low: float, high: float) -> np.ndarray:
        """The items of `terms` with low <= |c| <= high (an item once per term it has)."""
        lo = int(np.searchsorted(self.sorted_weight, low, side="left"))
        hi = int(np.searchsorted(self.sorted_weight, high, side="right"))
        parts = []
        for t in terms:
            ranks = self.ranks[self.rank_ptr[t] : self.rank_ptr[t + 1]]
            a, b = np.searchsorted(ranks, [lo, hi]).tolist()
            parts.append(ranks[a:b])
        if not parts:
            return np.zeros(0, dtype=self.by_weight.dtype)
        return self.by_weight[np.concatenate(parts)]

    def intersections(self, items: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """I per item: the sum of `weights` (dense over the vocabulary, plus a 0 at index V
        for the padding) over its terms, in ascending term order: equal sets, equal sums."""
        if not len(items):
            return np.zeros(0)
        if self.table is not None:
            # One row (cache line) per candidate; the columns added left to right, which
            # is faster than sum(axis=1) over rows this short.
            values = weights[self.table[items]]  # (m, P)
            inter = values[:, 0].copy()
            for j in range(1, values.shape[1]):
                inter += values[:, j]
            return inter
        assert self.ragged is not None
        ptr, terms = self.ragged
        starts = ptr[items]
        counts = ptr[items + 1] - starts  # >= 1: a candidate is in some posting list
        values = weights[terms[concat_ranges(starts, starts + counts)]]
        return np.add.reduceat(values, np.cumsum(counts) - counts)


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


def concat_ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, e) for each (s, e), vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return np.arange(total, dtype=np.int64) + offsets


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
    works on that row's candidates, plus the few items of its heavy terms light enough to
    still win (see the module docstring).
    """

    def __init__(self, index: InvertedIndex, queries: QueryTerms) -> None:
        self.index = index
        self.queries = queries
        q = queries.matrix
        heavy_terms = np.diff(index.postings.indptr) > index.heavy_df
        self._is_heavy = heavy_terms[q.indices]  # per entry of q
        # A copy: eliminate_zeros compacts indices and indptr in place.
        light = sp.csr_matrix(
            (np.where(self._is_heavy, 0.0, q.data), q.indices.copy(), q.indptr.copy()),
            shape=q.shape,
        )
        light.eliminate_zeros()
        self._cand = (light @ index.postings).tocsr()  # (M, G): items with a light term
        self._twin_lo, self._twin_hi = index.sets.ranges(q)
        self._dense = np.zeros(q.shape[1] + 1)  # the row's f by term; [V]: padding
        # How often pruning needed help (for tests and benchmarks): rows whose candidate set
        # was widened by some heavy terms, and rows computed with all their terms.
        self.expanded_rows = 0
        self.full_rows = 0

    def top(self, row: int, k: int, banned: Collection[int] = ()) -> list[tuple[int, float]]:
        """The k best (item, 3I - |c|) of `row` whose owner is not banned, best first."""
        q = self.queries.matrix
        lo, hi = q.indptr[row], q.indptr[row + 1]
        terms, f_terms = q.indices[lo:hi], q.data[lo:hi]
        if not len(terms):
            return []
        if k == 1:
            hit = self._exact(row, terms, banned)
            if hit is not None:
                return [(hit, round(2.0 * float(f_terms.sum()), DECIMALS))]
        heavy = self._is_heavy[lo:hi]
        self._dense[terms] = f_terms
        try:
            return self._top(row, terms[heavy], f_terms[heavy], k, banned)
        finally:
            self._dense[terms] = 0.0

    def _top(
        self, row: int, heavy: np.ndarray, heavy_f: np.ndarray, k: int, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        """`top` past the twin lookup, with `_dense` holding the row (see the module doc)."""
        idx = self.index
        mass = float(heavy_f.sum())  # |H|
        light = self._light_candidates(row, mass, k, banned)
        best = self._best(light, self._keys(light), k, banned)
        order = np.argsort(-heavy_f, kind="stable")  # rarest first: the shortest lists
        rest = list(zip(heavy[order].tolist(), heavy_f[order].tolist(), strict=True))
        rest_mass = mass
        scored = np.sort(light) if k > 1 else light  # sorted: for `_member`
        gathered = 0
        while rest:
            kth = best[-1][1] if len(best) == k else -np.inf
            if kth > 2.0 * rest_mass + _MARGIN:
                break  # items reached only through the rest: key <= 2 |rest| < kth
            moved = []
            # Until the rest cannot reach kth; with no kth yet, the rarest term alone.
            while rest and (not moved or kth > -np.inf and 2.0 * rest_mass >= kth - _MARGIN):
                term, f = rest.pop(0)
                moved.append(term)
                rest_mass -= f
            # An item without a light term has I <= |H| and I <= |c|, so its key 3I - |c| is
            # at most 3|H| - |c| and at most 2|c|: only a window of |c| can reach kth.
            new = idx.lists.within(moved, (kth - _MARGIN) / 2.0, 3.0 * mass - kth + _MARGIN)
            gathered += len(new)
            if gathered > idx.n_items // 8:
                self.full_rows += 1
                full = self.queries.matrix[row] @ idx.postings  # every term at once
                keys = 3.0 * full.data - idx.item_weight[full.indices]
                return self._best(full.indices, keys, k, banned)
            if kth > -np.inf and len(new) > _FEW:
                # Tighter, per item: I <= its heavy weight as well. (An item that has a light
                # term too may be dropped: it was scored with the light candidates.)
                bound = 3.0 * np.minimum(mass, idx.heavy_weight[new]) - idx.item_weight[new]
                new = new[bound >= kth - _MARGIN]
            if k > 1:  # _best needs distinct items; k = 1 takes any copy (same exact key)
                new = np.unique(new)
                new = new[~_member(scored, new)]
                scored = np.union1d(scored, new)
            found = self._best(new, self._keys(new), k, banned)
            best = sorted(best + found, key=lambda ik: (-ik[1], ik[0]))[:k]
        if rest_mass < mass:
            self.expanded_rows += 1
        return best

    def _light_candidates(
        self, row: int, mass: float, k: int, banned: Collection[int]
    ) -> np.ndarray:
        """The row's items with a light term, less those that provably cannot be the best.

        The product gives each its light share L of I; its heavy share is between 0 and
        min(|H|, its heavy weight). For k = 1, when the item with the best lower bound
        3L - |c| is allowed, items whose upper bound is below that cannot win.
        """
        idx = self.index
        lo, hi = self._cand.indptr[row], self._cand.indptr[row + 1]
        items = self._cand.indices[lo:hi]
        if k > 1 or len(items) <= _FEW:
            return items
        weight = idx.item_weight[items]
        low = 3.0 * self._cand.data[lo:hi] - weight
        j = int(np.argmax(low))
        if banned and int(idx.owner[items[j]]) in banned:
            return items
        high = low + 3.0 * np.minimum(mass, idx.heavy_weight[items])
        return items[high >= low[j] - _MARGIN]

    def _keys(self, items: np.ndarray) -> np.ndarray:
        """3I - |c| of `items` against the row in `_dense`."""
        inter = self.index.lists.intersections(items, self._dense)
        return 3.0 * inter - self.index.item_weight[items]

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
        self, items: np.ndarray, keys: np.ndarray, k: int, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        """Top k by (rounded key descending, item ascending), banned owners left out.

        Only candidates within a hair of the k-th key are rounded and sorted. For k = 1,
        `keys` is overwritten (see `_best1`).
        """
        idx = self.index
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
            if len(near) == 1:  # the common case: no tie to break
                i = int(near[0])
                if owners is None or int(owners[i]) not in banned:
                    return [(int(items[i]), float(np.round(keys[near], DECIMALS)[0]))]
                keys[owners == owners[i]] = -np.inf
                continue
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
