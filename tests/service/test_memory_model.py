"""A retrieval-memory bundle behind the service: retrieved pairs reach the model, which
reports its gate; the baseline path keeps returning neighbours as provenance only."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.corpus import Pair
from index_builder.store import build_store, set_active
from models.transformer import Transformer
from models.translator import DecodeOptions, Translator
from service.app import create_app
from service.cli import app
from service.settings import Settings
from tests.service.conftest import make_store, running
from tests.toy import toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_memory_model_receives_neighbours_and_reports_its_gate(
    memory_bundle: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    version = make_store(stores, "toy", toy_pairs(30, seed=8), activate=True)
    settings = Settings(model_path=memory_bundle, stores_dir=stores, beam_size=2, neighbours_k=3)
    app = create_app(settings)
    async with running(app) as c:
        info = (await c.get("/info")).json()
        assert info["models"][0]["uses_memory"] is True
        resp = await c.post(
            "/v1/translate",
            json={"texts": ["red house", "one two"], "domain": "toy", "return_neighbours": True},
        )
        assert resp.status_code == 200, resp.text
        for r in resp.json()["results"]:
            assert r["store_version"] == version and 1 <= len(r["neighbours"]) <= 3
            assert 0.0 < r["gate"] < 1.0  # the memory path took part in decoding
            assert r["translation"]
        plain = await c.post("/v1/translate", json={"texts": ["red house"]})
        assert plain.status_code == 200
        assert "gate" not in plain.json()["results"][0]  # general: no store, no memory


async def test_baseline_returns_neighbours_as_provenance(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    make_store(stores, "toy", toy_pairs(30, seed=8), activate=True)
    app = create_app(Settings(model_path=bundle, stores_dir=stores, beam_size=1))
    async with running(app) as c:
        info = (await c.get("/info")).json()
        assert info["models"][0]["uses_memory"] is False
        resp = await c.post(
            "/v1/translate",
            json={"texts": ["red house"], "domain": "toy", "return_neighbours": True},
        )
        result = resp.json()["results"][0]
        assert result["translation"] == "rot haus" and result["neighbours"]
        assert "gate" not in result
        assert resp.json()["timings"]["retrieval_ms"] > 0


def _own_dense_store(memory_bundle: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(stores dir, version) of an active dense store of domain "toy" whose vectors are
    `memory_bundle`'s own encoder's."""
    pytest.importorskip("faiss")
    stores = tmp_path / "stores"
    pairs = [Pair(s, t) for s, t in toy_pairs(40, seed=9)]
    version = build_store(
        pairs, "toy", "dense-ngram", stores, {"widths": [2, 1]}, model=memory_bundle
    )
    set_active(stores, "toy", version.name)
    return stores, version


async def test_dense_store_of_the_served_model_encodes_each_request_once(
    memory_bundle: Path, tmp_path: Path
) -> None:
    """A dense store built with the served bundle's own encoder: the request's source is
    encoded once, for retrieval and decoding alike, and the translation and gate are those of
    decoding with the same neighbours directly."""
    stores, version = _own_dense_store(memory_bundle, tmp_path)
    settings = Settings(model_path=memory_bundle, stores_dir=stores, beam_size=2, neighbours_k=3)
    app = create_app(settings)
    texts = ["red house two", "one two", "blue tree"]
    async with running(app) as c:
        model = app.state.engine.models[0].translator.model
        calls: list[int] = []
        # the decoder's encoder, and the float model's that retrieval encodes with (the
        # same module unless decoding runs in ONNX Runtime)
        encoders = {id(m): m for m in (model, getattr(model, "float_model", model))}
        handles = [
            m.encoder_layers[0].register_forward_hook(
                lambda _m, args, _out: calls.append(args[0].size(0))
            )
            for m in encoders.values()
        ]
        try:
            resp = await c.post(
                "/v1/translate", json={"texts": texts, "domain": "toy", "return_neighbours": True}
            )
        finally:
            for handle in handles:
                handle.remove()
        assert resp.status_code == 200, resp.text
        assert calls == [3]  # one pass over the three texts; retrieval's and decoding's
    results = resp.json()["results"]
    direct = Translator.from_bundle(memory_bundle).translate_detailed(
        texts,
        DecodeOptions(beam_size=2),
        [[(n["source"], n["target"]) for n in r["neighbours"]] for r in results],
        gates=True,
    )
    for r, d in zip(results, direct, strict=True):
        assert r["store_version"] == version.name and r["neighbours"]
        assert r["translation"] == d.text
        assert r["gate"] == pytest.approx(d.gate, abs=1e-5)


