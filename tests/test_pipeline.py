"""The one translation path (`models.pipeline`): the CLI, the Python API and HTTP give the same
output for the same request, and the pipeline retrieves for the model's store kind only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from index_builder.retrieval.serving import retrieve_with
from index_builder.store import load_retriever, open_store
from models import pipeline
from models.bundle import load_bundle
from models.literals import find_literals
from models.translator import DecodeOptions, Translation, Translator
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


@dataclass
class FakeTranslator:
    """What `prepare` reads of a translator."""

    source_lang: str = "en"
    uses_memory: bool = False


@dataclass
class Hit:
    source: str
    target: str


def test_a_tag_pair_left_empty_is_moved_to_its_words_else_wrapped_whole() -> None:
    texts = [
        "<b>Save</b> your changes before closing.",
        "Click <b>Save</b> to keep your changes.",
        "Open <b>the file</b> now.",
        "Press <b>Enter</b> twice.",
    ]
    hit = Hit("Click <b>Save</b> now.", "Klicken Sie jetzt auf <b>Save</b>.")  # kept as a name
    asked: list[str] = []

    def retrieve(sentences, k):
        asked.extend(sentences)  # an enclosed text is looked up on its own: "Save" -> "Speichern"
        found = [[hit] if s in texts else [Hit(s, f"de:{s}")] for s in sentences]
        return found, [torch.zeros(1, 2) for _ in sentences]

    memory = FakeTranslator(uses_memory=True)
    prepared = pipeline.prepare(memory, texts, DecodeOptions(), retrieve)  # type: ignore[arg-type]
    assert prepared.sentences == [
        *texts,
        "Save {1} your changes before closing.",
        "Click {1} Save {2} to keep your changes.",
        "Open {1} the file {2} now.",
        "Press {1} Enter {2} twice.",
        "{1} your changes before closing.",  # each pair masked whole, then what it encloses
        "Save",
        "Click {1} to keep your changes.",
        "Save",
        "Open {1} now.",
        "the file",
        "Press {1} twice.",
        "Enter",
    ]
    pairs, encodings = prepared.pairs, prepared.encodings
    assert pairs is not None and encodings is not None
    assert len(pairs) == len(encodings) == len(prepared.sentences) == 16
    assert pairs[5] == [("Click {1} Save {2} now.", "Klicken Sie jetzt auf {1} Save {2} .")]
    assert pairs[10] == [("Click {1} now.", "Klicken Sie jetzt auf {1} .")]  # the pair whole
    assert asked == [*texts, "Save", "Save", "the file", "Enter"]
    assert pairs[11] == [("Save", "de:Save")]  # an enclosed text reads its own neighbours
    assert pairs[15] == [("Enter", "de:Enter")]
    assert [e is None for e in encodings] == [False] * 4 + [True] * 12

    decoded = [
        Translation(t, None)
        for t in [
            "<b>Save</b> Ihre Änderungen vor dem Schließen.",  # copied: the masked one
            "Klicken Sie auf <b>Save</b>, um Ihre Änderungen zu halten.",  # copied too
            "Öffnen Sie jetzt <b>die Datei</b>.",  # kept, nothing empty: as it is
            "<b></b> Zweimal Enter drücken.",  # kept, but empty: the masked one is fine
            "{1} Ihre Änderungen vor dem Schließen speichern.",
            "Klicken Sie auf {1}{2}, um Ihre Änderungen zu halten.",
            "Öffnen Sie {1} die Datei {2} jetzt.",
            "Drücken Sie {1} Enter {2} zweimal.",
            "{1} Ihre Änderungen vor dem Schließen.",
            "Speichern",
            "Klicken Sie auf {1}, um Ihre Änderungen zu behalten.",
            "Speichern",
            "Öffnen Sie {1} jetzt.",
            "die Datei",
            "Drücken Sie {1} zweimal.",
            "Enter",
        ]
    ]
    out = [o.text for o in pipeline.finish(prepared, decoded)]
    assert out == [
        "Ihre Änderungen vor dem Schließen <b>speichern</b>.",  # moved to its word
        "Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu behalten.",  # wrapped whole
        "Öffnen Sie jetzt <b>die Datei</b>.",
        "Drücken Sie <b>Enter</b> zweimal.",
    ]
    for text, translation in zip(texts, out, strict=True):
        for a, b, _ in find_literals(text):
            assert translation.count(text[a:b]) == text.count(text[a:b])
    with pytest.raises(ValueError, match="15 translations for 16 sentences"):
        pipeline.finish(prepared, decoded[:-1])


def test_mask_first_decodes_a_sentence_with_literals_once_masked_in_its_place() -> None:
    texts = ["Open %s now.", "Read the manual.", "Copy 3 files to /tmp/x."]
    hit = Hit("Open %s later.", "Öffnen Sie %s später.")

    def retrieve(sentences, k):
        return [[hit] for _ in sentences], [torch.full((1, 2), float(i)) for i in range(3)]

    memory = FakeTranslator(uses_memory=True)
    options = DecodeOptions(mask_first=True)
    prepared = pipeline.prepare(memory, texts, options, retrieve)  # type: ignore[arg-type]
    assert prepared.sentences == ["Open {1} now.", "Read the manual.", "Copy {1} files to {2}."]
    assert prepared.pairs == [
        [("Open {1} later.", "Öffnen Sie {1} später.")],  # the neighbours masked alike
        [("Open %s later.", "Öffnen Sie %s später.")],
        [("Open %s later.", "Öffnen Sie %s später.")],
    ]
    encodings = prepared.encodings
    assert encodings is not None and [e is None for e in encodings] == [True, False, True]
    decoded = [
        Translation(t, None)
        for t in ["Öffnen Sie {1} jetzt.", "Lesen Sie das Handbuch.", "{1} Dateien nach {2}."]
    ]
    out = [o.text for o in pipeline.finish(prepared, decoded)]
    assert out == ["Öffnen Sie %s jetzt.", "Lesen Sie das Handbuch.", "3 Dateien nach /tmp/x."]
    with pytest.raises(ValueError, match="2 translations for 3 sentences"):
        pipeline.finish(prepared, decoded[:2])

    # a sentence with a glossary term is still decoded twice: its own may inflect the term
    class Terms:
        def find(self, text: str) -> list[tuple[int, int, str]]:
            at = text.find("manual")
            return [(at, at + 6, "Handbuch")] if at >= 0 else []

    mixed = pipeline.prepare(memory, texts, options, retrieve, glossary=Terms())  # type: ignore[arg-type]
    assert mixed.in_place == {0, 2} and mixed.variants == [0, 1, 2]
    assert mixed.sentences == [
        "Open {1} now.",
        "Read the manual.",
        "Copy {1} files to {2}.",
        "Read the {1}.",
    ]
    assert [mixed.masked_at(j) for j in range(3)] == [0, 3, 2] and mixed.extra_at == 4
    own = [
        Translation(t, None)
        for t in ["Öffnen Sie {1}.", "Lies die Handbuchseiten.", "{1} {2}", "x"]
    ]
    assert [o.text for o in pipeline.finish(mixed, own)] == [
        "Öffnen Sie %s.",
        "Lies die Handbuchseiten.",  # its own translation used the term, compounded: kept
        "3 /tmp/x",
    ]
    # without it, each is decoded as it is and masked, and its own kept where it kept all
    both = pipeline.prepare(memory, texts, DecodeOptions(), retrieve)  # type: ignore[arg-type]
    assert both.sentences == [*texts, "Open {1} now.", "Copy {1} files to {2}."]
    own = [Translation(t, None) for t in ["Öffnen Sie %s jetzt!", "Lesen.", "Kopieren.", "x", "y"]]
    assert [o.text for o in pipeline.finish(both, own)][:2] == ["Öffnen Sie %s jetzt!", "Lesen."]


def test_an_html_unit_whose_pair_came_back_empty_is_repaired_between_its_blocks() -> None:
    options = DecodeOptions(format="html")
    texts = ["<p>Click <b>Save</b> to keep your changes.</p>"]
    prepared = pipeline.prepare(FakeTranslator(), texts, options)  # type: ignore[arg-type]
    assert prepared.sentences[2:] == ["Click {1} to keep your changes.", "Save"]
    decoded = [
        Translation(t, None)
        for t in [
            "Klicken Sie auf <b>Save</b>, um Ihre Änderungen zu halten.",
            "Klicken Sie auf {1}{2}, um Ihre Änderungen zu halten.",
            "Klicken Sie auf {1}, um Ihre Änderungen zu behalten.",
            "Speichern",
        ]
    ]
    assert [o.text for o in pipeline.finish(prepared, decoded)] == [
        "<p>Klicken Sie auf <b>Speichern</b>, um Ihre Änderungen zu behalten.</p>"
    ]
