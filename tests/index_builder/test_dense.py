"""Dense n-gram retrieval with a real (tiny) model bundle: exact ground truth for Flat, recall
of approximate indexes, refusal of damaged or mismatched stores, the Ray path, the CLI."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from index_builder.corpus import Pair
from index_builder.retrieval.dense import DenseNgramRetriever
from index_builder.retrieval.encoder import Encoder, bundle_sha256
from index_builder.retrieval.faiss_index import (
    RecallProbe,
    apply_search,
    build_index,
    depth_of,
    recall_at_k,
    tune_search,
    with_depth,
)
from index_builder.retrieval.ngrams import ngram_spans
from index_builder.store import build_store, load_retriever, open_store
from models.artifacts import ArtifactError, write_manifest
from models.bundle import load_bundle, save_bundle, update_eval
from models.translator import Translator
from service.cli import app
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

WIDTHS = [4, 2]  # the toy sentences are 2-5 words, a few more sub-words
QUERIES = ["red tree two house", "one two three", "blue blue green house tree", "five"]


def _corpus(n: int, seed: int) -> list[Pair]:
    """Distinct toy sentences (duplicates would make nearest-neighbour ties)."""
    seen = dict.fromkeys(s for s, _ in toy_pairs(n, seed))
    return [Pair(s, gloss(s)) for s in seen]


PAIRS = _corpus(400, seed=11)


@pytest.fixture(scope="module")
def encoder(bundle: Path) -> Encoder:
    return Encoder.load(bundle)


@pytest.fixture(scope="module")
def flat(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("stores")
    return build_store(PAIRS, "toy", "dense-ngram", out, {"widths": WIDTHS}, model=bundle)


def _brute_force(
    encoder: Encoder, sources: list[str], queries: list[str], k: int, exclude: list[set[int]]
) -> list[list[tuple[int, float, tuple[int, int], str]]]:
    """The n-gram walk in plain numpy: every sentence encoded alone, means by slicing, all
    distances computed, nearest non-taken pair per query n-gram, k best by distance."""

    def grams(ids: list[int], spans_of: int) -> list[tuple[tuple[int, int], np.ndarray]]:
        states = encoder.states([ids])[0].numpy().astype(np.float64)
        return [((a, b), states[a:b].mean(0)) for a, b in ngram_spans(len(ids), spans_of)]

    corpus_ids = encoder.token_ids(sources)
    corpus = {}
    for w in WIDTHS:
        rows = [(pid, a, v) for pid, ids in enumerate(corpus_ids) for (a, _), v in grams(ids, w)]
        corpus[w] = (np.array([r[0] for r in rows]), [r[1] for r in rows],
                     np.stack([r[2] for r in rows]))  # fmt: skip
    out = []
    for q, text in enumerate(queries):
        ids = encoder.token_ids([text])[0]
        banned = set(exclude[q])
        taken = []
        for w in sorted(WIDTHS, reverse=True):
            owner, starts, matrix = corpus[w]
            for span, v in grams(ids, w) if ids else []:
                dist = ((matrix - v) ** 2).sum(1)
                for g in np.argsort(dist, kind="stable"):
                    if owner[g] not in banned:
                        pid = int(owner[g])
                        banned.add(pid)
                        start = starts[g]
                        matched = encoder.piece_text(corpus_ids[pid][start : start + w])
                        taken.append((pid, -float(dist[g]), span, matched))
                        break
        order = sorted(range(len(taken)), key=lambda i: (-taken[i][1], i))[:k]
        out.append([taken[i] for i in order])
    return out


def test_flat_equals_brute_force(flat: Path, encoder: Encoder) -> None:
    queries = [*QUERIES, PAIRS[5].source, PAIRS[17].source]
    exclude = [set(), set(), {0, 1, 2}, set(), {5}, set()]
    r = load_retriever(flat)
    assert isinstance(r, DenseNgramRetriever)
    got = r.search(queries, 6, exclude)
    want = _brute_force(encoder, [p.source for p in PAIRS], queries, 6, exclude)
    assert [len(g) for g in got] == [len(w) for w in want]
    assert all(len(g) >= 2 for g in got[:3])  # several n-grams, several neighbours
    for found, expected in zip(got, want, strict=True):
        assert [n.pair_id for n in found] == [e[0] for e in expected]
        assert [n.span for n in found] == [e[2] for e in expected]
        assert [n.matched for n in found] == [e[3] for e in expected]
        assert [n.score for n in found] == pytest.approx([e[1] for e in expected], abs=1e-4)
        assert all(n.source == PAIRS[n.pair_id].source for n in found)
        assert all(n.target == PAIRS[n.pair_id].target for n in found)
    own = got[5][0]  # a corpus sentence finds itself first, at distance ~0
    assert own.pair_id == 17 and own.score == pytest.approx(0.0, abs=1e-4)
    assert 5 not in {n.pair_id for n in got[4]}  # excluded


def test_manifest_records_the_bundle_and_index(flat: Path, bundle: Path) -> None:
    m = open_store(flat).manifest
    assert m["method"] == "dense-ngram"
    assert m["model_sha256"] == bundle_sha256(load_bundle(bundle).manifest)
    assert m["model_path"] == str(bundle.resolve())
    assert (m["faiss_factory"], m["dimension"], m["recall_at_10"]) == ("Flat", 64, None)
    assert m["params"]["widths"] == [4, 2] and m["params"]["search"] == ""
    assert m["items"] == m["counts"]["items_w4"] + m["counts"]["items_w2"] > 2 * len(PAIRS)
    for w in WIDTHS:
        assert {f"w{w}.faiss", f"w{w}.owner.npy", f"w{w}.start.npy"} <= set(m["files"])
        index = faiss.read_index(str(flat / f"w{w}.faiss"))
        assert index.ntotal == m["counts"][f"items_w{w}"]
        owner = np.load(flat / f"w{w}.owner.npy", allow_pickle=False)
        assert owner.dtype == np.int32 and np.all(np.diff(owner) >= 0)  # in pair order


def test_update_eval_keeps_the_bundle_identity(
    flat: Path,
    bundle: Path,
    tmp_path: Path,
) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(bundle, copy)
    update_eval(copy, {"test:toy": {"bleu": 99.0}})  # only the manifest changes
    assert load_retriever(flat, copy).search(["red tree"], 3)


def test_wrong_bundle_refused(flat: Path, bundle: Path, tmp_path: Path) -> None:
    loaded = load_bundle(bundle)
    with torch.no_grad():
        loaded.model.encoder_norm.bias.add_(0.01)  # another encoder, same shapes
    other = tmp_path / "other"
    save_bundle(other, loaded.model, "transformer", languages={"source": "en", "target": "de"},
                extra_files={"spm.model": bundle / "spm.model"})  # fmt: skip
    with pytest.raises(ArtifactError, match="built with model bundle .* but .* is bundle"):
        load_retriever(flat, other)
    with pytest.raises(ArtifactError, match="built with model bundle"):
        load_retriever(flat, load_bundle(other))


def test_version_id_names_the_encoder(flat: Path, bundle: Path, tmp_path: Path) -> None:
    """A store's version ends in a hash of what it holds: for dense stores that includes the
    encoder, so stores of one corpus built with two bundles are told apart in provenance."""
    suffix = flat.name.rsplit("-", 1)[1]
    again = build_store(PAIRS, "toy", "dense-ngram", tmp_path, {"widths": WIDTHS},
                        model=load_bundle(bundle))  # fmt: skip
    assert again.name.rsplit("-", 1)[1] == suffix  # same corpus, parameters and encoder
    loaded = load_bundle(bundle)
    with torch.no_grad():
        loaded.model.encoder_norm.bias.add_(0.01)
    other = tmp_path / "other"
    save_bundle(other, loaded.model, "transformer", languages={"source": "en", "target": "de"},
                extra_files={"spm.model": bundle / "spm.model"})  # fmt: skip
    theirs = build_store(PAIRS, "toy", "dense-ngram", tmp_path, {"widths": WIDTHS}, model=other)
    assert theirs.name.rsplit("-", 1)[1] != suffix


def test_moved_bundle_needs_to_be_named(flat: Path, bundle: Path, tmp_path: Path) -> None:
    copy = tmp_path / "stores" / "toy" / flat.name
    shutil.copytree(flat, copy)
    m = json.loads((copy / "manifest.json").read_text())
    m["model_path"] = str(tmp_path / "gone")  # not a file: checksums stay valid
    (copy / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="holds no bundle now; pass that bundle"):
        load_retriever(copy)
    assert load_retriever(copy, bundle).search(["one two"], 2)


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "toy" / src.name
    shutil.copytree(src, dst)
    return dst


def _rewrite_manifest(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.pop("files")
    write_manifest(path, m)  # checksums now match whatever is on disk


def test_tampered_index_refused(flat: Path, tmp_path: Path) -> None:
    path = _copy(flat, tmp_path)
    data = bytearray((path / "w4.faiss").read_bytes())
    data[len(data) // 2] ^= 0x01
    (path / "w4.faiss").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="checksum mismatch for w4.faiss"):
        load_retriever(path)


def test_truncated_index_refused(flat: Path, tmp_path: Path) -> None:
    path = _copy(flat, tmp_path)
    (path / "w2.faiss").write_bytes((path / "w2.faiss").read_bytes()[:1000])
    with pytest.raises(ArtifactError, match="checksum mismatch for w2.faiss"):
        open_store(path)
    _rewrite_manifest(path)  # even with matching checksums, FAISS's error becomes ours
    with pytest.raises(ArtifactError, match="not a readable FAISS index"):
        load_retriever(path)


def test_index_of_another_width_refused(flat: Path, tmp_path: Path) -> None:
    path = _copy(flat, tmp_path)
    shutil.copyfile(path / "w4.faiss", path / "w2.faiss")  # a valid index, wrong vectors
    _rewrite_manifest(path)
    with pytest.raises(ArtifactError, match="inconsistent dense-ngram store: width 2: .* owners"):
        load_retriever(path)


def test_changed_on_disk_after_opening_is_not_read(flat: Path, tmp_path: Path) -> None:
    """An opened store holds the bytes it verified: a file changed afterwards is never read."""
    path = _copy(flat, tmp_path)
    store = open_store(path)
    want = load_retriever(store).search(QUERIES, 3)
    (path / "w4.faiss").write_bytes(b"\0" * 64)
    assert load_retriever(store).search(QUERIES, 3) == want and any(want)
    with pytest.raises(ArtifactError, match="checksum mismatch for w4.faiss"):
        open_store(path)


def test_k_beyond_corpus_and_minus_one_ids(bundle: Path, tmp_path: Path) -> None:
    tiny = PAIRS[:4]
    r = load_retriever(build_store(tiny, "toy", "dense-ngram", tmp_path, {"widths": [2]},
                                   model=bundle))  # fmt: skip
    long_query = "one two three four five red blue green house tree"
    (found,) = r.search([long_query], 50)  # more n-grams than pairs: FAISS pads with -1
    assert sorted(n.pair_id for n in found) == [0, 1, 2, 3]
    (found,) = r.search([long_query], 50, [{0, 1, 2, 3}])
    assert found == []
    # IVF probing one list of a few vectors returns -1 for the rest of the depth asked.
    pairs = PAIRS[:20]
    path = build_store(pairs, "toy", "dense-ngram", tmp_path,
                       {"widths": [2], "factory": "IVF8,Flat", "search": "nprobe=1"},
                       model=bundle)  # fmt: skip
    r = load_retriever(path)
    _, labels = r.indexes[2].index.search(r.query_vectors([long_query])[2][2], 32)
    assert (labels == -1).any()  # the case is exercised
    exclude = [set(range(0, 20, 2))] * 5
    found = r.search([long_query, *QUERIES], 10, exclude)
    assert any(found)
    for n in (n for f in found for n in f):
        assert 0 <= n.pair_id < 20 and n.pair_id % 2 == 1


def test_empty_and_bad_queries(flat: Path) -> None:
    r = load_retriever(flat)
    assert r.search([], 3) == []
    got = r.search(["", "red tree", "   "], 3)
    assert got[0] == [] and got[2] == [] and len(got[1]) >= 1
    with pytest.raises(TypeError):
        r.search("red tree", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        r.search(["red"], 0)
    with pytest.raises(ValueError, match="exclude has 2 entries"):
        r.search(["red"], 1, [set(), set()])


def test_batching_does_not_change_answers(flat: Path) -> None:
    r = load_retriever(flat)
    queries = [p.source for p in PAIRS[:70]]
    together = r.search(queries, 5)
    alone = [r.search([q], 5)[0] for q in queries[::7]]
    for a, b in zip(alone, together[::7], strict=True):
        assert [n.pair_id for n in a] == [n.pair_id for n in b]
        assert [n.score for n in a] == pytest.approx([n.score for n in b], abs=1e-4)


def test_query_encodings_shared_with_the_translator(flat: Path, bundle: Path) -> None:
    """A store of the served model's own encoder takes the translator's source encodings:
    the same neighbours as encoding the queries itself, and nothing encoded twice."""
    loaded = load_bundle(bundle)
    r = load_retriever(open_store(flat), loaded)
    translator = Translator.from_loaded(loaded)
    assert r.encodes_with(translator.model)
    assert not r.encodes_with(load_bundle(bundle).model)  # equal weights, another module
    queries = QUERIES + [p.source for p in PAIRS[:40:3]]
    states = translator.source_states(queries)
    alone = r.search(queries, 5)
    shared = r.search(queries, 5, states=states)
    for a, b in zip(alone, shared, strict=True):
        assert [n.pair_id for n in a] == [n.pair_id for n in b]
        assert [n.score for n in a] == pytest.approx([n.score for n in b], abs=1e-4)
    # The given encodings are what is searched: zeros of the right shapes find other pairs.
    blank = r.search(queries, 5, states=[torch.zeros_like(x) for x in states])
    assert [[n.pair_id for n in h] for h in blank] != [[n.pair_id for n in h] for h in alone]
    with pytest.raises(ValueError, match="not this store's encoder's"):
        r.search(queries, 5, states=states[1:] + states[:1])
    with pytest.raises(ValueError, match="query encodings for"):
        r.search(queries, 5, states=states[:-1])


def test_bad_parameters_refused_before_encoding(bundle: Path, tmp_path: Path) -> None:
    for params, message in [
        ({"factory": "Nope12"}, "FAISS cannot build index 'Nope12'"),
        ({"factory": "HNSW8", "search": "nprobe=3"}, "FAISS search parameters"),
        ({"widths": [0]}, "widths must be positive"),
        ({"stride": 2}, "unknown dense-ngram parameter"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"target_recall": 0.95}, "not Flat"),
        ({"factory": "IVF8,Flat", "target_recall": 0}, r"target_recall must be in \(0, 1\]"),
        ({"factory": "IVF8,Flat", "target_recall": 1.5}, r"target_recall must be in \(0, 1\]"),
        ({"factory": "PQ8", "target_recall": 0.9}, "no search depth to tune"),
    ]:
        with pytest.raises(ValueError, match=message):
            build_store(PAIRS, "toy", "dense-ngram", tmp_path, params, model=bundle)
    with pytest.raises(ValueError, match="uses no model"):
        build_store(PAIRS, "toy", "idf-ngram", tmp_path, model=bundle)
    assert not (tmp_path / "toy").exists() or not any((tmp_path / "toy").iterdir())


# --- approximate indexes: recall against exact search --------------------------------------


def _clustered(n: int, dim: int, seed: int) -> np.ndarray:
    """32 clusters near an 8-dimensional subspace: like encoder states, few real directions."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(0).normal(size=(8, dim))  # the same subspace for every seed
    z = rng.normal(size=(32, 8))[rng.integers(0, 32, n)] * 3 + rng.normal(size=(n, 8))
    return (z @ basis + 0.1 * rng.normal(size=(n, dim))).astype(np.float32)


