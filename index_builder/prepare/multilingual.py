"""`ragmt data mix`: a multilingual training directory from the verse-aligned Bible
(`data/bible/`, `bible.py`): many languages into English, or English into many, for one model
(the Bible-M2O and Bible-8 sets of `../shared/SEEDS.md` §0.1).

It writes a prepared language-pair directory that `ragmt train` and `ragmt eval` read:

    <out>/manifest.json       languages {source, target}, the side with several languages
                              named "mul"; pairs [[de, en], ...]; counts per pair and split;
                              the Bible manifest's sha256; the books of each split
    <out>/bible/train.<src>   every pair's train verses, interleaved verse by verse (each batch
    <out>/bible/train.<tgt>   window mixes the pairs); a verse empty on either side left out
    <out>/bible/train.pairs   each line's pair as `src-tgt` (what a model told the pair reads)
    <out>/bible/dev.*         the same for dev
    <out>/bible/test.<lang>   every language, verse-aligned: a test set per pair for
                              `ragmt eval --source-lang/--target-lang`

`test_verses` keeps the first N test verses (decoding byte models on a CPU is slow);
`train_verses` keeps N training verses per pair, a seeded sample drawn across the books (the
few-shot sets of a cross-lingual transfer experiment: with one seed, the 1,000 are among the
2,000, and so on); dev is kept whole; `noise`
adds `<out>/bible-noise5/` etc.: the test sources with that share of characters changed as
users mistype (`noisy`), the references unchanged. `nt` keeps only New Testament training
books (40-66): the fast tier. The splits are the Bible's own (whole books shared by every
language), so no model trained here sees a test verse of any language.
"""

from __future__ import annotations

import json
import random
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from models.artifacts import MANIFEST, atomic_directory, sha256_file, write_manifest

__all__ = ["MIXED", "MixError", "mix_bible", "noisy"]

KIND = "multilingual-corpus"
FORMAT_VERSION = 1
MIXED = "mul"  # the name of the side that holds several languages
DOMAIN = "bible"
NT_FIRST_BOOK = 40


class MixError(ValueError):
    """The request or the Bible directory cannot make this mix (the message says why)."""


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


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


def _sample(rows: list[int], n: int, seed: int, pair: tuple[str, str]) -> list[int]:
    """`n` of `rows`, the first of one seeded shuffle (so a smaller sample lies inside a larger
    one), in their order; all of them when the pair has no more (the manifest's counts say how
    many were kept)."""
    order = list(rows)
    random.Random(f"{seed}:{pair[0]}-{pair[1]}").shuffle(order)
    return sorted(order[:n])


def mix_bible(
    bible: Path,
    out: Path,
    sources: list[str],
    targets: list[str],
    nt: bool = False,
    test_verses: int | None = None,
    noise: list[float] | None = None,
    log: Callable[[str], None] = print,
    train_verses: int | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """Write `out` for every (source, target) pair of `sources` x `targets`, one side a single
    language; returns the manifest."""
    bible = Path(bible)
    if not (bible / MANIFEST).is_file():
        raise MixError(f"{bible} is not the prepared Bible (run `ragmt data prepare --bible`)")
    bible_manifest = json.loads((bible / MANIFEST).read_text(encoding="utf-8"))
    known = bible_manifest["languages"]
    for lang in [*sources, *targets]:
        if lang not in known:
            raise MixError(f"{bible} has no language {lang!r}; it has {', '.join(known)}")
    if len(sources) != 1 and len(targets) != 1:
        raise MixError("one side must be a single language (one-to-many or many-to-one)")
    pairs = [(s, t) for s in sources for t in targets if s != t]
    if not pairs or len(set(pairs)) != len(pairs):
        raise MixError(f"no distinct pairs in {sources} x {targets}")
    names = (
        sources[0] if len(sources) == 1 else MIXED,
        targets[0] if len(targets) == 1 else MIXED,
    )
    if any(rate < 0 or rate > 1 for rate in noise or []):
        raise MixError(f"noise rates are shares of characters in [0, 1], got {noise}")
    if train_verses is not None and train_verses < 1:
        raise MixError(f"train_verses must be at least 1, got {train_verses}")
    counts: dict[str, dict[str, int]] = {f"{s}-{t}": {} for s, t in pairs}
    with atomic_directory(Path(out)) as tmp:
        (tmp / DOMAIN).mkdir()
        for split in ("train", "dev"):
            text = {x: _lines(bible / f"{split}.{x}") for x in {*sources, *targets}}
            ids = _lines(bible / f"{split}.ids")
            kept = {
                (s, t): [
                    i
                    for i, verse in enumerate(ids)
                    if text[s][i].strip() and text[t][i].strip()
                    and not (split == "train" and nt and int(verse.split(".")[0]) < NT_FIRST_BOOK)
                ]
                for s, t in pairs
            }  # fmt: skip
            if split == "train" and train_verses is not None:
                kept = {p: _sample(rows, train_verses, seed, p) for p, rows in kept.items()}
            wanted = {p: set(rows) for p, rows in kept.items()}
            src_out, tgt_out, pair_out = [], [], []
            for i in range(len(ids)):
                for s, t in pairs:  # interleaved: every batch window mixes the pairs
                    if i in wanted[(s, t)]:
                        src_out.append(text[s][i])
                        tgt_out.append(text[t][i])
                        pair_out.append(f"{s}-{t}")
            for s, t in pairs:
                counts[f"{s}-{t}"][split] = pair_out.count(f"{s}-{t}")
            _write(tmp / DOMAIN / f"{split}.{names[0]}", src_out)
            _write(tmp / DOMAIN / f"{split}.{names[1]}", tgt_out)
            _write(tmp / DOMAIN / f"{split}.pairs", pair_out)
        cut = slice(None, test_verses)
        tests = {x: _lines(bible / f"test.{x}")[cut] for x in {*sources, *targets}}
        for s, t in pairs:
            counts[f"{s}-{t}"]["test"] = sum(
                bool(a.strip() and b.strip()) for a, b in zip(tests[s], tests[t], strict=True)
            )
        noisy_sets = [(f"{DOMAIN}-noise{round(r * 100)}", r) for r in noise or []]
        for folder, rate in [(DOMAIN, 0.0), *noisy_sets]:
            (tmp / folder).mkdir(exist_ok=True)
            for lang, lines in tests.items():
                if rate and lang in sources:  # what users type; the references stay clean
                    rng = random.Random(f"{lang}:{rate}")  # the same noise on every run
                    lines = [noisy(x, rate, rng) for x in lines]
                _write(tmp / folder / f"test.{lang}", lines)
        manifest = write_manifest(
            tmp,
            {
                "kind": KIND,
                "format_version": FORMAT_VERSION,
                "languages": {"source": names[0], "target": names[1]},
                "pairs": [list(p) for p in pairs],
                "counts": counts,
                "new_testament_only": nt,
                "test_verses": test_verses,
                **({"train_verses": train_verses, "train_seed": seed} if train_verses else {}),
                "noise": noise or [],
                "bible_manifest_sha256": sha256_file(bible / MANIFEST),
                "split": bible_manifest.get("split", {}),
            },
        )
    log(
        f"{out}: {len(pairs)} pairs; train "
        + ", ".join(f"{p} {c['train']}" for p, c in counts.items())
    )
    return manifest
