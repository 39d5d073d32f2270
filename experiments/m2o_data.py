"""Many-to-English training data from the prepared multilingual Bible (`ragmt data prepare
--bible`): the Bible-M2O sets of `../shared/SEEDS.md` §0.1, e.g. {de, ru, hi, zh} -> en.

Writes a prepared language-pair directory that `ragmt train` and `ragmt eval` read:

    <out>/manifest.json       languages {source: "mul", target: "en"}, pairs [[de, en], ...],
                              counts, the Bible manifest's sha256, the books of each split
    <out>/bible/train.mul     every source's train verses, interleaved verse by verse
    <out>/bible/train.en      their English verses (a verse with an empty side is left out)
    <out>/bible/dev.mul, dev.en
    <out>/bible/test.<lang>, test.en   per source, line-aligned, for `ragmt eval --source-lang`

The splits are the Bible's own (whole books shared by all languages), so no source is trained
on a test verse of another. `--nt` keeps only New Testament training books (books 40-66): the
fast tier.

    python experiments/m2o_data.py --bible data/bible --langs de,ru,hi,zh --out data/m2o-4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from models.artifacts import atomic_directory, sha256_file, write_manifest
from models.data import read_lines

NT_FIRST_BOOK = 40


def _book(verse_id: str) -> int:
    """The book number of a verse id "BB.CCC.VVV"."""
    return int(verse_id.split(".")[0])


def build(bible: Path, langs: list[str], out: Path, nt: bool) -> dict:
    manifest = json.loads((bible / "manifest.json").read_text())
    known = set(manifest["languages"])
    missing = [x for x in [*langs, "en"] if x not in known]
    if missing:
        raise SystemExit(f"{bible} has no {', '.join(missing)}; it has {', '.join(sorted(known))}")
    counts: dict[str, dict[str, int]] = {}
    with atomic_directory(out) as tmp:
        (tmp / "bible").mkdir()
        for split in ("train", "dev"):
            en = read_lines(bible / f"{split}.en")
            ids = read_lines(bible / f"{split}.ids")
            sources = {x: read_lines(bible / f"{split}.{x}") for x in langs}
            src_out, tgt_out = [], []
            for i, target in enumerate(en):
                if split == "train" and nt and _book(ids[i]) < NT_FIRST_BOOK:
                    continue
                for x in langs:  # interleaved: every batch window mixes the sources
                    if sources[x][i].strip() and target.strip():
                        src_out.append(sources[x][i])
                        tgt_out.append(target)
                        counts.setdefault(x, {}).setdefault(split, 0)
                        counts[x][split] += 1
            (tmp / "bible" / f"{split}.mul").write_text("".join(s + "\n" for s in src_out))
            (tmp / "bible" / f"{split}.en").write_text("".join(t + "\n" for t in tgt_out))
        (tmp / "bible" / "test.en").write_text((bible / "test.en").read_text())
        for x in langs:
            (tmp / "bible" / f"test.{x}").write_text((bible / f"test.{x}").read_text())
            counts.setdefault(x, {})
            counts[x]["test"] = sum(1 for s in read_lines(bible / f"test.{x}") if s.strip())
        result = {
            "kind": "m2o-corpus",
            "format_version": 1,
            "languages": {"source": "mul", "target": "en"},
            "pairs": [[x, "en"] for x in langs],
            "counts": counts,
            "new_testament_only": nt,
            "bible_manifest_sha256": sha256_file(bible / "manifest.json"),
            "split": manifest["split"],
        }
        return write_manifest(tmp, result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bible", type=Path, default=Path("data/bible"))
    ap.add_argument("--langs", default="de,ru,hi,zh")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nt", action="store_true", help="New Testament training books only")
    args = ap.parse_args()
    result = build(args.bible, args.langs.split(","), args.out, args.nt)
    print(json.dumps(result["counts"]))


if __name__ == "__main__":
    main()
