"""Live memory edits: the verified append-only log, what a run of edits does to a version, and
the retriever over a version plus edits (scores equal to the version's own)."""

from __future__ import annotations

import json
import multiprocessing
import random
from pathlib import Path

import pytest

from index_builder.columns import PairTexts
from index_builder.edits import (
    EditError,
    EditLog,
    EditState,
    clean_side,
    fold_pairs,
    log_path,
    pair_key,
)
from index_builder.retrieval.idf import IdfNgramParams, IdfNgramRetriever, IdfSentenceRetriever
from index_builder.retrieval.overlay import EditedRetriever, removed_ids

pytestmark = pytest.mark.unit

CORPUS = [
    ("the file could not be saved", "die datei konnte nicht gespeichert werden"),
    ("open the file", "öffnen sie die datei"),
    ("save the document now", "speichern sie das dokument jetzt"),
    ("close the window", "schließen sie das fenster"),
    ("the window is open", "das fenster ist offen"),
    ("print the page", "drucken sie die seite"),
]


def _pairs(rows: list[tuple[str, str]]) -> PairTexts:
    return PairTexts.from_strings([s for s, _ in rows], [t for _, t in rows])


# --- the log ------------------------------------------------------------------------------


def test_append_and_read_back_in_another_process_view(tmp_path: Path) -> None:
    path = log_path(tmp_path, "manuals")
    writer, reader = EditLog(path), EditLog(path)
    a = writer.append("add", "Cancel", "Abbrechen", by="anna")
    b = writer.append("correct", "Cancel", "Abbruch", old=("Cancel", "Abbrechen"))
    assert (a.seq, b.seq) == (1, 2)
    assert reader.refresh() is True and reader.refresh() is False
    assert [e.record() for e in reader.edits] == [a.record(), b.record()]
    assert reader.edits[1].old_key == pair_key("Cancel", "Abbrechen")
    # the second replica numbers after what the first wrote
    c = reader.append("delete", "Cancel", "Abbruch")
    assert c.seq == 3 and writer.refresh() and writer.seq == 3


def test_torn_line_is_not_read_and_is_cut_by_the_next_append(tmp_path: Path) -> None:
    path = log_path(tmp_path, "d")
    log = EditLog(path)
    log.append("add", "one", "eins")
    with open(path, "ab") as f:  # a crash in the middle of an append
        f.write(b'{"seq":2,"op":"add","key":"ab')
    other = EditLog(path)
    other.refresh()
    assert other.seq == 1 and other.bad_lines == []
    e = other.append("add", "two", "zwei")
    assert e.seq == 2
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["seq"] in (1, 2) for x in lines)


def test_tampered_and_unsigned_lines_are_skipped_and_named(tmp_path: Path) -> None:
    path = log_path(tmp_path, "d")
    key = b"secret"
    EditLog(path, key).append("add", "one", "eins")
    EditLog(path).append("add", "two", "zwei")  # written without the key
    raw = path.read_bytes().replace(b"eins", b"EINS", 1)
    path.write_bytes(raw)
    signed = EditLog(path, key)
    signed.refresh()
    assert signed.edits == []
    assert [b.split(":")[0] for b in signed.bad_lines] == ["line 1", "line 2"]
    assert "checksum" in signed.bad_lines[0] and "signed" in signed.bad_lines[1]


def _append_many(args: tuple[str, int]) -> list[int]:
    path, n = args
    log = EditLog(Path(path))
    return [log.append("add", f"s{i} {random.random()}", "t").seq for i in range(n)]


def test_concurrent_appenders_number_without_gaps(tmp_path: Path) -> None:
    path = log_path(tmp_path, "d")
    path.parent.mkdir(parents=True)
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        seqs = pool.map(_append_many, [(str(path), 20)] * 3)
    flat = sorted(s for part in seqs for s in part)
    assert flat == list(range(1, 61))
    log = EditLog(path)
    log.refresh()
    assert [e.seq for e in log.edits] == flat and log.bad_lines == []


def test_clean_side_names_the_problem() -> None:
    assert clean_side("  Abbrechen \n", "target") == "Abbrechen"
    for bad, why in [("", "empty"), ("a\x00b", r"U\+0000"), ("x" * 5000, "at most"), (3, "string")]:
        with pytest.raises(EditError, match=why):
            clean_side(bad, "source")


# --- what edits do ------------------------------------------------------------------------


def test_state_applies_edits_in_order_after_a_version() -> None:
    log_dir = Path("/nonexistent")
    log = EditLog(log_dir / "x")
    from index_builder.edits import Edit

    e = [
        Edit(1, "add", pair_key("a", "A"), "a", "A", 1.0),
        Edit(2, "delete", pair_key("b", "B"), "b", "B", 2.0),  # a pair of the version
        Edit(3, "correct", pair_key("a", "A2"), "a", "A2", 3.0, old=("a", "A")),
        Edit(4, "add", pair_key("c", "C"), "c", "C", 4.0),
        Edit(5, "delete", pair_key("c", "C"), "c", "C", 5.0),  # an added pair: just gone
    ]
    log.edits = e
    s = log.state()
    assert s.through == 5
    assert [(a.source, a.target, a.seq) for a in s.added] == [("a", "A2", 3)]
    assert [r[1:] for r in s.removed] == [("b", "B"), ("a", "A"), ("c", "C")]
    assert s.removed[0][0] == pair_key("b", "B")
    # a version that holds edits 1-3 gets only 4 and 5: c is not there, even if it held it
    later = log.state(after=3)
    assert later.added == () and later.removed == ((pair_key("c", "C"), "c", "C"),)
    folded = fold_pairs(["b", "x"], ["B", "X"], s)
    assert [(p.source, p.target) for p in folded] == [("x", "X"), ("a", "A2")]


