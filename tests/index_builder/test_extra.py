"""The extra train-only data: catalog discovery, package reading, the pair score, the merge.

Contents lines, Ding lines, .mo files and .deb packages are all made here; nothing is
downloaded.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from index_builder.corpus import Pair
from index_builder.prepare import catalogs
from index_builder.prepare.extra import (
    ExtraConfig,
    Lexicon,
    filter_pairs,
    merge_into_train,
    score_reason,
)
from index_builder.prepare.fetch import cached_debs, fetch_debs
from index_builder.prepare.sources import ding, ding_glossary, extra_sources
from tests.index_builder.test_gettext import write_mo
from tests.index_builder.test_prepare import _deb

pytestmark = pytest.mark.unit
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

# ------------------------------------------------------------------------------ discovery

CONTENTS = [
    "usr/share/locale/de/LC_MESSAGES/foo.mo                      utils/foo",
    "usr/share/locale/fr/LC_MESSAGES/foo.mo                      utils/foo-fr",
    "usr/share/locale/de_CH/LC_MESSAGES/bar.mo                   utils/bar-ch",
    "usr/share/locale/de/LC_MESSAGES/bar.po                      utils/bar-po",
    "usr/share/games/wesnoth/locale/de/LC_MESSAGES/x.mo          games/game-a,games/game-b",
    "usr/lib/python3/dist-packages/app/locale/de/LC_MESSAGES/django.mo python/python3-app",
    "usr/share/doc/My App/locale/de/LC_MESSAGES/my app.mo        misc/with-space",
    "usr/share/locale/de/LC_MESSAGES/sub/deeper.mo               utils/deeper",
    "usr/share/locale/de/LC_MESSAGES/gnumed.mo                   misc/gnumed-client",
    "usr/share/locale/de/LC_MESSAGES/huge.mo                     games/huge-data",
    "usr/share/locale/de/LC_MESSAGES/used.mo                     graphics/gimp-data",
    "",
    "lonely-path-without-owner",
]


def test_packages_in_contents() -> None:
    found = catalogs.packages_in_contents(CONTENTS, "de")
    assert found == {
        "foo",
        "game-a",
        "game-b",
        "python3-app",
        "with-space",
        "gnumed-client",
        "huge-data",
        "gimp-data",
    }
    assert catalogs.packages_in_contents(CONTENTS, "fr") == {"foo-fr"}


def test_select_packages_rule() -> None:
    found = catalogs.packages_in_contents(CONTENTS, "de") | {
        "libreoffice-help-de",
        "xiphos-data",
        "gnumed-server",
        "no-size",
    }
    sizes = {n: 1000 for n in found if n != "no-size"} | {"huge-data": 30_000_000}
    names = catalogs.select_packages(found, sizes, catalogs.used_packages("de"))
    assert names == ["foo", "game-a", "game-b", "python3-app", "with-space"]
    assert "gimp-data" in catalogs.used_packages("de")  # excluded as another source's
    assert catalogs.select_packages(found, sizes, set(), max_bytes=100) == []


def test_committed_list_follows_the_rule() -> None:
    names = catalogs.read_package_list(catalogs.list_path("de"))
    assert len(names) > 500
    assert names == sorted(set(names))
    assert not set(names) & catalogs.used_packages("de")
    assert not [n for n in names if catalogs.DOMAIN_EXCLUDED.fullmatch(n)]


def test_read_package_list_and_license(tmp_path: Path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_text("# header\nfoo\n\n  bar  # why\n", encoding="utf-8")
    assert catalogs.read_package_list(listed) == ["foo", "bar"]
    c = tmp_path / "copyright"
    c.write_text(
        "Format: https://www.debian.org/doc/\n\nFiles: *\nLicense: GPL-2+\n\nLicense: MIT\n"
    )
    assert catalogs.copyright_license(c) == "GPL-2+"
    c.write_text("Files: *\nLicense:\n This program is free software.\n\nLicense: BSD-3-clause\n")
    assert catalogs.copyright_license(c) == "BSD-3-clause"
    c.write_text("This package was debianized by someone.\nIt is GPL.\n")
    assert catalogs.copyright_license(c).startswith("unknown (copyright file not machine")
    assert catalogs.copyright_license(tmp_path / "none").startswith("unknown (no copyright")


# ------------------------------------------------------------------------------ packages


def _catalog_deb(debs: Path, stage: Path, name: str, entries: list[tuple[str, str]]) -> None:
    mo = write_mo(stage / f"{name}.mo", entries).read_bytes()
    _deb(
        debs,
        stage,
        name,
        {
            f"usr/share/locale/de/LC_MESSAGES/{name}.mo": mo,
            f"usr/share/locale/fr/LC_MESSAGES/{name}.mo": mo,
            f"opt/{name}/locale/de/LC_MESSAGES/plugin.mo": mo,
            f"usr/share/doc/{name}/copyright": "Files: *\nLicense: LGPL-2.1+\n",
            f"usr/bin/{name}": "#!/bin/sh\n",
        },
    )


@needs_dpkg
def test_fetch_and_read_pool(tmp_path: Path) -> None:
    cache, stage = tmp_path / "cache", tmp_path / "stage"
    (cache / "debs").mkdir(parents=True)
    stage.mkdir()
    _catalog_deb(cache / "debs", stage, "alpha", [("", "h"), ("_Open file", "Datei _öffnen")])
    _catalog_deb(cache / "debs", stage, "beta", [("Close", "Schließen")])
    # a package whose catalog is not a .mo file: reported, the others still read
    _deb(
        cache / "debs",
        stage,
        "broken",
        {"usr/share/locale/de/LC_MESSAGES/x.mo": "not a catalog " * 4},
    )
    assert set(cached_debs(cache)) == {"alpha", "beta", "broken"}
    names = ["alpha", "beta", "broken", "missing"]
    pool = catalogs.fetch_pool(names, cache, offline=True, log=lambda m: None)
    assert set(pool.debs) == {"alpha", "beta", "broken"}
    assert pool.failed == {"missing": "not in the cache and --offline was given"}
    packages, failed = catalogs.read_pool(pool, "de", cache, log=lambda m: None)
    assert set(failed) == {"broken", "missing"} and "not a .mo file" in failed["broken"]
    alpha, beta = packages
    assert alpha.name == "alpha" and beta.name == "beta"
    assert [(p.source, p.target) for p in alpha.pairs] == [("Open file", "Datei öffnen")] * 2
    assert {p.doc for p in alpha.pairs} == {
        "alpha:opt/alpha/locale/de/LC_MESSAGES/plugin.mo",
        "alpha:usr/share/locale/de/LC_MESSAGES/alpha.mo",
    }
    assert {p.origin for p in alpha.pairs} == {catalogs.ORIGIN}
    assert alpha.record["license"] == "LGPL-2.1+" and alpha.record["extracted"] == 2
    # only the German catalogs and the copyright file were unpacked
    root = cache / "unpacked" / f"{catalogs.ORIGIN}-de" / "alpha"
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files == [
        ".unpacked-from",
        "opt/alpha/locale/de/LC_MESSAGES/plugin.mo",
        "usr/share/doc/alpha/copyright",
        "usr/share/locale/de/LC_MESSAGES/alpha.mo",
    ]
    again, _ = catalogs.read_pool(pool, "de", cache, log=lambda m: None)
    assert [p.pairs for p in again] == [p.pairs for p in packages]


def test_fetch_debs_offline_reports_missing(tmp_path: Path) -> None:
    found, failed = fetch_debs(["a", "b"], tmp_path, offline=True)
    assert found == {} and set(failed) == {"a", "b"}


# ----------------------------------------------------------------------------- Ding

DING = "\n".join(
    [
        "# Version :: 1.9",
        "Haus {n}; Gebäude {n} | Häuser {pl}; Gebäude {pl} :: house; building | houses; buildings",
        "Das Haus ist alt. :: The house is old.",
        "Datei {f} [comp.] | Dateien {pl} :: file | files",
        "öffnen {vt} :: to open",
        "eins | zwei :: one",
    ]
)


def test_ding_glossary_is_the_rest_of_ding(tmp_path: Path) -> None:
    path = tmp_path / "usr/share/trans/de-en"
    path.parent.mkdir(parents=True)
    path.write_text(DING + "\n", encoding="utf-8")
    gloss = [(p.source, p.target) for p in ding_glossary(tmp_path, "de")]
    assert gloss == [
        ("house", "Haus"),
        ("building", "Gebäude"),
        ("houses", "Häuser"),
        ("buildings", "Gebäude"),
        ("file", "Datei"),
        ("files", "Dateien"),
        ("to open", "öffnen"),
    ]
    assert [(p.source, p.target) for p in ding(tmp_path, "de")] == [
        ("The house is old.", "Das Haus ist alt.")
    ]
    assert {p.origin for p in ding_glossary(tmp_path, "de")} == {"ding-glossary"}
    assert ding_glossary(tmp_path, "fr") == []
    assert [s.name for s in extra_sources("de")] == ["ding-glossary"]
    assert extra_sources("fr") == []


# ----------------------------------------------------------------------------- score


def _p(en: str, de: str, origin: str = "x", doc: str = "d") -> Pair:
    return Pair(en, de, origin, doc)


LEXICON = Lexicon.from_glossary(
    [
        _p("file", "Datei"),
        _p("to open", "öffnen"),
        _p("folder", "Ordner"),
        _p("selected", "ausgewählt"),
        _p("the", "der"),
        _p("name", "Name"),
        _p("server", "Server"),
        _p("cannot be found", "kann nicht gefunden werden"),
    ]
)


def test_lexicon() -> None:
    assert LEXICON.translations["file"] == {"datei"}
    assert LEXICON.translations["open"] == {"öffnen"}  # "to " is dropped from verbs
    assert "cannot" in LEXICON.english and "gefunden" in LEXICON.german
    assert "the" not in LEXICON.translations  # too short to judge a pair by


@pytest.mark.parametrize(
    ("en", "de", "reason"),
    [
        ("Open the selected file", "Die ausgewählte Datei öffnen", None),
        ("Open file 2 of 3", "Datei 2 von 3 öffnen", None),
        ("Open file 2 of 3", "Datei 3 von 3 öffnen", "numbers"),
        ("Open the file", "Открыть файл", "target-script"),
        ("Datei ouvrir dossier", "Datei öffnen", "source-not-english"),
        ("Open the selected file", "open the selected file now", "target-english"),
        ("Open the selected folder file", "Die Farbe ändern", "lexical-mismatch"),
        ("Open selected", "Farbe ändern", None),  # too few known words to judge
        ("Server name", "Server-Name", None),
    ],
)
def test_score_reason(en: str, de: str, reason: str | None) -> None:
    assert score_reason(en, de, LEXICON) == reason


def test_score_without_lexicon_and_thresholds() -> None:
    assert score_reason("Open the selected folder file", "Die Farbe ändern", None) is None
    assert score_reason("one 1", "eins 2", None) == "numbers"
    lenient = ExtraConfig(min_english=0.0)
    assert score_reason("Datei ouvrir dossier", "Datei öffnen", LEXICON, lenient) is None


def test_filter_pairs_counts_every_reason() -> None:
    pairs = [
        _p("Open file", "Datei öffnen"),
        _p("PDF", "PDF"),
        _p("%s files", "Dateien"),
        _p("Open file 2", "Datei öffnen"),
        _p("Close", ""),
    ]
    kept, dropped = filter_pairs(pairs, LEXICON)
    assert kept == pairs[:1]
    assert dropped == {"identical": 1, "placeholders": 1, "numbers": 1, "empty": 1}


# ----------------------------------------------------------------------------- merge


def test_merge_into_train() -> None:
    train = [_p("Open", "Öffnen"), _p("Close", "Schließen")]
    pool = [
        _p("open", "öffnen", doc="a"),  # the same pair as in train, by dedup key
        _p("Close", "Zumachen", doc="a"),
        _p("Save", "Sichern", doc="a"),
        _p("Save", "Speichern", doc="b"),
        _p("Save", "Speichern", doc="c"),
        _p("Save", "Ablegen", doc="d"),
        _p("Save", "Retten", doc="e"),
        _p("Quit", "Beenden", doc="f"),
    ]
    added, dropped = merge_into_train(train, pool, max_variants=2)
    # "Speichern" is supported by two packages, so it goes before "Sichern"; "Close" has
    # room for one more translation; order is the pool's
    assert [(p.source, p.target, p.doc) for p in added] == [
        ("Close", "Zumachen", "a"),
        ("Save", "Sichern", "a"),
        ("Save", "Speichern", "b"),
        ("Quit", "Beenden", "f"),
    ]
    assert dropped == {"duplicate": 1, "in-train": 1, "variant-cap": 2}
    added1, _ = merge_into_train(train, pool, max_variants=1)
    assert [(p.source, p.target) for p in added1] == [("Save", "Speichern"), ("Quit", "Beenden")]
    assert merge_into_train([], [], 3) == ([], {"duplicate": 0})