def _numpy_recall(index: faiss.Index, base: np.ndarray, queries: np.ndarray, k: int) -> float:
    d = ((queries[:, None, :].astype(np.float64) - base[None].astype(np.float64)) ** 2).sum(-1)
    exact = np.argsort(d, axis=1, kind="stable")[:, :k]
    _, approx = index.search(queries, k)
    return float(np.mean([len(set(a) & set(e)) / k for a, e in zip(approx, exact, strict=True)]))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("factory", "search", "floor"),
    [
        ("Flat", "", 1.0),
        ("HNSW16", "efSearch=128", 0.95),
        ("IVF32,Flat", "nprobe=8", 0.95),
        ("IVF32,PQ16x4fs,RFlat", "nprobe=8,k_factor_rf=8", 0.95),
    ],
)
def test_recall_on_synthetic_vectors(factory: str, search: str, floor: float) -> None:
    base = _clustered(4000, 32, seed=1)
    index = build_index(base, factory, search, train_sample=4000, seed=0)
    measured, n = recall_at_k(index, base, sample=300, seed=0)
    assert n == 300 and floor <= measured <= 1.0
    queries = _clustered(200, 32, seed=2)  # not in the index
    assert _numpy_recall(index, base, queries, 10) >= floor


@pytest.mark.unit
def test_recall_detects_a_poor_index() -> None:
    base = _clustered(4000, 32, seed=1)
    index = build_index(base, "IVF64,PQ4x4", "nprobe=1", train_sample=4000, seed=0)
    measured, _ = recall_at_k(index, base, sample=300, seed=0)
    expected = _numpy_recall(index, base, base[:300], 10)
    assert measured < 0.9 and expected < 0.9  # compressed to 4 bytes, one list probed