# --- the retriever over a version and its edits -------------------------------------------


@pytest.mark.parametrize("method", ["sentence", "ngram"])
def test_an_added_pair_scores_as_the_version_scores_it(method: str) -> None:
    """Remove a pair of the version and add it back as an edit: the neighbours are the same,
    scores included (the IDF table is the version's in both)."""
    pairs = _pairs(CORPUS)
    if method == "sentence":
        base = IdfSentenceRetriever.build(pairs)
    else:
        base = IdfNgramRetriever.build(pairs, IdfNgramParams(widths=(8, 4)))
    log = EditLog(Path("/nonexistent"))
    from index_builder.edits import Edit

    s, t = CORPUS[0]
    log.edits = [
        Edit(1, "delete", pair_key(s, t), s, t, 1.0),
        Edit(2, "add", pair_key(s, t), s, t, 2.0),
    ]
    state = EditState.of(log.edits)
    # re-added: the version's copy stays out, the edit's is served
    assert state.removed == ((pair_key(s, t), s, t),) and len(state.added) == 1
    removed = removed_ids(pairs, state.removed)
    assert removed == {0}
    edited = EditedRetriever(base, state, removed)
    queries = ["the file could not be saved", "could the file be saved"]
    for want, got in zip(base.search(queries, 3), edited.search(queries, 3), strict=True):
        mine = [(n.source, n.score) for n in got if n.edit == 2]
        assert [
            (n.source, pytest.approx(n.score, abs=1e-8)) for n in want if n.pair_id == 0
        ] == mine
        assert [n.source for n in got] == [n.source for n in want]


def test_removed_pairs_are_never_retrieved_and_new_terms_count() -> None:
    pairs = _pairs(CORPUS)
    base = IdfNgramRetriever.build(pairs)
    state = EditState.of([])
    s, t = CORPUS[3]
    edited = EditedRetriever(base, state, removed_ids(pairs, [(pair_key(s, t), s, t)]))
    (hits,) = edited.search(["close the window"], 5)
    assert hits and all(n.pair_id != 3 for n in hits)
    from index_builder.edits import Edit

    # terms the version never saw count as its rarest: the added pair is the best neighbour
    add = Edit(1, "add", pair_key("click Frobnicate", "klicken Sie auf Frobnizieren"),
               "click Frobnicate", "klicken Sie auf Frobnizieren", 1.0)  # fmt: skip
    edited = EditedRetriever(base, EditState.of([add]))
    (hits,) = edited.search(["Click Frobnicate"], 2)
    assert hits[0].edit == 1 and hits[0].pair_id == -1 and hits[0].target.endswith("Frobnizieren")
    assert hits[0].matched == "click frobnicate" and hits[0].span == (0, 2)


def test_added_pairs_are_scored_as_brute_force_does() -> None:
    """The overlay's sparse scoring of added pairs against the formula computed by hand for
    every (query n-gram, pair n-gram) of each width, on random sentences."""
    import math

    from index_builder.edits import AddedPair
    from index_builder.retrieval.ngrams import ngram_spans
    from index_builder.retrieval.text import tokenize

    rng = random.Random(3)
    words = "red blue green tree house one two three four five rare unseen".split()

    def sentence() -> str:
        return " ".join(rng.choice(words[:10]) for _ in range(rng.randint(2, 9)))

    base = IdfNgramRetriever.build(
        _pairs([(sentence(), "x") for _ in range(60)]), IdfNgramParams(widths=(4, 2))
    )
    added = [sentence() + (" unseen" if i % 3 == 0 else "") for i in range(40)]
    state = EditState(40, tuple(AddedPair(pair_key(s, "t"), s, "t", i + 1, 0.0, None)
                                for i, s in enumerate(added)))  # fmt: skip
    edited = EditedRetriever(base, state)
    terms = base.terms

    def f(t: str) -> float:
        i = int(terms.vocab.ids([t])[0])
        return float(terms.idf[i]) if i >= 0 else math.log(terms.n_sentences)

    for _ in range(20):
        q = tokenize(sentence() + " rare")
        best: dict[int, float] = {}
        for p, s in enumerate(added):
            toks = tokenize(s)
            for w in (4, 2):
                for a, b in ngram_spans(len(q), w):
                    x = set(q[a:b])
                    for c, d in ngram_spans(len(toks), w):
                        y = set(toks[c:d])
                        if not any(f(t) > 0 for t in x & y):
                            continue
                        sim = 2 * sum(f(t) for t in x & y) - sum(f(t) for t in x | y)
                        best[p] = max(best.get(p, -math.inf), sim)
        want = sorted(best.values(), reverse=True)[:5]
        got = edited._added_for(q, 5)
        assert [n.score for n in got] == pytest.approx(want, abs=1e-6)
        assert all(best[n.edit - 1] == pytest.approx(n.score, abs=1e-6) for n in got)
