"""IDF sentence and n-gram retrieval: hand-computed values, the reduced n-gram set, and
agreement with a brute-force reference on random corpora (with and without pruning)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from index_builder.columns import PairTexts
from index_builder.retrieval import idf, inverted, row_search
from index_builder.retrieval.base import Neighbour, Retriever
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.retrieval.ngrams import ngram_spans
from index_builder.retrieval.row_search import RowSearch
from index_builder.retrieval.text import tokenize

pytestmark = pytest.mark.unit

HAND = ["a b c", "a b", "a d", "e"]


def _pairs(sources: list[str]) -> PairTexts:
    return PairTexts.from_strings(sources, [s.upper() for s in sources])


# --- hand-computed ------------------------------------------------------------------------


def test_sentence_similarities_by_hand() -> None:
    # f_a = log(4/3), f_b = log 2, f_c = f_d = f_e = log 4.
    fa, fb, f4 = math.log(4 / 3), math.log(2), math.log(4)
    r = IdfSentenceRetriever.build(_pairs(HAND))
    assert isinstance(r, Retriever)
    (got,) = r.search(["a b"], k=10)
    # "e" shares no term with the query: not a neighbour.
    assert [n.pair_id for n in got] == [1, 0, 2]
    expected = [
        2 * (fa + fb) - (fa + fb),  # {a,b} vs {a,b}
        2 * (fa + fb) - (fa + fb + f4),  # vs {a,b,c}
        2 * fa - (fa + fb + f4),  # vs {a,d}
    ]
    assert [n.score for n in got] == pytest.approx(expected, abs=1e-9)
    assert got[0] == Neighbour(1, "a b", "A B", pytest.approx(expected[0]), None, "a b")
    assert got[2].matched == "a"


def test_unknown_query_term_lowers_scores_not_ranking() -> None:
    r = IdfSentenceRetriever.build(_pairs(HAND))
    plain, with_oov = r.search(["a b", "a b zzz"], k=3)
    assert [n.pair_id for n in plain] == [n.pair_id for n in with_oov]
    shift = [p.score - o.score for p, o in zip(plain, with_oov, strict=True)]
    assert shift == pytest.approx([math.log(4)] * 3)


def test_no_shared_term_no_neighbour() -> None:
    r = IdfSentenceRetriever.build(_pairs(HAND))
    assert r.search(["zzz yyy", "!"], k=5) == [[], []]
    n = IdfNgramRetriever.build(_pairs(HAND), IdfNgramParams(widths=(2,)))
    assert n.search(["zzz yyy"], k=5) == [[]]
    for retriever in (r, n):
        assert retriever.search([], k=3) == []
        empty, full = retriever.search(["", "a b"], k=3)
        assert empty == [] and full


@pytest.mark.parametrize(
    ("n_tokens", "width", "spans"),
    [
        (10, 6, [(0, 6), (3, 9), (6, 10)]),  # 1-based starts 1, 4, 7: i mod 3 == 1
        (9, 6, [(0, 6), (3, 9)]),  # (6, 9) would sit inside (3, 9)
        (3, 6, [(0, 3)]),  # shorter than n: the whole sentence
        (7, 4, [(0, 4), (2, 6), (4, 7)]),
        (7, 5, [(0, 5), (2, 7)]),  # odd width: stride 2
        (5, 2, [(0, 2), (1, 3), (2, 4), (3, 5)]),  # n = 2: every position
        (1, 1, [(0, 1)]),
        (0, 4, []),
    ],
)
def test_reduced_ngram_spans_by_hand(
    n_tokens: int, width: int, spans: list[tuple[int, int]]
) -> None:
    assert ngram_spans(n_tokens, width) == spans


def test_all_positions_and_counts() -> None:
    assert ngram_spans(5, 3, stride=1) == [(0, 3), (1, 4), (2, 5)]
    for n_tokens in range(1, 40):
        for width in range(1, 12):
            s = max(1, width // 2)
            expected = 1 + math.ceil(max(0, n_tokens - width) / s)
            assert len(ngram_spans(n_tokens, width)) == expected


def test_tokenize() -> None:
    assert tokenize("Don't  OPEN the File-Menu, %s!") == [
        "don't", "open", "the", "file", "-", "menu", ",", "%", "s", "!",
    ]  # fmt: skip
    assert tokenize("ＡＢＣ") == ["abc"]  # NFKC folds full-width letters


# --- de-duplication and neighbour counts --------------------------------------------------


def _chain_corpus(n_words: int) -> tuple[list[str], list[str]]:
    """Sentence 0 contains every query word; sentence i+1 holds word i once, with filler."""
    words = [f"w{i}" for i in range(n_words)]
    corpus = [" ".join(words)] + [f"{w} filler{i}" for i, w in enumerate(words)]
    return corpus, words


@pytest.mark.parametrize("length", [3, 6, 12])
def test_one_distinct_neighbour_per_reduced_ngram(length: int) -> None:
    corpus, words = _chain_corpus(12)
    r = IdfNgramRetriever.build(_pairs(corpus), IdfNgramParams(widths=(2,)))
    (got,) = r.search([" ".join(words[:length])], k=100)
    assert len(got) == length - 1  # one per bigram: grows with the sentence
    ids = [n.pair_id for n in got]
    assert len(set(ids)) == len(ids)
    assert ids[0] == 0  # the best match is taken once, then skipped
    assert [n.span for n in got[1:]] == sorted(n.span for n in got[1:])
    (capped,) = r.search([" ".join(words[:length])], k=2)
    assert [n.pair_id for n in capped] == ids[:2]  # the cap keeps the best, in order


def test_ngram_provenance() -> None:
    corpus = ["open the file menu now", "close the door", "menu bar"]
    r = IdfNgramRetriever.build(_pairs(corpus), IdfNgramParams(widths=(4, 2)))
    (got,) = r.search(["please open the file menu"], k=5)
    # The first reduced 4-gram, "please open the file", matches the corpus 4-gram at 0..4.
    best = got[0]
    assert (best.pair_id, best.span, best.matched) == (0, (0, 4), "open the file menu")
    assert best.target == "OPEN THE FILE MENU NOW"
    by_id = {n.pair_id: n for n in got}
    assert by_id[2].matched == "menu bar" and by_id[2].span == (2, 5)  # "the file menu"


def test_exclude() -> None:
    corpus = ["a b c d", "a b c d", "a b x"]
    for r in (
        IdfSentenceRetriever.build(_pairs(corpus)),
        IdfNgramRetriever.build(_pairs(corpus), IdfNgramParams(widths=(4, 2))),
    ):
        (got,) = r.search(["a b c d"], k=3, exclude=[{0}])
        assert 0 not in [n.pair_id for n in got]
        assert got[0].pair_id == 1  # the duplicate is the next best
        (got,) = r.search(["a b c d"], k=3, exclude=[{0, 1, 2}])
        assert got == []


def test_bad_arguments() -> None:
    r = IdfSentenceRetriever.build(_pairs(HAND))
    with pytest.raises(ValueError, match="k must be"):
        r.search(["a"], k=0)
    with pytest.raises(TypeError):
        r.search("a b", k=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exclude"):
        r.search(["a"], k=1, exclude=[])
    with pytest.raises(ValueError, match="widths"):
        IdfNgramParams(widths=(4, 4))
    with pytest.raises(ValueError, match="unknown"):
        IdfNgramParams.from_dict({"widths": [2], "stride": 3})


def test_pruning_settles_rows_with_a_rare_term() -> None:
    corpus = [f"the of and w{i}" for i in range(60)] + ["the rare of", "rare"]
    r = IdfSentenceRetriever.build(_pairs(corpus), heavy_df=10)
    rows = r.terms.query_terms([["the", "rare", "of"], ["the", "of"]])
    search = RowSearch(r.index, rows)
    assert [i for i, _ in search.top(0, 2)] == [60, 61]
    assert search.full_rows == 0  # "rare" alone found both; "the"/"of" only checked
    assert len(search.top(1, 3)) == 3  # only heavy terms: recomputed with all of them
    assert search.full_rows == 1


# --- brute-force reference ----------------------------------------------------------------


class Reference:
    """The definitions, written out with Python sets and loops over the whole corpus."""

    def __init__(self, corpus: list[str]) -> None:
        self.toks = [tokenize(s) for s in corpus]
        n = len(corpus)
        df: dict[str, int] = {}
        for t in self.toks:
            for w in set(t):
                df[w] = df.get(w, 0) + 1
        self.f = {w: math.log(n / c) for w, c in df.items()}
        self.f_unknown = math.log(n)

    def weight(self, terms: set[str]) -> float:
        return sum(self.f.get(t, self.f_unknown) for t in terms)

    def key(self, q: set[str], c: set[str]) -> float | None:
        """3 I - |c| when q and c share a positive-IDF term, else None (not a candidate)."""
        inter = sum(self.f[t] for t in q & c)
        return round(3 * inter - self.weight(c), 9) if inter > 0 else None

    def sentences(self, query: str, k: int, banned: set[int]) -> list[tuple[int, float]]:
        q = set(tokenize(query))
        found = []
        for i, t in enumerate(self.toks):
            key = self.key(q, set(t))
            if key is not None and i not in banned:
                found.append((-key, i))
        found.sort()
        return [(i, -neg - self.weight(q)) for neg, i in found[:k]]

    def ngrams(
        self, query: str, k: int, widths: tuple[int, ...], all_positions: bool, banned: set[int]
    ) -> list[tuple[int, float, tuple[int, int], str]]:
        qt = tokenize(query)
        banned = set(banned)
        taken = []
        for w in sorted(widths, reverse=True):
            for a, b in ngram_spans(len(qt), w):
                q = set(qt[a:b])
                best = None
                for i, t in enumerate(self.toks):
                    if i in banned:
                        continue
                    for s, e in ngram_spans(len(t), w, 1 if all_positions else None):
                        key = self.key(q, set(t[s:e]))
                        if key is not None and (best is None or key > best[0]):
                            best = (key, i, " ".join(t[s:e]))
                if best is not None:
                    banned.add(best[1])
                    taken.append((best[1], best[0] - self.weight(q), (a, b), best[2]))
        order = sorted(range(len(taken)), key=lambda j: (-round(taken[j][1], 9), j))
        return [taken[j] for j in order[:k]]


def _random_corpus(rng: random.Random, n: int, vocab: int) -> list[str]:
    words = [f"w{i}" for i in range(vocab)]
    weights = [1 / (i + 1) for i in range(vocab)]  # Zipf: some terms are in most sentences
    return [" ".join(rng.choices(words, weights, k=rng.randint(1, 12))) for _ in range(n)]


class Paths:
    """Rows answered per search path, summed over every `RowSearch` made so far."""

    COUNTERS = {"exact": "exact_rows", "expanded": "expanded_rows", "full": "full_rows"}

    def __init__(self) -> None:
        self.searches: list[RowSearch] = []

    def __getitem__(self, path: str) -> int:
        return sum(getattr(s, self.COUNTERS[path]) for s in self.searches)


@pytest.fixture()
def paths(monkeypatch: pytest.MonkeyPatch) -> Paths:
    """Counts which search paths ran, so the exactness tests provably cover each of them.

    Also bound-checks every candidate set, however small (real stores skip it below 64).
    """
    monkeypatch.setattr(row_search, "_FEW", 0)
    counts = Paths()
    init = RowSearch.__init__

    def registering_init(self: RowSearch, *args: object) -> None:
        init(self, *args)  # type: ignore[arg-type]
        counts.searches.append(self)

    monkeypatch.setattr(RowSearch, "__init__", registering_init)
    return counts


@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("heavy_df", [None, 0, 3, 10**9])
def test_sentence_search_equals_brute_force(
    heavy_df: int | None, padded: bool, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not padded:  # each item's terms as a ragged CSR instead of a padded table
        monkeypatch.setattr(inverted, "_MAX_PADDED", 0)
    rng = random.Random(7)
    corpus = _random_corpus(rng, 80, 30)
    queries = _random_corpus(rng, 25, 34) + corpus[:5] + ["w0", "w0 w1 w2 w3"]
    exclude = [set(rng.sample(range(80), rng.randint(0, 3))) for _ in queries]
    ref = Reference(corpus)
    r = IdfSentenceRetriever.build(_pairs(corpus), heavy_df=heavy_df)
    for k in (1, 5, 20):
        got = r.search(queries, k, exclude)
        for q, g, ex in zip(queries, got, exclude, strict=True):
            want = ref.sentences(q, k, ex)
            assert [n.pair_id for n in g] == [i for i, _ in want], q
            assert [n.score for n in g] == pytest.approx([s for _, s in want], abs=1e-8)


@pytest.mark.parametrize("heavy_df", [None, 0, 5, 10**9])
@pytest.mark.parametrize("all_positions", [False, True])
def test_ngram_search_equals_brute_force(
    heavy_df: int | None, all_positions: bool, paths: Paths
) -> None:
    rng = random.Random(11)
    corpus = _random_corpus(rng, 50, 25)
    queries = _random_corpus(rng, 12, 28) + corpus[:3]
    exclude = [set(rng.sample(range(50), rng.randint(0, 2))) for _ in queries]
    params = IdfNgramParams(widths=(2, 3, 6), all_positions=all_positions)
    ref = Reference(corpus)
    r = IdfNgramRetriever.build(_pairs(corpus), params, heavy_df=heavy_df)
    for k in (1, 4, 30):
        got = r.search(queries, k, exclude)
        for q, g, ex in zip(queries, got, exclude, strict=True):
            want = ref.ngrams(q, k, params.widths, all_positions, ex)
            assert [(n.pair_id, n.span, n.matched) for n in g] == [
                (i, span, m) for i, _, span, m in want
            ], q
            assert [n.score for n in g] == pytest.approx([s for _, s, _, _ in want], abs=1e-8)
    assert paths["exact"] > 0  # the hash path was taken, and agreed
    if heavy_df in (0, 5):
        assert paths["expanded"] > 0 and paths["full"] > 0  # so were both fallbacks
    if heavy_df == 10**9:
        assert paths["expanded"] == paths["full"] == 0  # no heavy terms: no pruning at all


# --- the pruned search against no pruning and brute force, on harder corpora -------------


def _repetitive_corpus(rng: random.Random, n: int) -> list[str]:
    """Zipf words with long sentences and repeated phrases, like a bible: frequent terms
    with long posting lists, many items made only of frequent terms, and exact duplicates
    (equal keys: ties broken by item order)."""
    words = [f"w{i}" for i in range(60)]
    weights = [1 / (i + 1) ** 1.2 for i in range(60)]
    phrases = [" ".join(rng.choices(words[:8], k=rng.randint(2, 6))) for _ in range(6)]
    out = []
    for _ in range(n):
        parts = [
            rng.choice(phrases) if rng.random() < 0.4 else " ".join(rng.choices(words, weights))
            for _ in range(rng.randint(1, 8))
        ]
        out.append(" ".join(parts))
    return out + out[: n // 10]  # duplicate pairs


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("widths", [(8, 4), (3,), (5, 2), (1,)])
@pytest.mark.parametrize("heavy_df", [0, 4, 40])
def test_ngram_pruning_equals_no_pruning(
    widths: tuple[int, ...],
    heavy_df: int,
    batched: bool,
    paths: Paths,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batched: every width's rows through `RowSearch.best1`; else one `top` per row.
    monkeypatch.setattr(idf, "BATCH_ROWS", 0 if batched else 10**9)
    rng = random.Random(hash(widths) % 1000 + heavy_df)
    corpus = _repetitive_corpus(rng, 300)
    queries = _repetitive_corpus(rng, 40)[:40] + corpus[:5] + ["w0", "w0 w1", "w59 w0 w0"]
    exclude = [set(rng.sample(range(len(corpus)), rng.randint(0, 4))) for _ in queries]
    params = IdfNgramParams(widths=widths)
    plain = IdfNgramRetriever.build(_pairs(corpus), params, heavy_df=10**9)
    pruned = IdfNgramRetriever.build(_pairs(corpus), params, heavy_df=heavy_df)
    for k in (1, 5, 50):
        assert pruned.search(queries, k, exclude) == plain.search(queries, k, exclude)
    if widths != (1,) and heavy_df <= 4:  # single terms: every row has its exact twin
        assert paths["expanded"] > 0  # the heavy-term windows were searched


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("widths", [(4, 2), (3,)])
def test_ngram_search_on_repetitive_corpus_equals_brute_force(
    widths: tuple[int, ...],
    padded: bool,
    batched: bool,
    paths: Paths,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not padded:
        monkeypatch.setattr(inverted, "_MAX_PADDED", 0)
    monkeypatch.setattr(idf, "BATCH_ROWS", 0 if batched else 10**9)
    rng = random.Random(3)
    corpus = _repetitive_corpus(rng, 60)
    queries = _repetitive_corpus(rng, 10)[:10] + corpus[:3]
    ref = Reference(corpus)
    r = IdfNgramRetriever.build(_pairs(corpus), IdfNgramParams(widths=widths), heavy_df=3)
    for k in (1, 6):
        for q, g in zip(queries, r.search(queries, k), strict=True):
            want = ref.ngrams(q, k, widths, False, set())
            assert [(n.pair_id, n.span, n.matched) for n in g] == [
                (i, span, m) for i, _, span, m in want
            ], q
            assert [n.score for n in g] == pytest.approx([s for _, s, _, _ in want], abs=1e-8)


@pytest.mark.parametrize("twins", [64, 1])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("heavy_df", [0, 4, 40])
def test_batched_rows_equal_row_by_row(
    heavy_df: int, padded: bool, twins: int, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`RowSearch.best1` (all rows at once) against `top` per row, bans included, on the
    n-gram rows of a repetitive corpus; twins=1 sends rows whose first twin is banned to
    `top`, as more than _TWINS banned twins would."""
    if not padded:
        monkeypatch.setattr(inverted, "_MAX_PADDED", 0)
    monkeypatch.setattr(row_search, "_TWINS", twins)
    rng = random.Random(heavy_df + 17)
    corpus = _repetitive_corpus(rng, 300)
    sentences = _repetitive_corpus(rng, 30)[:30] + corpus[:10] + ["w0", "w0 w1", "zz w0"]
    r = IdfNgramRetriever.build(_pairs(corpus), IdfNgramParams(widths=(4, 2)), heavy_df=heavy_df)
    for x in r.indexes:
        rows = [
            toks[a:b]
            for toks in map(tokenize, sentences)
            for a, b in ngram_spans(len(toks), x.width)
        ]
        search = RowSearch(x.index, r.terms.query_terms(rows))
        owners = x.index.owner.tolist()
        bans = []
        for i in range(len(rows)):  # the owners of some twins, or of a random few
            some = rng.sample(range(len(corpus)), rng.randint(0, 3))
            twin = search.top(i, 1)
            bans.append(frozenset(some + ([owners[twin[0][0]]] if twin and i % 2 else [])))
        item, key = search.best1(np.arange(len(rows)), bans)
        for i, ban in enumerate(bans):
            want = search.top(i, 1, ban)
            assert (int(item[i]), float(key[i])) == (want[0] if want else (-1, -np.inf)), rows[i]
        subset = np.arange(0, len(rows), 3)  # rows answered again, as the walk does
        again = search.best1(subset, [bans[i] for i in subset])
        assert (again[0] == item[subset]).all() and (again[1] == key[subset]).all()
    assert paths["exact"] > 0
    if heavy_df <= 4:
        assert paths["expanded"] > 0


@pytest.mark.parametrize("heavy_df", [0, 5])
def test_sentence_pruning_equals_no_pruning(heavy_df: int, paths: Paths) -> None:
    rng = random.Random(5)
    corpus = _repetitive_corpus(rng, 300)
    queries = _repetitive_corpus(rng, 30)[:30] + ["w0", "w1 w0"]
    exclude = [set(rng.sample(range(len(corpus)), rng.randint(0, 4))) for _ in queries]
    plain = IdfSentenceRetriever.build(_pairs(corpus), heavy_df=10**9)
    pruned = IdfSentenceRetriever.build(_pairs(corpus), heavy_df=heavy_df)
    for k in (1, 3, 40):
        assert pruned.search(queries, k, exclude) == plain.search(queries, k, exclude)
