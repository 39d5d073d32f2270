"""`prepare(extra=...)` on fixture packages: extra data joins general train and nothing else.

A catalog package is built to hold every dev and test pair of a run without extra data,
so the only thing that keeps them out of train is the contamination check.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from index_builder.prepare import catalogs
from index_builder.prepare.build import prepare
from index_builder.prepare.clean import dedup_key
from index_builder.prepare.extra import ExtraConfig
from models.artifacts import MANIFEST, read_manifest
from tests.index_builder.test_extra import _catalog_deb
from tests.index_builder.test_gettext import write_mo
from tests.index_builder.test_prepare import (
    CFG,
    DOMAINS,
    LANG,
    SOURCE_NAMES,
    _deb,
    chosen_sources,
    make_cache,
    mtimes,
    split_lines,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb"),
]

NEW = [
    ("Rename the selected layer", "Die ausgewählte Ebene umbenennen"),
    ("Show hidden files", "Verborgene Dateien anzeigen"),
    ("Undo the last action", "Letzte Aktion rückgängig machen"),  # already in general train
]
NOISY = [("Page 1 of 2", "Seite 3 von 4")]  # numbers differ: dropped by the score
# The fixture lexicon is a handful of Ding words: language checks would judge nothing well.
EXTRA = ExtraConfig(min_english=0.0, max_english_target=1.0)
PACKAGES = ["absent-app", "extra-app", "noisy-app"]


def _held_out(pair_dir: Path) -> list[tuple[str, str]]:
    return [
        (en, de)
        for d in DOMAINS
        for s in ("dev", "test")
        for en, de in zip(
            split_lines(pair_dir, d, s, "en"), split_lines(pair_dir, d, s, LANG), strict=True
        )
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("prepare-extra")
    cache, _ = make_cache(root)
    srcs = chosen_sources(*SOURCE_NAMES)
    base = prepare(root / "base", cache, CFG, offline=True, log=lambda m: None, only_sources=srcs)
    held = _held_out(root / "base" / CFG.pair)
    stage = root / "stage-extra"
    stage.mkdir()
    _catalog_deb(cache / "debs", stage, "extra-app", sorted(set(held)) + NEW)
    mo = write_mo(stage / "noisy.mo", NOISY).read_bytes()
    _deb(cache / "debs", stage, "noisy-app", {"usr/share/locale/de/LC_MESSAGES/n.mo": mo})
    log: list[str] = []
    kwargs: dict[str, Any] = {
        "offline": True,
        "log": log.append,
        "only_sources": srcs,
        "extra": EXTRA,
        "extra_packages": PACKAGES,
    }
    extra = prepare(root / "extra", cache, CFG, **kwargs)
    return {
        "root": root,
        "cache": cache,
        "base": base,
        "extra": extra,
        "base_dir": root / "base" / CFG.pair,
        "extra_dir": root / "extra" / CFG.pair,
        "held": held,
        "kwargs": kwargs,
        "log": log,
    }


def test_dev_and_test_are_byte_identical(runs: dict[str, Any]) -> None:
    base, extra = runs["base"], runs["extra"]
    for d in DOMAINS:
        for s in ("dev", "test"):
            for x in ("en", LANG, "origin"):
                rel = f"{d}/{s}.{x}"
                assert extra["files"][rel] == base["files"][rel]
                assert (runs["extra_dir"] / rel).read_bytes() == (
                    runs["base_dir"] / rel
                ).read_bytes()
        if d != "general":
            for x in ("en", LANG, "origin"):
                assert extra["files"][f"{d}/train.{x}"] == base["files"][f"{d}/train.{x}"]
    assert extra["config_hash"] != base["config_hash"]
    assert "extra" not in base and read_manifest(runs["extra_dir"], "corpus", 1) == extra


def test_general_train_is_the_old_one_then_the_new_pairs(runs: dict[str, Any]) -> None:
    old = {x: split_lines(runs["base_dir"], "general", "train", x) for x in ("en", LANG, "origin")}
    new = {x: split_lines(runs["extra_dir"], "general", "train", x) for x in ("en", LANG, "origin")}
    n = len(old["en"])
    for x in old:
        assert new[x][:n] == old[x]
    added = list(zip(new["en"][n:], new[LANG][n:], new["origin"][n:], strict=True))
    assert ("Rename the selected layer", "Die ausgewählte Ebene umbenennen", "debian-gettext") in (
        added
    )
    assert ("house", "Haus", "ding-glossary") in added
    assert ("Show hidden files", "Verborgene Dateien anzeigen", "debian-gettext") in added
    # already there, and a pair with wrong numbers: neither added
    assert not [a for a in added if a[0] in ("Undo the last action", "Page 1 of 2")]
    rec = runs["extra"]["extra"]
    assert (
        rec["train_pairs_before"]
        == n + runs["base"]["contamination_check"]["removed_from_train"]["general"]
    )
    assert rec["train_pairs_after"] == len(new["en"])
    assert runs["extra"]["splits"]["general"]["train"]["pairs"] == len(new["en"])


def test_no_heldout_source_in_train(runs: dict[str, Any]) -> None:
    held = {dedup_key(en) for en, _ in runs["held"]}
    for d in DOMAINS:
        train = {dedup_key(s) for s in split_lines(runs["extra_dir"], d, "train", "en")}
        assert not train & held
    check = runs["extra"]["contamination_check"]
    assert check["passed"] and check["heldout_pairs_in_train_after"] == 0
    base_removed = runs["base"]["contamination_check"]["removed_from_train"]["general"]
    # every held-out pair of the catalog (all distinct from general train) was caught there
    catalog = runs["extra"]["extra"]["sources"][catalogs.ORIGIN]
    in_train = runs["extra"]["extra"]["in_train_after_contamination_check"][catalogs.ORIGIN]
    assert check["removed_from_train"]["general"] - base_removed == catalog["added"] - in_train
    assert catalog["added"] - in_train > 0


def test_manifest_records_the_extra_sources(runs: dict[str, Any]) -> None:
    rec = runs["extra"]["extra"]
    assert rec["config"]["max_variants"] == EXTRA.max_variants
    catalog = rec["sources"][catalogs.ORIGIN]
    assert set(catalog["failed"]) == {"absent-app"}
    assert set(catalog["packages"]) == {"extra-app", "noisy-app"}
    app = catalog["packages"]["extra-app"]
    assert app["license"] == "LGPL-2.1+"
    assert app["extracted"] == 2 * (len(set(runs["held"])) + len(NEW))  # two .mo files
    assert catalog["dropped"].get("numbers") == 1
    assert catalog["kept"] + sum(catalog["dropped"].values()) == catalog["extracted"]
    assert catalog["package_count"] == 2
    assert sum(p["added"] for p in catalog["packages"].values()) == catalog["added"]
    gloss = rec["sources"]["ding-glossary"]
    assert gloss["extracted"] > 0 and gloss["license"] == "GPL-2+"
    origins = runs["extra"]["splits"]["general"]["train"]["by_origin"]
    for name, count in rec["in_train_after_contamination_check"].items():
        assert origins[name] == count


def test_second_run_is_a_noop(runs: dict[str, Any]) -> None:
    before = mtimes(runs["extra_dir"])
    log: list[str] = []
    again = prepare(
        runs["root"] / "extra", runs["cache"], CFG, **(runs["kwargs"] | {"log": log.append})
    )
    assert again == runs["extra"] and mtimes(runs["extra_dir"]) == before
    assert any("up to date" in line for line in log)
    assert (runs["extra_dir"] / MANIFEST).is_file()
