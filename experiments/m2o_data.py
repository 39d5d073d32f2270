"""Many-to-English training data from the prepared multilingual Bible (`ragmt data prepare
--bible`): the Bible-M2O sets of `../shared/SEEDS.md` §0.1, e.g. {de, ru, hi, zh} -> en.

Writes a prepared language-pair directory that `ragmt train` and `ragmt eval` read:

    <out>/manifest.json       languages {source: "mul", target: "en"}, pairs [[de, en], ...],
                              counts, the Bible manifest's sha256, the books of each split
    <out>/bible/train.mul     every source's train verses, interleaved verse by verse
    <out>/bible/train.en      their English verses (a verse with an empty side is left out)
    <out>/bible/dev.mul, dev.en
    <out>/bible/test.<lang>, test.en   per source, line-aligned, for `ragmt eval --source-lang`

`--test-verses N` keeps the first N test verses (decoding byte models on a CPU is slow);
`--noise 0.05,0.1` adds `<out>/bible-noise5/`, `<out>/bible-noise10/`: the test sources with
that share of characters changed as users mistype (`noisy`), the references unchanged.

The splits are the Bible's own (whole books shared by all languages), so no source is trained
on a test verse of another. `--nt` keeps only New Testament training books (books 40-66): the
fast tier.

    python experiments/m2o_data.py --bible data/bible --langs de,ru,hi,zh --out data/m2o-4
"""

from __future__ import annotations

import argparse
import json
import random
import unicodedata
from pathlib import Path

from models.artifacts import atomic_directory, sha256_file, write_manifest
from models.data import read_lines

NT_FIRST_BOOK = 40


def _book(verse_id: str) -> int:
    """The book number of a verse id "BB.CCC.VVV"."""
    return int(verse_id.split(".")[0])


def noisy(text: str, rate: float, rng: random.Random) -> str:
    """`text` with about `rate` of its characters changed, each change one of: a typo (a
    neighbouring letter of the same script swapped in, a letter dropped or doubled, two letters
    swapped), a diacritic dropped, or the case flipped. Spaces are kept."""
    chars = list(text)
    out: list[str] = []
    i = 0
    while i < len(chars):
        c = chars[i]
        if c.isspace() or rng.random() >= rate:
            out.append(c)
            i += 1
            continue
        kind = rng.randrange(6)
        plain = unicodedata.normalize("NFD", c)
        if kind == 0 and len(plain) > 1:  # a diacritic dropped
            out.append(plain[0])
        elif kind == 1 and c.lower() != c.upper():  # case flipped
            out.append(c.lower() if c.isupper() else c.upper())
        elif kind == 2:  # dropped
            pass
        elif kind == 3:  # doubled
            out += [c, c]
        elif kind == 4 and i + 1 < len(chars) and not chars[i + 1].isspace():  # swapped
            out += [chars[i + 1], c]
            i += 1
        else:  # a neighbouring code point: a wrong letter of the same script
            out.append(chr(max(33, ord(c) + rng.choice((-1, 1)))))
        i += 1
    return "".join(out)


def build(
    bible: Path,
    langs: list[str],
    out: Path,
    nt: bool,
    test_verses: int | None = None,
    noise: list[float] | None = None,
) -> dict:
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
        cut = slice(None, test_verses)
        reference = read_lines(bible / "test.en")[cut]
        tests = {x: read_lines(bible / f"test.{x}")[cut] for x in langs}
        for name, rate in [("bible", 0.0)] + [
            (f"bible-noise{round(r * 100)}", r) for r in noise or []
        ]:
            (tmp / name).mkdir(exist_ok=True)
            (tmp / name / "test.en").write_text("".join(t + "\n" for t in reference))
            for x in langs:
                rng = random.Random(f"{x}:{rate}")  # the same noise on every run
                lines = tests[x] if rate == 0 else [noisy(t, rate, rng) for t in tests[x]]
                (tmp / name / f"test.{x}").write_text("".join(t + "\n" for t in lines))
        for x in langs:
            counts.setdefault(x, {})["test"] = sum(1 for t in tests[x] if t.strip())
        result = {
            "kind": "m2o-corpus",
            "format_version": 1,
            "languages": {"source": "mul", "target": "en"},
            "pairs": [[x, "en"] for x in langs],
            "counts": counts,
            "new_testament_only": nt,
            "test_verses": test_verses,
            "noise": noise or [],
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
    ap.add_argument("--test-verses", type=int, default=None, help="the first N test verses")
    ap.add_argument("--noise", default="", help="e.g. 0.05,0.1: noisy copies of the test sources")
    args = ap.parse_args()
    noise = [float(x) for x in args.noise.split(",") if x]
    result = build(args.bible, args.langs.split(","), args.out, args.nt, args.test_verses, noise)
    print(json.dumps(result["counts"]))


if __name__ == "__main__":
    main()
