"""The one translation path (`models.pipeline`): the CLI, the Python API and HTTP give the same
output for the same request, and the pipeline retrieves for the model's store kind only."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.retrieval.serving import retrieve_with
from index_builder.store import load_retriever, open_store
from models import pipeline
from models.bundle import load_bundle
from models.translator import DecodeOptions, Translator
from service.app import create_app
from service.cli import app as cli
from service.settings import Settings
from tests.service.conftest import make_store, running
from tests.toy import gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

TEXTS = ["red house", "one two three", "", "blue tree. Green house four", "five"]


def _retrieve(stores: Path, translator: Translator, domain: str = "toy") -> pipeline.Retrieve:
    return retrieve_with(translator, load_retriever(open_store(stores / domain)))


async def test_cli_python_and_http_translate_a_request_identically(
    memory_bundle: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    make_store(stores, "toy", toy_pairs(40, seed=8), activate=True)
    options = DecodeOptions(beam_size=2, neighbours_k=3)

    translator = Translator.from_loaded(load_bundle(memory_bundle))
    done = pipeline.translate(translator, TEXTS, options, _retrieve(stores, translator))
    python = [o.text for o in done.outputs]
    assert python[2] == "" and all(python[i] for i in (0, 1, 3, 4))
    assert done.sentences == 6  # "blue tree. Green house four" is two sentences

    args = ["translate", "--model", str(memory_bundle), "--domain", "toy", "--stores",
            str(stores), "--beam", "2", "--neighbours", "3"]  # fmt: skip
    res = CliRunner().invoke(cli, args, input="".join(t + "\n" for t in TEXTS))
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == python

    settings = Settings(model_path=memory_bundle, stores_dir=stores, beam_size=2, neighbours_k=3)
    async with running(create_app(settings)) as c:
        resp = await c.post("/v1/translate", json={"texts": TEXTS, "domain": "toy"})
    assert resp.status_code == 200, resp.text
    assert [r["translation"] for r in resp.json()["results"]] == python


def test_the_pipeline_retrieves_for_a_memory_model_or_when_provenance_is_asked(
    bundle: Path, memory_bundle: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    make_store(stores, "toy", toy_pairs(40, seed=8), activate=True)
    options = DecodeOptions(beam_size=1, neighbours_k=2)
    texts = ["red house. Blue tree", "  ", "one two"]

    plain = Translator.from_loaded(load_bundle(bundle))
    assert not plain.uses_memory
    retrieve = _retrieve(stores, plain)
    prepared = pipeline.prepare(plain, texts, options, retrieve)
    assert prepared.hits is None and prepared.pairs is None  # nothing it would read
    assert prepared.sentences == ["red house.", "Blue tree", "", "one two"]
    shown = pipeline.prepare(plain, texts, options, retrieve, provenance=True)
    assert shown.pairs is None  # retrieved to be shown, never read by this model
    assert [len(h) for h in shown.hits] == [2, 2, 0, 2]  # a blank sentence retrieves nothing
    out = pipeline.finish(shown, pipeline.decode(plain, shown.sentences, options))
    first = [t.text for t in pipeline.decode(plain, ["red house.", "Blue tree"], options)]
    assert [o.text for o in out] == [" ".join(first), "", gloss("one two")]
    # provenance per text: its sentences' neighbours, in sentence order
    assert [len(o.neighbours) for o in out] == [4, 0, 2]
    assert out[0].neighbours == shown.hits[0] + shown.hits[1]
    assert all(o.gate is None for o in out)

    memory = Translator.from_loaded(load_bundle(memory_bundle))
    read = pipeline.prepare(memory, texts, options, _retrieve(stores, memory))
    assert read.pairs is not None and [len(p) for p in read.pairs] == [2, 2, 0, 2]
    out = pipeline.finish(read, pipeline.decode(memory, read.sentences, options, read.pairs))
    assert out[1] == pipeline.Output("", None, [])
    assert all(0.0 < o.gate < 1.0 for o in (out[0], out[2]))


async def test_literal_text_comes_back_exactly_and_plain_text_is_unchanged(bundle: Path) -> None:
    translator = Translator.from_loaded(load_bundle(bundle))
    literal = [
        "red house /etc/ragmt/config.yaml",
        "one two help@example.com three",
        "<b>blue tree</b>",
        "five 😀",
        "https://example.org",
    ]
    plain = ["red house", "one two three"]
    on = pipeline.translate(translator, literal + plain, DecodeOptions(beam_size=2))
    off = pipeline.translate(translator, plain, DecodeOptions(beam_size=2, keep_literals=False))
    outs = [o.text for o in on.outputs]
    assert "/etc/ragmt/config.yaml" in outs[0] and "help@example.com" in outs[1]
    assert outs[2].startswith("<b>") and outs[2].endswith("</b>") and outs[3].endswith(" 😀")
    assert outs[4] == "https://example.org"
    assert outs[5:] == [o.text for o in off.outputs]
    prepared = pipeline.prepare(translator, literal + plain)
    assert prepared.variants == [0, 1, 2, 3]  # decoded masked too; a bare URL is not decoded
