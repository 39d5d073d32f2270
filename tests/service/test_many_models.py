"""Many models, many languages, one service: a memory model, a baseline and two test-only
architectures (one autoregressive, one CTC) served side by side, each request routed by its
language pair (or the model it names) through the same pipeline."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from models.bundle import load_bundle, model_card, save_bundle
from service.app import create_app
from service.settings import Settings
from tests.service.conftest import make_store, running
from tests.toy import gloss
from tests.toy import toy_pairs as lexicon_pairs
from tests.toy_architectures import (
    SPARSE_HELD_OUT,
    SPARSE_TASKS,
    TOY_TASK,
    register_toys,
    toy_pairs,
    train_toy_ar,
    train_toy_ctc,
    train_toy_sparse,
)

pytestmark = [pytest.mark.system, pytest.mark.anyio]

WORDS = ["hello", "bookkeeper", "abc xyz"]  # never in the toys' training pairs
TRAIN = [p for p in toy_pairs(2000, seed=1) if p[0] not in WORDS]


@pytest.fixture(scope="module")
def models_dir(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy baseline (en->de) and the two toy architectures, as bundles in one directory."""
    register_toys()
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(bundle, root / "baseline")
    pairs = TRAIN
    trained_on = {"domains": {"toy-upper-case": len(pairs)}}
    for name, arch, model, langs in (
        ("upper-ar", "toy-ar", train_toy_ar(pairs), {"source": "de", "target": "en"}),
        ("upper-ctc", "toy-ctc", train_toy_ctc(pairs), {"source": "fr", "target": "en"}),
    ):
        save_bundle(
            root / name, model, arch, languages=langs, tokenizer="bytes", trained_on=trained_on
        )
    return root


