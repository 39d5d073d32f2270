"""`ragmt build-store` and `ragmt neighbours`, driven as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.store import active_version, list_versions, open_store
from models.artifacts import ArtifactError
from service.cli import app

pytestmark = pytest.mark.integration

runner = CliRunner()

SOURCES = [
    "Open the file menu.",
    "Close the file.",
    "Save the file as a new name.",
    "The menu bar shows the file menu.",
    "Open the file menu.",  # a duplicate source under another pair id
    "Print the current page.",
    "Blessed are the meek.",
]
TARGETS = [f"DE {i}: {s}" for i, s in enumerate(SOURCES)]


@pytest.fixture()
def prepared(tmp_path: Path) -> Path:
    d = tmp_path / "data" / "en-de" / "docs"
    d.mkdir(parents=True)
    (d / "train.en").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (d / "train.de").write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    return d


def _build(out: Path, corpus: list[Path], *extra: str, domain: str = "docs") -> object:
    args = ["build-store", "--domain", domain, "--out", str(out)]
    for c in corpus:
        args += ["--corpus", str(c)]
    return runner.invoke(app, [*args, *extra])


def test_build_from_prepared_dir_and_activate(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "stores"
    res = _build(out, [prepared], "--method", "idf-ngram", "--widths", "2,4")
    assert res.exit_code == 0, res.output
    path = Path(res.stdout.strip())
    assert path.parent == out / "docs"
    assert active_version(out, "docs") == path.name
    m = open_store(path).manifest
    assert (m["method"], m["pairs"], m["params"]["widths"]) == ("idf-ngram", 7, [4, 2])
    res = _build(out, [prepared], "--method", "idf-sentence", "--no-activate")
    assert res.exit_code == 0, res.output
    assert len(list_versions(out, "docs")) == 2
    assert active_version(out, "docs") == path.name


def test_build_from_tsv_tmx_and_moses(prepared: Path, tmp_path: Path) -> None:
    tsv = tmp_path / "tm.tsv"
    rows = list(zip(SOURCES, TARGETS, strict=True))
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in rows), encoding="utf-8")
    tmx = tmp_path / "tm.tmx"
    tuv = '<tuv xml:lang="{}"><seg>{}</seg></tuv>'
    tus = "".join(f"<tu>{tuv.format('en', s)}{tuv.format('de-DE', t)}</tu>" for s, t in rows)
    tmx.write_text(f'<tmx version="1.4"><header/><body>{tus}</body></tmx>', encoding="utf-8")
    moses = [prepared / "train.en", prepared / "train.de"]
    hashes = set()
    for corpus in ([tsv], [tmx], moses):
        res = _build(tmp_path / "stores", corpus, "--method", "idf-sentence")
        assert res.exit_code == 0, res.output
        hashes.add(open_store(Path(res.stdout.strip())).manifest["corpus_sha256"])
    assert len(hashes) == 1  # the same pairs, whatever the file format


@pytest.fixture()
def active_store(prepared: Path, tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "stores"
    res = _build(out, [prepared], "--method", "idf-sentence")
    assert res.exit_code == 0, res.output
    return out, Path(res.stdout.strip()).name


def _bad_corpus(tmp_path: Path, kind: str) -> Path:
    if kind == "empty":
        p = tmp_path / "empty.tsv"
        p.write_bytes(b"")
    elif kind == "utf8":
        p = tmp_path / "bad.tsv"
        p.write_bytes(b"good\tgut\nbad \xff\xfe\tschlecht\n")
    elif kind == "tmx":
        p = tmp_path / "bad.tmx"
        p.write_text('<tmx><body><tu><tuv xml:lang="en"><seg>x</seg></tuv></body></tmx>')
    else:
        p = tmp_path / "data" / "en-de" / "empty-domain"
        p.mkdir(parents=True, exist_ok=True)
        (p / "train.en").write_text("\n")
        (p / "train.de").write_text("\n")
    return p


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("empty", "empty file"),
        ("utf8", "line 2: invalid UTF-8"),
        ("tmx", "malformed TMX"),
        ("empty-dir", "empty file"),
    ],
)
@pytest.mark.parametrize("method", ["idf-sentence", "idf-ngram"])
def test_bad_corpus_refused_and_nothing_written(
    active_store: tuple[Path, str], tmp_path: Path, kind: str, message: str, method: str
) -> None:
    out, version = active_store
    before = sorted(p.name for p in (out / "docs").iterdir())
    res = _build(out, [_bad_corpus(tmp_path, kind)], "--method", method)
    assert res.exit_code == 2
    assert message in res.output
    assert sorted(p.name for p in (out / "docs").iterdir()) == before
    assert active_version(out, "docs") == version
    res = _build(out, [_bad_corpus(tmp_path, kind)], "--method", method, domain="fresh")
    assert res.exit_code == 2
    assert not (out / "fresh").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "dense-ngram", "--model", "nowhere"], "no manifest.json"),
        (["--method", "bm25"], "unknown method 'bm25'"),
        (["--method", "idf-sentence", "--widths", "2"], "apply to the n-gram methods only"),
        (["--method", "idf-ngram", "--widths", "2,x"], "comma-separated integers"),
        (["--method", "idf-ngram", "--widths", "0,4"], "widths must be positive"),
        (["--method", "idf-ngram", "--model", "m"], "dense-ngram only"),
        (["--method", "idf-ngram", "--ray"], "dense-ngram only"),
        (["--method", "idf-sentence", "--index", "Flat"], "dense-ngram only"),
        (["--method", "idf-ngram", "--target-recall", "0.95"], "dense-ngram only"),
    ],
)
def test_bad_options_refused(
    active_store: tuple[Path, str], prepared: Path, extra: list[str], message: str
) -> None:
    out, version = active_store
    res = _build(out, [prepared], *extra)
    assert res.exit_code == 2
    assert message in res.output
    assert list_versions(out, "docs") == [version]


def test_invalid_domain_refused(prepared: Path, tmp_path: Path) -> None:
    res = _build(tmp_path / "stores", [prepared], "--method", "idf-sentence", domain="../x")
    assert res.exit_code == 2 and "invalid domain" in res.output
    assert not (tmp_path / "stores").exists()


def _neighbours(store: Path, corpus: Path, out: Path, *extra: str) -> list[dict]:
    args = ["neighbours", "--store", str(store), "-i", str(corpus), "--out", str(out)]
    res = runner.invoke(app, [*args, "--k", "3", "--batch-size", "2", *extra])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("method", ["idf-sentence", "idf-ngram"])
def test_neighbours_exclude_self(prepared: Path, tmp_path: Path, method: str) -> None:
    out = tmp_path / "stores"
    assert _build(out, [prepared], "--method", method).exit_code == 0
    plain = _neighbours(out / "docs", prepared, tmp_path / "plain.jsonl")
    assert [r["id"] for r in plain] == list(range(len(SOURCES)))
    assert plain[1]["neighbours"][0]["pair_id"] == 1  # without the flag: itself first
    rows = _neighbours(out / "docs", prepared, tmp_path / "n.jsonl", "--exclude-self")
    for r in rows:
        ids = [n["pair_id"] for n in r["neighbours"]]
        assert r["id"] not in ids
        assert all(SOURCES[i] != r["source"] for i in ids)  # nor a copy of its source
        assert len(ids) <= 3
    assert all(r["neighbours"] for r in rows[:5])  # the last two share only "the", ".": f = 0
    first = rows[0]["neighbours"][0]
    assert first["target"] == TARGETS[first["pair_id"]]
    if method == "idf-ngram":
        assert first["span"] is not None and first["matched"]


def test_neighbours_shards_concatenate_to_the_whole_run(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "stores"
    assert _build(out, [prepared], "--method", "idf-ngram").exit_code == 0
    whole = _neighbours(out / "docs", prepared, tmp_path / "all.jsonl", "--exclude-self")
    parts = [
        _neighbours(
            out / "docs", prepared, tmp_path / f"{i}.jsonl", "--exclude-self", "--shard", f"{i}/3"
        )  # fmt: skip
        for i in (1, 2, 3)
    ]
    assert [len(p) for p in parts] == _slices(len(SOURCES), 3)
    assert [r for p in parts for r in p] == whole  # same ids, same exclusions, same order
    for bad in ("0/2", "3/2", "half"):
        res = runner.invoke(app, ["neighbours", "--store", str(out / "docs"), "-i", str(prepared),
                                  "--out", str(tmp_path / "x.jsonl"), "--shard", bad])  # fmt: skip
        assert res.exit_code == 2 and "expected I/N" in res.output
    assert not (tmp_path / "x.jsonl").exists()


def _slices(n: int, parts: int) -> list[int]:
    return [(n * i) // parts - (n * (i - 1)) // parts for i in range(1, parts + 1)]


def test_neighbours_other_corpus_excludes_identical_text(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "stores"
    assert _build(out, [prepared], "--method", "idf-sentence").exit_code == 0
    other = tmp_path / "other.tsv"
    other.write_text("Close the file.\tx\nPrint the page.\ty\n", encoding="utf-8")
    rows = _neighbours(out / "docs", other, tmp_path / "n.jsonl", "--exclude-self")
    assert 1 not in [n["pair_id"] for n in rows[0]["neighbours"]]  # same text as pair 1
    assert rows[1]["neighbours"][0]["pair_id"] == 5


def test_neighbours_refuses_tampered_store(active_store: tuple[Path, str], tmp_path: Path) -> None:
    out, version = active_store
    victim = out / "docs" / version / "targets.bin"
    victim.write_bytes(victim.read_bytes() + b"!")
    corpus = tmp_path / "q.tsv"
    corpus.write_text("a\tb\n", encoding="utf-8")
    args = ["neighbours", "--store", str(out / "docs"), "-i", str(corpus)]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "n.jsonl")])
    assert res.exit_code == 2
    assert "checksum mismatch for targets.bin" in res.output
    assert not (tmp_path / "n.jsonl").exists()


def test_stores_are_signed_when_a_key_is_set_and_old_ones_by_sign_store(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "stores"
    assert _build(out, [prepared], "--method", "idf-sentence").exit_code == 0
    unsigned = active_version(out, "docs")
    monkeypatch.setenv("RAGMT_STORE_SIGNING_KEY", "k1")
    with pytest.raises(ArtifactError, match="unsigned store"):
        open_store(out / "docs" / unsigned, b"k1")
    result = _build(out, [prepared], "--method", "idf-ngram", "--widths", "2")
    assert result.exit_code == 0, result.output
    signed = active_version(out, "docs")
    assert signed != unsigned
    open_store(out / "docs" / signed, b"k1")  # built signed with the key of the environment
    result = runner.invoke(app, ["sign-store", "--domain", "docs", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"signed docs/{unsigned}" in result.output
    open_store(out / "docs" / unsigned, b"k1")
    with pytest.raises(ArtifactError, match="signature does not match"):
        open_store(out / "docs" / unsigned, b"k2")
    monkeypatch.delenv("RAGMT_STORE_SIGNING_KEY")
    result = runner.invoke(app, ["sign-store", "--domain", "docs", "--out", str(out)])
    assert result.exit_code == 2 and "RAGMT_STORE_SIGNING_KEY is not set" in result.output
