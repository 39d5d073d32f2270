"""Training data that teaches a model the literal masks.

The pipeline masks URLs, numbers, placeholders and the like as `{1}`, `{2}`, ... before
translation (`models.literals`). A model that never saw a mask copies it only as well as it
copies any brace-and-digit text. Here a share of the training pairs that hold literals are
rewritten as the pipeline would show them, with their retrieved neighbours masked the same way
(`mask_pair`), so training sees masks where it will meet them.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.artifacts import atomic_directory, sha256_file
from models.data import read_lines, read_neighbours
from models.literals import mask_pair, mask_training_pair


@dataclass(frozen=True)
class MaskedCounts:
    lines: int
    with_literals: int  # lines whose pair could be masked (`mask_training_pair`)
    masked: int  # of those, the lines rewritten


def mask_literal_lines(
    sources: list[str],
    targets: list[str],
    neighbours: list[list[dict[str, Any]]] | None,
    share: float,
    seed: int,
) -> tuple[list[str], list[str], list[list[dict[str, Any]]] | None, MaskedCounts]:
    """Each pair that can be masked is, with probability `share` (seeded), and its neighbours
    with it; the other lines and their neighbours are returned as they are."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must lie in [0, 1], got {share}")
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources for {len(targets)} targets")
    if neighbours is not None and len(neighbours) != len(sources):
        raise ValueError(f"{len(neighbours)} neighbour records for {len(sources)} lines")
    rng = random.Random(seed)
    src, tgt = list(sources), list(targets)
    nbs = None if neighbours is None else [list(found) for found in neighbours]
    maskable = masked = 0
    for i, (s, t) in enumerate(zip(sources, targets, strict=True)):
        pair = mask_training_pair(s, t)
        if pair is None:
            continue
        maskable += 1
        if rng.random() >= share:
            continue
        masked += 1
        m, tgt[i] = pair
        src[i] = m.text
        if nbs is not None:
            rewritten = []
            for nb in nbs[i]:
                ns, nt = mask_pair(nb["source"], nb["target"], m)
                rewritten.append({**nb, "source": ns, "target": nt})
            nbs[i] = rewritten
    return src, tgt, nbs, MaskedCounts(len(src), maskable, masked)


def mask_literal_corpus(
    data: Path,
    domain: str,
    out: Path,
    share: float,
    seed: int,
    train_neighbours: Path | None = None,
) -> MaskedCounts:
    """A prepared-data directory `out` whose `domain` train split has a `share` of its
    maskable pairs masked (`mask_literal_lines`); dev is copied unchanged, so dev BLEU stays
    comparable. With `train_neighbours` (`ragmt neighbours` of that split) the rewritten
    neighbours are written beside it as `<out>/<domain>/train.neighbours.jsonl`. The
    directory appears whole or not at all."""
    manifest = json.loads((data / "manifest.json").read_text())
    src_lang, tgt_lang = manifest["languages"]["source"], manifest["languages"]["target"]
    d = data / domain
    src_file, tgt_file = d / f"train.{src_lang}", d / f"train.{tgt_lang}"
    for f in (src_file, tgt_file, d / f"dev.{src_lang}", d / f"dev.{tgt_lang}"):
        if not f.is_file():
            raise ValueError(f"{f}: missing (a prepared domain has train and dev splits)")
    sources, targets = read_lines(src_file), read_lines(tgt_file)
    found = None
    if train_neighbours is not None:  # each record's every neighbour, not its first k
        found = read_neighbours(train_neighbours, len(sources), 1 << 30)
    src, tgt, nbs, counts = mask_literal_lines(sources, targets, found, share, seed)
    with atomic_directory(out) as tmp:
        (tmp / domain).mkdir()
        (tmp / domain / src_file.name).write_text("\n".join(src) + "\n", encoding="utf-8")
        (tmp / domain / tgt_file.name).write_text("\n".join(tgt) + "\n", encoding="utf-8")
        for lang in (src_lang, tgt_lang):
            shutil.copyfile(d / f"dev.{lang}", tmp / domain / f"dev.{lang}")
        if nbs is not None:
            with (tmp / domain / "train.neighbours.jsonl").open("w", encoding="utf-8") as fh:
                for i, (s, found_i) in enumerate(zip(src, nbs, strict=True)):
                    record = {"id": i, "source": s, "neighbours": found_i}
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        derived = {
            "languages": manifest["languages"],
            "derived_from": {
                "data": str(data),
                "manifest_sha256": sha256_file(data / "manifest.json"),
                "domain": domain,
                "train_neighbours_sha256": (
                    sha256_file(train_neighbours) if train_neighbours is not None else None
                ),
            },
            "literal_masks": {
                "share": share,
                "seed": seed,
                "lines": counts.lines,
                "with_literals": counts.with_literals,
                "masked": counts.masked,
            },
        }
        (tmp / "manifest.json").write_text(json.dumps(derived, indent=2) + "\n")
    return counts