async def test_four_architectures_are_served_side_by_side_and_routed_by_pair(
    memory_bundle: Path, models_dir: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    make_store(stores, "toy", lexicon_pairs(40, seed=8), activate=True)
    settings = Settings(
        model_path=memory_bundle, models_dir=models_dir, stores_dir=stores, beam_size=2
    )
    async with running(create_app(settings)) as c:
        models = {m["name"]: m for m in (await c.get("/info")).json()["models"]}
        assert list(models) == [memory_bundle.name, "baseline", "upper-ar", "upper-ctc"]
        memory, base, ar, ctc = models.values()
        assert (memory["architecture"], memory["reads"], memory["default_for"]) == (
            "semiparametric",
            ["sentence-pairs"],
            [["en", "de"]],
        )
        assert base["default_for"] == [] and base["pairs"] == [["en", "de"]]  # named only
        assert (ar["decoding"], ar["tokenizer"], ar["default_for"]) == (
            "autoregressive",
            "bytes",
            [["de", "en"]],
        )
        assert (ctc["decoding"], ctc["reads"], ctc["default_for"]) == ("ctc", [], [["fr", "en"]])
        assert ctc["trained_on"] == {"domains": {"toy-upper-case": len(TRAIN)}}

        async def translate(source: str, target: str, **extra: object) -> dict:
            body = {"texts": WORDS, "source_lang": source, "target_lang": target, **extra}
            resp = await c.post("/v1/translate", json=body)
            assert resp.status_code == 200, resp.text
            return resp.json()

        for source, name in (("de", "upper-ar"), ("fr", "upper-ctc")):
            out = await translate(source, "en")
            assert [r["translation"] for r in out["results"]] == [TOY_TASK(w) for w in WORDS]
            assert {r["model"] for r in out["results"]} == {name}

        texts = ["red house", "one two"]
        routed = await c.post("/v1/translate", json={"texts": texts, "domain": "toy"})
        assert {r["model"] for r in routed.json()["results"]} == {memory_bundle.name}
        assert all(0.0 < r["gate"] < 1.0 for r in routed.json()["results"])
        named = await c.post(
            "/v1/translate", json={"texts": texts, "domain": "toy", "model": "baseline"}
        )
        assert [r["translation"] for r in named.json()["results"]] == [gloss(t) for t in texts]
        assert all("gate" not in r for r in named.json()["results"])

        # an unserved pair, or a model named for a pair it does not translate: 422s that say
        # what is served
        resp = await c.post(
            "/v1/translate", json={"texts": ["x"], "source_lang": "en", "target_lang": "fr"}
        )
        assert resp.status_code == 422, resp.text
        error = resp.json()["error"]
        assert error["code"] == "unsupported_language"
        assert error["message"] == "en->fr is not served; served pairs: de->en, en->de, fr->en"
        assert {"source_lang": "fr", "target_lang": "en"} in error["supported"]
        resp = await c.post(
            "/v1/translate",
            json={"texts": ["x"], "source_lang": "de", "target_lang": "en", "model": "baseline"},
        )
        assert resp.status_code == 422 and "translates en->de only" in resp.text

        languages = {x["code"]: x["targets"] for x in (await c.get("/languages")).json()}
        assert languages == {"de": ["en"], "en": ["de"], "fr": ["en"]}
        libre = await c.post("/translate", json={"q": "hello", "source": "fr", "target": "en"})
        assert libre.json() == {"translatedText": "HELLO"}


async def test_the_general_memory_of_another_pair_is_skipped_a_customer_s_is_refused(
    memory_bundle: Path, models_dir: Path, tmp_path: Path
) -> None:
    """The general domain's memory is English->German: a German->English request (named
    domain or fallback, as the page and LibreTranslate's routes send) is translated without
    it; a customer domain's memory of another pair is refused, naming its pair."""
    stores = tmp_path / "stores"
    make_store(stores, "general", lexicon_pairs(40, seed=8), activate=True)
    make_store(stores, "toy", lexicon_pairs(40, seed=9), activate=True)
    settings = Settings(model_path=memory_bundle, models_dir=models_dir, stores_dir=stores)
    async with running(create_app(settings)) as c:
        body = {"texts": WORDS, "source_lang": "de", "target_lang": "en"}
        resp = await c.post("/v1/translate", json=body)
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert [r["translation"] for r in results] == [TOY_TASK(w) for w in WORDS]
        assert {(r["model"], r["store_version"]) for r in results} == {("upper-ar", None)}
        english = await c.post("/v1/translate", json={"texts": ["red house"]})
        assert english.json()["results"][0]["store_version"] is not None  # en->de retrieves
        named = await c.post("/v1/translate", json={**body, "domain": "general"})
        assert [r["store_version"] for r in named.json()["results"]] == [None] * len(WORDS)
        resp = await c.post("/v1/translate", json={**body, "domain": "toy"})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["message"] == "domain toy's memory is en->de, not de->en"


def test_a_bundle_card_says_what_it_is_and_contradictions_are_refused(models_dir: Path) -> None:
    card = model_card(load_bundle(models_dir / "upper-ctc").manifest)
    assert (card.architecture, card.pairs, card.tokenizer, card.decoding, card.reads) == (
        "toy-ctc",
        (("fr", "en"),),
        "bytes",
        "ctc",
        (),
    )
    manifest = dict(load_bundle(models_dir / "upper-ar").manifest)
    with pytest.raises(Exception, match="declares decoding 'ctc'"):
        model_card({**manifest, "decoding": "ctc"})
    with pytest.raises(Exception, match="a pair must be"):
        model_card({**manifest, "pairs": [["de", "de"]]})
    # a bundle written before these fields: its languages are its pair, its tokenizer spm
    old = {k: v for k, v in manifest.items() if k not in ("pairs", "tokenizer", "decoding")}
    with pytest.raises(Exception, match="SentencePiece file"):
        model_card(old)


async def test_an_operator_chooses_a_pairs_default_model(
    memory_bundle: Path, models_dir: Path
) -> None:
    settings = Settings(
        model_path=memory_bundle, models_dir=models_dir, default_models="en-de=baseline"
    )
    async with running(create_app(settings)) as c:
        models = {m["name"]: m for m in (await c.get("/info")).json()["models"]}
        assert models["baseline"]["default_for"] == [["en", "de"]]
        assert models[memory_bundle.name]["default_for"] == []
        resp = await c.post("/v1/translate", json={"texts": ["red house"]})
        assert resp.json()["results"][0]["model"] == "baseline"
        assert resp.json()["results"][0]["translation"] == gloss("red house")
    for wrong, says in (
        ("en-de=upper-ar", "upper-ar translates de->en only"),
        ("en-de=nope", "no served model nope"),
    ):
        app = create_app(Settings(model_path=memory_bundle, models_dir=models_dir,
                                  default_models=wrong))  # fmt: skip
        with pytest.raises(RuntimeError, match=f"RAGMT_DEFAULT_MODELS: {wrong}: {says}"):
            async with running(app):
                pass
    with pytest.raises(ValueError, match="is not SOURCE-TARGET=MODEL"):
        Settings(default_models="en=baseline")


async def test_one_sparse_model_serves_english_into_each_of_its_languages(tmp_path: Path) -> None:
    """A one-to-many sparse bundle (SEEDS §2): /info and /languages list both of its pairs,
    and a request into either target decodes with that language's own sub-network."""
    model = train_toy_sparse()
    bundle = tmp_path / "sparse"
    pairs = [("en", "up"), ("en", "next")]
    save_bundle(
        bundle, model, "sparse-transformer", languages={"source": "en", "target": "up"},
        pairs=pairs, tokenizer="bytes", trained_on={"domains": {"toy-words": 4000}},
    )  # fmt: skip
    settings = Settings(model_path=bundle, stores_dir=tmp_path / "stores", beam_size=2)
    async with running(create_app(settings)) as c:
        (info,) = (await c.get("/info")).json()["models"]
        assert info["architecture"] == "sparse-transformer"
        assert info["pairs"] == info["default_for"] == [list(p) for p in pairs]
        languages = {x["code"]: x["targets"] for x in (await c.get("/languages")).json()}
        assert languages == {"en": ["next", "up"], "next": [], "up": []}  # targets listed too
        served = load_bundle(bundle).model
        for target, task in SPARSE_TASKS.items():
            body = {"texts": SPARSE_HELD_OUT, "source_lang": "en", "target_lang": target}
            resp = await c.post("/v1/translate", json=body)
            assert resp.status_code == 200, resp.text
            got = [r["translation"] for r in resp.json()["results"]]
            assert got == [task(w) for w in SPARSE_HELD_OUT], target
        # each target's blocks differ: the requests ran two different sub-networks
        blocks = served.masks("decoder")["ffn"]
        assert not torch.equal(blocks[1], blocks[2])
        resp = await c.post(
            "/v1/translate", json={"texts": ["abc"], "source_lang": "en", "target_lang": "de"}
        )
        assert resp.status_code in (400, 422) and "de" in resp.text