def test_cli_translate_and_eval_encode_once_with_a_store_of_their_own_model(
    memory_bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragmt translate --domain` and `ragmt eval --stores` on a dense store built with the
    translating bundle: each batch of sources is encoded once, for retrieval and decoding,
    and the output is that of encoding twice (the store's encoder loaded apart)."""
    stores, _ = _own_dense_store(memory_bundle, tmp_path)
    passes: list[int] = []  # batch size of every real encoder pass
    original = Transformer.encode

    def counted(self, src, source=None):  # noqa: ANN001, ANN202
        if source is None:
            passes.append(src.size(0))
        return original(self, src, source)

    monkeypatch.setattr(Transformer, "encode", counted)
    runner = CliRunner()
    texts = ["red house two", "", "one two", "blue tree"]
    base = ["translate", "--model", str(memory_bundle), "--domain", "toy"]
    base += ["--stores", str(stores), "--beam", "2", "--neighbours", "3"]
    once = runner.invoke(app, base, input="\n".join(texts) + "\n")
    assert once.exit_code == 0, once.output
    assert passes == [3]  # the blank line is neither encoded nor translated
    assert once.stdout.splitlines()[1] == "" and len(once.stdout.splitlines()) == 4
    passes.clear()
    twice = runner.invoke(
        app, [*base, "--retrieval-model", str(memory_bundle)], input="\n".join(texts) + "\n"
    )
    assert twice.exit_code == 0, twice.output
    assert passes == [3, 3] and twice.stdout == once.stdout

    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    test = toy_pairs(6, seed=21)
    (data / "toy" / "test.en").write_text("".join(e + "\n" for e, _ in test), encoding="utf-8")
    (data / "toy" / "test.de").write_text("".join(d + "\n" for _, d in test), encoding="utf-8")
    hyps = []
    for extra, want in (([], [6]), (["--retrieval-model", str(memory_bundle)], [6, 6])):
        passes.clear()
        out = tmp_path / f"eval{len(hyps)}"
        args = ["eval", "--model", str(memory_bundle), "--data", str(data), "--domains", "toy"]
        args += ["--stores", str(stores), "--neighbours", "3", "--beam", "2", "--out", str(out)]
        res = runner.invoke(app, [*args, *extra])
        assert res.exit_code == 0, res.output
        assert passes == want
        hyps.append((out.parent / f"{out.name}-hyps" / "toy.test.hyp.de").read_text())
    assert hyps[0] == hyps[1]


async def test_a_text_of_several_sentences_is_retrieved_for_and_decoded_by_sentence(
    memory_bundle: Path, tmp_path: Path
) -> None:
    """With `split_sentences` (the default) each sentence of a text gets neighbours of its
    own and is decoded alone; the reply joins the translations, lists every sentence's
    neighbours and averages the gates. Without it the text is one query and one decode."""
    from index_builder.store import load_retriever, open_store

    stores = tmp_path / "stores"
    make_store(stores, "toy", toy_pairs(30, seed=8), method="idf-ngram", activate=True)
    retriever = load_retriever(open_store(stores / "toy"), None)
    translator = Translator.from_bundle(memory_bundle, quantize="auto")  # as the service's
    text, sentences = "red house two. Blue tree one!", ["red house two.", "Blue tree one!"]
    replies = {}
    for split in (True, False):
        settings = Settings(
            model_path=memory_bundle,
            stores_dir=stores,
            beam_size=2,
            neighbours_k=3,
            split_sentences=split,
        )
        async with running(create_app(settings)) as c:
            resp = await c.post(
                "/v1/translate", json={"texts": [text], "domain": "toy", "return_neighbours": True}
            )
            assert resp.status_code == 200, resp.text
            replies[split] = resp.json()["results"][0]

    for split, queries in ((True, sentences), (False, [text])):
        hits = retriever.search(queries, 3)
        direct = translator.translate_detailed(
            queries,
            DecodeOptions(beam_size=2),
            [[(n.source, n.target) for n in found] for found in hits],
            gates=True,
        )
        reply = replies[split]
        assert reply["translation"] == " ".join(d.text for d in direct)
        gates = [d.gate for d in direct]
        assert reply["gate"] == pytest.approx(sum(gates) / len(gates), abs=1e-5)
        got = [(n["source"], n["target"]) for n in reply["neighbours"]]
        assert got == [(n.source, n.target) for found in hits for n in found]
    assert len(replies[True]["neighbours"]) > len(replies[False]["neighbours"])
