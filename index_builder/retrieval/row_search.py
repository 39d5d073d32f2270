"""Exact IDF top-k search over an `InvertedIndex` for batches of query rows, safely pruned.

I, |c| and the ranking key 3I - |c| are those of `index_builder.retrieval.inverted`.

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

For k = 1 (the n-gram walk), a row's kth is raised before any heavy window is read by scoring
a few seeds: the lightest items of each heavy term and the items holding both of its rarest
heavy terms. `RowSearch.best1` runs the same search for many rows at once, each step one set
of numpy calls over all rows' candidates (row positions alongside); it pays for batches,
not for one sentence's dozen rows, where `top` per row is as fast.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import scipy.sparse as sp

from index_builder.retrieval.inverted import InvertedIndex, QueryTerms, concat_ranges

# Scores are rounded so that ties between equal term sets (summed in different orders) break
# the same way everywhere: by item index, i.e. by pair id, then by position in the sentence.
DECIMALS = 9
_MARGIN = 1e-6
_FEW = 64  # fewer candidates than this are scored without a bound check first
_PROBES = 4  # lightest items per heavy term scored first, for a kth (k = 1)
_TWINS = 64  # exact twins per row that `RowSearch.best1` looks at; past them, `top` does
_OWNERS = 2**32  # (row position, owner) pairs as one int64: position * _OWNERS + owner


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
        self._heavy_terms = heavy_terms
        # How often pruning needed help (for tests and benchmarks): rows whose candidate set
        # was widened by some heavy terms, and rows computed with all their terms.
        self.expanded_rows = 0
        self.full_rows = 0
        self.exact_rows = 0  # rows answered by their exact twin

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
                self.exact_rows += 1
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
        kth = best[0][1] if best else -np.inf
        if k == 1 and len(rest) >= 2 and kth <= 2.0 * mass + _MARGIN:  # windows ahead
            best = self._seed(rest, mass, best, banned)
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
                return self._full(row, k, banned)
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

    def best1(
        self, rows: np.ndarray, banned: Sequence[Collection[int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """`top(row, 1, banned[i])` for many rows at once: per row the best item (-1: none)
        and its key, the same answers as `top`, ties included.

        The same search as `top`, each step vectorised over the rows (row ids alongside the
        candidates) instead of a Python call per row: exact twins, then the light candidates
        (first the one with the highest upper bound, whose key then prunes the rest), then
        rounds of heavy-term windows until no row's remaining heavy terms can win.
        """
        b = _RowBatch(self, np.asarray(rows, dtype=np.int64), banned)
        m = len(b.rows)
        item, key = np.full(m, -1, dtype=np.int64), np.full(m, -np.inf)
        scored = self._twins(b, item, key)
        self._probe(b, scored, item, key)
        self._light(b, scored, item, key)
        self._pairs(b, scored, item, key)
        full = self._heavy(b, scored, item, key)
        if len(full):  # the windows grew too large: every term at once (see `_full`)
            self.full_rows += len(full)
            item[full], key[full] = -1, -np.inf
            product = self.queries.matrix[b.rows[full]] @ self.index.postings
            pos = np.repeat(full, np.diff(product.indptr))
            items = product.indices.astype(np.int64)
            approx = 3.0 * product.data - self.index.item_weight[items]
            ok = b.allowed(pos, items)
            pos, items, approx = pos[ok], items[ok], approx[ok]
            near = approx >= _segment_max(pos, approx, m)[pos] - _MARGIN
            _merge(item, key, pos[near], items[near], b.keys(pos[near], items[near]))
        return item, key

    def _twins(self, b: _RowBatch, item: np.ndarray, key: np.ndarray) -> np.ndarray:
        """Answers the rows with an allowed exact twin (as `_exact`; the rare row whose first
        twin fails the check, or whose first _TWINS twins are all banned, goes to `top`).
        Returns the rows left to score."""
        idx = self.index
        lo, hi = self._twin_lo[b.rows], self._twin_hi[b.rows]
        rows = np.flatnonzero((b.n_terms > 0) & (hi > lo))
        stop = np.minimum(hi[rows], lo[rows] + _TWINS)
        pos = np.repeat(rows, stop - lo[rows])
        found = idx.sets.order[concat_ranges(lo[rows], stop)].astype(np.int64)
        ok = (idx.sets.n_terms[found] == b.n_terms[pos]) & b.allowed(pos, found)
        pos, found = pos[ok], found[ok]
        first = _firsts(pos)
        pos, found = pos[first], found[first]
        verified = b.gather(pos, found, b.counts) == b.n_terms[pos]
        item[pos[verified]] = found[verified]
        q = self.queries.matrix
        for p in pos[verified].tolist():
            f = q.data[q.indptr[b.rows[p]] : q.indptr[b.rows[p] + 1]]
            key[p] = round(2.0 * float(f.sum()), DECIMALS)
        self.exact_rows += int(verified.sum())
        m = len(b.rows)
        slow = np.zeros(m, dtype=bool)
        slow[pos[~verified]] = True  # a hash collision, most likely
        unseen = np.zeros(m, dtype=bool)
        unseen[rows[hi[rows] - lo[rows] > _TWINS]] = True
        unseen[pos] = False
        for p in np.flatnonzero(slow | unseen).tolist():
            found1 = self.top(int(b.rows[p]), 1, b.banned[p])
            if found1:
                item[p], key[p] = found1[0]
        return (b.n_terms > 0) & (item < 0) & ~slow & ~unseen

    def _probe(self, b: _RowBatch, scored: np.ndarray, item: np.ndarray, key: np.ndarray) -> None:
        lists = self.index.lists
        sel = b.heavy & scored[b.pos]
        pos, terms = b.pos[sel], b.terms[sel]
        lo = lists.rank_ptr[terms]
        hi = np.minimum(lists.rank_ptr[terms + 1], lo + _PROBES)
        ipos = np.repeat(pos, hi - lo)
        items = lists.by_weight[lists.ranks[concat_ranges(lo, hi)]].astype(np.int64)
        ok = b.allowed(ipos, items)
        _merge(item, key, ipos[ok], items[ok], b.keys(ipos[ok], items[ok]))

    def _light(self, b: _RowBatch, scored: np.ndarray, item: np.ndarray, key: np.ndarray) -> None:
        """The best of each row's light candidates (items sharing a light term with it).

        With L the light share of I, 3L - |c| <= key <= 3(L + min(|H|, heavy weight)) - |c|:
        the exact key of the candidate with the highest upper bound prunes the rest.
        """
        idx, cand = self.index, self._cand
        rows = np.flatnonzero(scored)
        lo, hi = cand.indptr[b.rows[rows]], cand.indptr[b.rows[rows] + 1]
        pos = np.repeat(rows, hi - lo)
        entries = concat_ranges(lo, hi)
        items = cand.indices[entries]
        weight = idx.item_weight[items]
        low = 3.0 * cand.data[entries] - weight
        high = low + 3.0 * np.minimum(b.mass[pos], idx.heavy_weight[items])
        keep = high >= key[pos] - _MARGIN  # key: the twins' and probes', of allowed items
        pos, items, low, high = pos[keep], items[keep].astype(np.int64), low[keep], high[keep]
        ok = b.allowed(pos, items)
        pos, items, low, high = pos[ok], items[ok], low[ok], high[ok]
        if not len(pos):
            return
        probe = np.flatnonzero(high == _segment_max(pos, high, len(b.rows))[pos])
        probe = probe[_firsts(pos[probe])]
        kth = np.maximum(key, _segment_max(pos, low, len(b.rows)))
        kth[pos[probe]] = np.maximum(kth[pos[probe]], b.keys(pos[probe], items[probe]))
        keep = high >= kth[pos] - _MARGIN
        _merge(item, key, pos[keep], items[keep], b.keys(pos[keep], items[keep]))

    def _pairs(self, b: _RowBatch, scored: np.ndarray, item: np.ndarray, key: np.ndarray) -> None:
        """For rows whose kth is too low to settle on their rarest heavy term alone, scores
        the items in the window that hold both of their two rarest heavy terms: they often
        win, and a higher kth narrows every later window."""
        lists = self.index.lists
        sel = b.heavy & scored[b.pos]
        order = np.lexsort((-b.f[sel], b.pos[sel]))
        pos, terms, f = b.pos[sel][order], b.terms[sel][order], b.f[sel][order]
        first = _firsts(pos)
        two = first[(first + 1 < len(pos))]
        two = two[pos[np.minimum(two + 1, len(pos) - 1)] == pos[two]]
        rows = pos[two]
        weak = key[rows] < 2.0 * (b.mass[rows] - f[two]) - _MARGIN
        two, rows = two[weak], rows[weak]
        if not len(rows):
            return
        kth = key[rows]
        low, high = _window(lists.sorted_weight, kth, b.mass[rows])
        lo1, hi1 = lists.slices(terms[two], low, high)
        lo2, hi2 = lists.slices(terms[two + 1], low, high)
        parts, ppos = [], []
        for j in range(len(rows)):
            r1, r2 = lists.ranks[lo1[j] : hi1[j]], lists.ranks[lo2[j] : hi2[j]]
            if len(r1) > len(r2):
                r1, r2 = r2, r1
            common = r1[_member(r2, r1)]
            parts.append(common)
            ppos.append(np.full(len(common), rows[j]))
        ranks = np.concatenate(parts)
        ipos = np.concatenate(ppos)
        bound = 3.0 * np.minimum(b.mass[ipos], lists.sorted_heavy[ranks])
        ok = bound - lists.sorted_weight[ranks] >= key[ipos] - _MARGIN
        ipos, items = ipos[ok], lists.by_weight[ranks[ok]].astype(np.int64)
        ok = b.allowed(ipos, items)
        ipos, items = ipos[ok], items[ok]
        order = np.argsort(ipos, kind="stable")
        ipos, items = ipos[order], items[order]
        _merge(item, key, ipos, items, b.keys(ipos, items))

    def _heavy(
        self, b: _RowBatch, scored: np.ndarray, item: np.ndarray, key: np.ndarray
    ) -> np.ndarray:
        """The heavy-term windows of `_top`, in rounds over all the rows at once. Returns the
        rows whose windows outgrew n_items / 8, left for the caller to answer in full."""
        idx, lists = self.index, self.index.lists
        sel = b.heavy & scored[b.pos]
        order = np.lexsort((-b.f[sel], b.pos[sel]))  # per row, rarest first
        pos, terms, f = b.pos[sel][order], b.terms[sel][order], b.f[sel][order]
        m = len(b.rows)
        n_heavy = np.bincount(pos, minlength=m)
        start = np.cumsum(n_heavy) - n_heavy
        csum = np.cumsum(f)
        some = n_heavy > 0
        rest_after = b.mass[pos] - (csum - np.repeat((csum - f)[start[some]], n_heavy[some]))
        moved, rest = np.zeros(m, dtype=np.int64), b.mass.copy()
        gathered, full = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=bool)
        expanded = np.zeros(m, dtype=bool)
        while True:
            rows = np.flatnonzero((moved < n_heavy) & ~full & ~(key > 2.0 * rest + _MARGIN))
            if not len(rows):
                break
            # Until the rest cannot reach the row's kth; with no kth yet, the rarest term alone.
            reach = np.bincount(pos[2.0 * rest_after >= key[pos] - _MARGIN], minlength=m)
            upto = np.clip(reach + 1, moved + 1, n_heavy)[rows]
            upto = np.where(key[rows] == -np.inf, moved[rows] + 1, upto)
            entries = concat_ranges(start[rows] + moved[rows], start[rows] + upto)
            moved[rows], rest[rows] = upto, rest_after[start[rows] + upto - 1]
            expanded[rows] = True
            epos, kth = pos[entries], key[pos[entries]]
            low, high = _window(lists.sorted_weight, kth, b.mass[epos])
            lo, hi = lists.slices(terms[entries], low, high)
            gathered += np.bincount(epos, weights=hi - lo, minlength=m).astype(np.int64)
            full |= gathered > idx.n_items // 8
            keep = ~full[epos]
            lo, hi, epos = lo[keep], hi[keep], epos[keep]
            ipos = np.repeat(epos, hi - lo)
            ranks = lists.ranks[concat_ranges(lo, hi)]
            # Per item, I <= min(|H|, its heavy weight) (see `_top`); kth -inf keeps all.
            # Read in rank order: each window is a run of ascending ranks.
            bound = 3.0 * np.minimum(b.mass[ipos], lists.sorted_heavy[ranks])
            ok = bound - lists.sorted_weight[ranks] >= key[ipos] - _MARGIN
            ipos, items = ipos[ok], lists.by_weight[ranks[ok]].astype(np.int64)
            ok = b.allowed(ipos, items)
            ipos, items = ipos[ok], items[ok]
            _merge(item, key, ipos, items, b.keys(ipos, items))
        self.expanded_rows += int((expanded & ~full).sum())
        return np.flatnonzero(full)

    def _seed(
        self,
        rest: list[tuple[int, float]],
        mass: float,
        best: list[tuple[int, float]],
        banned: Collection[int],
    ) -> list[tuple[int, float]]:
        """For k = 1, a higher kth before any heavy window is read: the lightest items of
        each heavy term (rarest first in `rest`), then, when the rarest term alone could not
        settle the row, the items holding both rarest terms. Adds exact candidates only."""
        lists = self.index.lists
        seeds = [lists.ranks[lists.rank_ptr[t] : lists.rank_ptr[t] + _PROBES] for t, _ in rest]
        probe = lists.by_weight[np.concatenate(seeds)]
        best = sorted(best + self._best1(probe, self._keys(probe), banned), key=_order)[:1]
        kth = best[0][1] if best else -np.inf
        if kth < 2.0 * (mass - rest[0][1]) - _MARGIN:
            best = sorted(best + self._pair(rest[0][0], rest[1][0], mass, kth, banned), key=_order)
        return best[:1]

    def _pair(
        self, t1: int, t2: int, mass: float, kth: float, banned: Collection[int]
    ) -> list[tuple[int, float]]:
        """The best allowed item holding both heavy terms t1 and t2 with |c| in the window
        that kth leaves (see `_top`); a cheap, often winning candidate for k = 1."""
        lists = self.index.lists
        lo, hi = (int(x) for x in _window(lists.sorted_weight, kth, mass))
        rank = lists.ranks.dtype.type
        found = []
        for t in (t1, t2):
            ranks = lists.ranks[lists.rank_ptr[t] : lists.rank_ptr[t + 1]]
            a, b = np.searchsorted(ranks, (rank(lo), rank(hi))).tolist()
            found.append(ranks[a:b])
        short, long = sorted(found, key=len)
        ranks = short[_member(long, short)]
        bound = 3.0 * np.minimum(mass, lists.sorted_heavy[ranks]) - lists.sorted_weight[ranks]
        items = lists.by_weight[ranks[bound >= kth - _MARGIN]]
        return self._best1(items, self._keys(items), banned)

    def _full(self, row: int, k: int, banned: Collection[int]) -> list[tuple[int, float]]:
        """The row against every item with all its terms at once (one sparse product).

        The product's sums only pick the near-best items; their keys are recomputed like on
        every other path, so that the answer never depends on the path (rounding included).
        """
        idx = self.index
        full = self.queries.matrix[row] @ idx.postings
        items = full.indices
        approx = 3.0 * full.data - idx.item_weight[items]
        if banned:
            ok = ~np.isin(idx.owner[items], np.fromiter(banned, dtype=np.int64))
            items, approx = items[ok], approx[ok]
        if len(items) > k:
            kth = np.partition(approx, len(items) - k)[len(items) - k]
            items = items[approx >= kth - _MARGIN]
        return self._best(items, self._keys(items), k, banned)

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


def _window(sorted_weight: np.ndarray, kth, mass):  # noqa: ANN001, ANN202 (scalar or array)
    """Rank range [low, high) of the |c|-sorted items that can still beat `kth` given heavy
    mass |H|: |c| in [kth / 2, 3|H| - kth] (module docstring), widened by the margin."""
    low = np.searchsorted(sorted_weight, (kth - _MARGIN) / 2.0, side="left")
    high = np.searchsorted(sorted_weight, 3.0 * mass - kth + _MARGIN, side="right")
    return low, high


def _order(found: tuple[int, float]) -> tuple[float, int]:
    """Sort key of (item, key) answers: key descending, then item ascending."""
    return -found[1], found[0]


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


class _RowBatch:
    """The rows of one `RowSearch.best1` call: their terms beside their positions in the
    batch, each row's f as a small dense matrix over the batch's own terms (so I of any
    (row, item) pair is one gather, summed in the same order as `intersections`), and the
    banned owners as sorted (position, owner) keys."""

    def __init__(
        self, search: RowSearch, rows: np.ndarray, banned: Sequence[Collection[int]]
    ) -> None:
        q, idx = search.queries.matrix, search.index
        self.rows, self.banned, self.index = rows, banned, idx
        m = len(rows)
        lo, hi = q.indptr[rows], q.indptr[rows + 1]
        self.n_terms = (hi - lo).astype(np.int64)
        entries = concat_ranges(lo, hi)
        self.pos = np.repeat(np.arange(m), hi - lo)
        self.terms, self.f = q.indices[entries], q.data[entries]
        self.heavy = search._heavy_terms[self.terms]
        self.mass = np.bincount(self.pos[self.heavy], weights=self.f[self.heavy], minlength=m)
        distinct = np.unique(self.terms)
        self.width = len(distinct) + 1  # the batch's terms, then one column of zeros
        self.local = np.full(q.shape[1] + 1, len(distinct), dtype=np.int64)
        self.local[distinct] = np.arange(len(distinct))
        cells = self.pos * self.width + self.local[self.terms]
        self.weights = np.zeros(m * self.width)
        self.weights[cells] = self.f
        self.counts = np.zeros(m * self.width, dtype=np.int32)
        self.counts[cells] = 1
        bans = [p * _OWNERS + int(o) for p, ban in enumerate(banned) for o in ban]
        self.ban_keys = np.sort(np.asarray(bans, dtype=np.int64))

    def allowed(self, pos: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Which (row position, item) pairs have an owner the row may take."""
        if not len(self.ban_keys):
            return np.ones(len(items), dtype=bool)
        keys = pos * _OWNERS + self.index.owner[items]
        at = np.minimum(np.searchsorted(self.ban_keys, keys), len(self.ban_keys) - 1)
        return self.ban_keys[at] != keys

    def gather(self, pos: np.ndarray, items: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        """Per pair, the sum of the row's `matrix` entries over the item's terms."""
        lists = self.index.lists
        if not len(items):
            return np.zeros(0, dtype=matrix.dtype)
        if lists.table is not None:
            cells = self.local[lists.table[items]]  # (n, P)
            cells += (pos * self.width)[:, None]
            values = matrix[cells]
            out = values[:, 0].copy()
            for j in range(1, values.shape[1]):  # left to right, as `intersections`
                out += values[:, j]
            return out
        assert lists.ragged is not None
        ptr, terms = lists.ragged
        starts = ptr[items]
        counts = ptr[items + 1] - starts
        cells = self.local[terms[concat_ranges(starts, starts + counts)]]
        cells += np.repeat(pos * self.width, counts)
        return np.add.reduceat(matrix[cells], np.cumsum(counts) - counts)

    def keys(self, pos: np.ndarray, items: np.ndarray) -> np.ndarray:
        """3I - |c| per (row position, item) pair, bit for bit as `RowSearch._keys`."""
        return 3.0 * self.gather(pos, items, self.weights) - self.index.item_weight[items]


def _firsts(pos: np.ndarray) -> np.ndarray:
    """Indices of the first entry of each run of equal values in `pos`."""
    if not len(pos):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], pos[1:] != pos[:-1])))


def _segment_max(pos: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """(m,) the largest of `values` per row position, -inf where none; `pos` ascending."""
    out = np.full(m, -np.inf)
    if len(pos):
        starts = _firsts(pos)
        out[pos[starts]] = np.maximum.reduceat(values, starts)
    return out


def _merge(
    item: np.ndarray, key: np.ndarray, pos: np.ndarray, items: np.ndarray, keys: np.ndarray
) -> None:
    """Update each row's best (rounded key descending, item ascending) with candidates at
    ascending row positions; as in `_best1`, only those near their row's top are rounded."""
    if not len(pos):
        return
    near = np.flatnonzero(keys >= _segment_max(pos, keys, len(item))[pos] - _MARGIN)
    pos, items, rounded = pos[near], items[near], np.round(keys[near], DECIMALS)
    first = np.lexsort((items, -rounded, pos))
    first = first[_firsts(pos[first])]
    pos, items, rounded = pos[first], items[first], rounded[first]
    better = (rounded > key[pos]) | ((rounded == key[pos]) & (items < item[pos]))
    item[pos[better]], key[pos[better]] = items[better], rounded[better]