@pytest.mark.parametrize("factory", ["HNSW16", "IVF8,Flat"])
def test_approximate_store_reports_recall(
    bundle: Path,
    flat: Path,
    tmp_path: Path,
    factory: str,
) -> None:
    path = build_store(PAIRS, "toy", "dense-ngram", tmp_path,
                       {"widths": WIDTHS, "factory": factory}, model=bundle)  # fmt: skip
    m = open_store(path).manifest
    recall = m["recall_at_10"]
    assert m["faiss_factory"] == factory and m["params"]["search"] in ("efSearch=128", "nprobe=16")
    assert recall["k"] == 10 and 0.9 <= recall["all"] <= 1.0
    for w in WIDTHS:
        assert recall[f"queries_w{w}"] == min(1000, m["counts"][f"items_w{w}"])
    approx, exact = load_retriever(path), load_retriever(flat)
    # Same vectors as the Flat store (same chunks), so recall can be checked independently.
    for w in WIDTHS:
        base = exact.indexes[w].index.reconstruct_n(0, exact.indexes[w].index.ntotal)
        assert _numpy_recall(approx.indexes[w].index, base, base[::9], 10) >= 0.9
    got, want = approx.search(QUERIES, 3), exact.search(QUERIES, 3)
    assert [[n.pair_id for n in f] for f in got] == [[n.pair_id for n in f] for f in want]


@pytest.mark.unit
def test_tuned_search_is_the_shallowest_that_reaches_the_target() -> None:
    base = _clustered(4000, 32, seed=1)
    probes = [RecallProbe(base, 300, seed=0)]
    index = build_index(base, "IVF64,Flat", "nprobe=1", train_sample=4000, seed=0)
    search, (measured,) = tune_search([index], probes, "IVF64,Flat", "nprobe=1", 0.97)
    depth = depth_of(search, "nprobe")
    assert depth is not None and depth > 1 and measured >= 0.97
    assert _numpy_recall(index, base, base[1::13], 10) >= 0.95  # independent, another sample
    apply_search(index, with_depth(search, "nprobe", depth // 2))
    assert probes[0].recall(index) < 0.97  # one doubling less misses it


def test_unreachable_recall_refused_and_nothing_written(bundle: Path, tmp_path: Path) -> None:
    params = {"widths": WIDTHS, "factory": "IVF4,PQ2x4", "search": "nprobe=1",
              "target_recall": 0.999}  # fmt: skip
    with pytest.raises(ValueError, match="below the target 0.999: use finer codes"):
        build_store(PAIRS, "toy", "dense-ngram", tmp_path, params, model=bundle)
    assert not (tmp_path / "toy").exists() or not any((tmp_path / "toy").iterdir())


@pytest.mark.parametrize(("factory", "knob"), [("IVF16,Flat", "nprobe"), ("HNSW8", "efSearch")])
def test_store_built_to_a_target_recall(
    bundle: Path,
    flat: Path,
    tmp_path: Path,
    factory: str,
    knob: str,
) -> None:
    params = {"widths": WIDTHS, "factory": factory, "search": f"{knob}=1", "target_recall": 0.99}
    path = build_store(PAIRS, "toy", "dense-ngram", tmp_path, params, model=bundle)
    m = open_store(path).manifest
    search = m["params"]["search"]
    assert m["params"]["target_recall"] == 0.99 and (depth_of(search, knob) or 0) > 1
    assert all(m["recall_at_10"][f"w{w}"] >= 0.99 for w in WIDTHS)
    approx, exact = load_retriever(path), load_retriever(flat)
    for w in WIDTHS:  # the loaded index searches as it was measured, checked independently
        base = exact.indexes[w].index.reconstruct_n(0, exact.indexes[w].index.ntotal)
        assert _numpy_recall(approx.indexes[w].index, base, base[::3], 10) >= 0.98


# --- the Ray path ----------------------------------------------------------------------------


@pytest.mark.system
@pytest.mark.slow
def test_ray_build_equals_single_process(bundle: Path, tmp_path: Path) -> None:
    """`build-store --ray` on a local 2-worker Ray makes the very store the in-process path does."""
    ray = pytest.importorskip("ray")
    pairs = _corpus(3000, seed=5)
    params = {"widths": WIDTHS, "batch_size": 16}  # about 170 chunks over the two workers
    single = build_store(pairs, "toy", "dense-ngram", tmp_path / "a", params, model=bundle)
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"{p.source}\t{p.target}\n" for p in pairs), encoding="utf-8")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert ray.cluster_resources()["CPU"] == 2
        res = CliRunner().invoke(app, ["build-store", "--domain", "toy", "--corpus", str(corpus),
                                       "--out", str(tmp_path / "b"), "--method", "dense-ngram",
                                       "--model", str(bundle), "--widths", "4,2",
                                       "--batch-size", "16", "--ray"])  # fmt: skip
    finally:
        ray.shutdown()
    assert res.exit_code == 0, res.output
    assert "encoding (2 Ray workers)" in res.output  # the progress bar of the Ray path
    a, b = open_store(single).manifest, open_store(tmp_path / "b" / "toy").manifest
    assert len(a["files"]) == 10
    assert a["files"] == b["files"]  # every file byte-identical, FAISS indexes included
    assert a["counts"] == b["counts"] and a["counts"]["items"] > 1000
    assert a["corpus_sha256"] == b["corpus_sha256"] and a["params"] == b["params"]


# --- the command line ------------------------------------------------------------------------


def test_cli_build_store_and_neighbours(bundle: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    d = tmp_path / "data" / "toy"
    d.mkdir(parents=True)
    pairs = PAIRS[:50] + [PAIRS[3]]  # pair 50 repeats pair 3's source
    (d / "train.en").write_text("".join(p.source + "\n" for p in pairs), encoding="utf-8")
    (d / "train.de").write_text("".join(p.target + "\n" for p in pairs), encoding="utf-8")
    out = tmp_path / "stores"
    args = ["build-store", "--domain", "toy", "--corpus", str(d), "--out", str(out)]
    res = runner.invoke(app, [*args, "--method", "dense-ngram", "--model", str(bundle),
                              "--widths", "4,2", "--index", "HNSW16"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "recall@10" in res.output
    m = open_store(out / "toy").manifest
    assert (m["faiss_factory"], m["pairs"], m["params"]["widths"]) == ("HNSW16", 51, [4, 2])
    res = runner.invoke(app, [*args, "--method", "dense-ngram", "--model", str(bundle),
                              "--index", "IVF4096,PQ8", "--no-activate"])  # fmt: skip
    assert res.exit_code == 2 and "cannot train" in res.output
    nb = tmp_path / "n.jsonl"
    res = runner.invoke(app, ["neighbours", "--store", str(out / "toy"), "-i", str(d),
                              "--out", str(nb), "--k", "3", "--exclude-self"])  # fmt: skip
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in nb.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == list(range(51))
    for r in records:
        ids = {n["pair_id"] for n in r["neighbours"]}
        assert r["id"] not in ids and 1 <= len(ids) <= 3
        assert all(n["span"] is not None and n["matched"] for n in r["neighbours"])
    assert not {3, 50} & {n["pair_id"] for n in records[3]["neighbours"]}  # same source text


def test_random_queries_never_crash(flat: Path) -> None:
    r = load_retriever(flat)
    rng = random.Random(3)
    junk = ["".join(rng.choice("abc xyz ÄÖÜ ✓ 12") for _ in range(rng.randint(0, 60)))
            for _ in range(20)]  # fmt: skip
    for found in r.search(junk, 4):
        assert len({n.pair_id for n in found}) == len(found) <= 4


def test_live_edits_score_an_added_pair_as_the_version_does(flat: Path) -> None:
    """Remove each query's best pair of the dense version and add it back as a live edit: it
    is still the best neighbour, at the version's own score or better (the version's walk
    gives a pair to the first query n-gram that finds it; the overlay scores an added pair
    at its nearest n-gram), and no removed pair comes back from the version."""
    from index_builder.edits import Edit, EditState, pair_key
    from index_builder.retrieval.overlay import EditedRetriever, removed_ids

    base = load_retriever(open_store(flat))
    queries = QUERIES[:3]
    want = base.search(queries, 4)
    again = {n.pair_id for hits in want for n in hits[:1]}  # each query's best pair
    edits, seq = [], 0
    for i in sorted(again):
        s, t = PAIRS[i].source, PAIRS[i].target
        edits += [Edit(seq + 1, "delete", pair_key(s, t), s, t, 0.0),
                  Edit(seq + 2, "add", pair_key(s, t), s, t, 0.0)]  # fmt: skip
        seq += 2
    state = EditState.of(edits)
    assert len(state.added) == len(again)
    cache: dict = {}
    edited = EditedRetriever(base, state, removed_ids(base.pairs, state.removed), cache)
    got = edited.search(queries, 4)
    for w, g in zip(want, got, strict=True):
        assert (g[0].source, g[0].target) == (w[0].source, w[0].target)
        assert g[0].edit is not None and g[0].pair_id == -1
        assert g[0].score >= w[0].score - 1e-4
        if g[0].span == w[0].span:  # found by the same query n-gram: the very same score
            assert g[0].score == pytest.approx(w[0].score, abs=1e-4)
            assert g[0].matched == w[0].matched
        assert not {n.pair_id for n in g} & set(removed_ids(base.pairs, state.removed))
    # a second overlay re-encodes nothing: the cache holds every added pair
    before = dict(cache)
    EditedRetriever(base, state, removed_ids(base.pairs, state.removed), cache)
    assert cache.keys() == before.keys()
