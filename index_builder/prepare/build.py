"""`ragmt data prepare`: sources -> cleaned, split, contamination-checked corpora.

Output, written atomically as one directory per language pair:
`<out>/<pair>/<domain>/{train,dev,test}.{en,<lang>,origin}` and `<out>/<pair>/manifest.json`.
Test sets are fixed by a seed; no dev or test source string (case- and space-insensitive)
appears in any train split of any domain, and the manifest records the proof. Extra data
(`extra=`) joins general train after the splits are drawn, before that check.
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from index_builder.corpus import Pair
from index_builder.prepare import catalogs
from index_builder.prepare.clean import dedup_key, keep_pair
from index_builder.prepare.extra import ExtraConfig, Lexicon, filter_pairs, merge_into_train
from index_builder.prepare.fetch import fetch, fetch_and_unpack
from index_builder.prepare.sources import Source, extra_sources, sources
from models.artifacts import MANIFEST, atomic_directory, sha256_bytes, sha256_file, write_manifest

FORMAT_VERSION = 1
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class SplitSizes:
    dev: int
    test: int
    by_document: bool  # dev/test made of whole documents (books, help files)


@dataclass(frozen=True)
class PrepareConfig:
    lang: str = "de"
    seed: int = 1234
    domains: dict[str, SplitSizes] = field(
        default_factory=lambda: {
            "general": SplitSizes(1000, 2000, False),
            "bible": SplitSizes(500, 1000, True),
            "medical": SplitSizes(500, 1000, False),
            "software-docs": SplitSizes(500, 1000, True),
        }
    )

    @property
    def pair(self) -> str:
        return f"en-{self.lang}"


Log = Callable[[str], None]


def extract_source(
    src: Source, lang: str, cache: Path, offline: bool
) -> tuple[list[Pair], dict[str, Any]]:
    """Fetch, unpack, extract and filter one source; return its pairs and manifest record."""
    root, archives = fetch_and_unpack(src.packages, cache, f"{src.name}-{lang}", offline)
    raw = src.extract(root, lang)
    dropped: Counter[str] = Counter()
    seen: set[tuple[str, str]] = set()
    kept = []
    for p in raw:
        reason = keep_pair(p.source, p.target)
        if reason is None and (p.source, p.target) in seen:
            reason = "duplicate"
        if reason is not None:
            dropped[reason] += 1
            continue
        seen.add((p.source, p.target))
        kept.append(p)
    record = {
        "domain": src.domain,
        "license": src.license,
        "packages": archives,
        "extracted": len(raw),
        "kept": len(kept),
        "dropped": dict(sorted(dropped.items())),
    }
    return kept, record


def _group_by_source(pairs: list[Pair]) -> dict[str, list[Pair]]:
    """Pairs sharing an English sentence (one string, several translations) stay together."""
    groups: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[dedup_key(p.source)].append(p)
    return groups


def _quota(counts: dict[str, int], total: int) -> dict[str, int]:
    """Split `total` over strata in proportion to `counts` (largest remainders), exactly."""
    n = sum(counts.values())
    raw = {k: total * c / n for k, c in counts.items()}
    quota = {k: min(int(v), counts[k]) for k, v in raw.items()}
    for k in sorted(raw, key=lambda k: raw[k] - int(raw[k]), reverse=True):
        if sum(quota.values()) >= total:
            break
        if quota[k] < counts[k]:
            quota[k] += 1
    return quota


def split_stratified(
    pairs: list[Pair], sizes: SplitSizes, rng: random.Random
) -> dict[str, list[Pair]]:
    """Held-out splits sampled per origin in proportion to its size; one pair per English
    sentence in dev/test, the sentence's other translations leave train too."""
    groups = _group_by_source(pairs)
    by_origin: dict[str, list[str]] = defaultdict(list)
    for key, members in groups.items():
        by_origin[members[0].origin].append(key)
    held = {}
    counts = {o: len(keys) for o, keys in sorted(by_origin.items())}
    for split, size in (("test", sizes.test), ("dev", sizes.dev)):
        quota = _quota(counts, size)
        chosen = []
        for origin, keys in sorted(by_origin.items()):
            pick = rng.sample(sorted(keys), quota[origin])
            chosen.extend(groups[k][0] for k in pick)
            picked = set(pick)
            by_origin[origin] = [k for k in keys if k not in picked]
            counts[origin] = len(by_origin[origin])
        held[split] = chosen
    train = [p for keys in by_origin.values() for k in sorted(keys) for p in groups[k]]
    return {"train": train, "dev": held["dev"], "test": held["test"]}


def draw_documents(
    doc_sizes: dict[str, int], sizes: SplitSizes, rng: random.Random
) -> dict[str, list[str]]:
    """Whole documents for test, then dev, each until it holds at least its size in pairs,
    in the order drawn; the remaining documents, sorted, are train. Uses `rng` once."""
    order = sorted(doc_sizes)
    rng.shuffle(order)
    out: dict[str, list[str]] = {}
    for split, size in (("test", sizes.test), ("dev", sizes.dev)):
        taken: list[str] = []
        while sum(doc_sizes[d] for d in taken) < size and order:
            taken.append(order.pop())
        if sum(doc_sizes[d] for d in taken) < size:
            raise ValueError(f"not enough documents for a {split} split of {size} pairs")
        out[split] = taken
    out["train"] = sorted(order)
    return out


def split_by_document(
    pairs: list[Pair], sizes: SplitSizes, rng: random.Random
) -> dict[str, list[Pair]]:
    """Dev/test drawn from whole documents; the rest of a drawn document is not used for
    training, so no book or help file is shared between train and test."""
    docs: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        docs[p.doc].append(p)
    drawn = draw_documents({d: len(ps) for d, ps in docs.items()}, sizes, rng)
    out: dict[str, list[Pair]] = {}
    for split, size in (("test", sizes.test), ("dev", sizes.dev)):
        taken = [p for d in drawn[split] for p in docs[d]]
        # one pair per English sentence, then exactly `size` of them
        unique = [g[0] for g in _group_by_source(taken).values()]
        position = {p: i for i, p in enumerate(taken)}
        out[split] = sorted(rng.sample(unique, min(size, len(unique))), key=position.__getitem__)
    out["train"] = [p for d in drawn["train"] for p in docs[d]]
    return out


def remove_contamination(
    splits: dict[str, dict[str, list[Pair]]],
) -> dict[str, Any]:
    """Drop from every train split each pair whose source is a dev/test source anywhere."""
    held = {dedup_key(p.source) for d in splits.values() for s in ("dev", "test") for p in d[s]}
    removed = {}
    for domain, d in splits.items():
        before = len(d["train"])
        d["train"] = [p for p in d["train"] if dedup_key(p.source) not in held]
        removed[domain] = before - len(d["train"])
    overlap = sum(dedup_key(p.source) in held for d in splits.values() for p in d["train"])
    test_keys = {dedup_key(p.source) for d in splits.values() for p in d["test"]}
    train_keys = {dedup_key(p.source) for d in splits.values() for p in d["train"]}
    return {
        "rule": "no dev/test source string (casefolded, whitespace-collapsed) in any train split",
        "held_out_sources": len(held),
        "removed_from_train": removed,
        "test_sources_in_train_after": len(test_keys & train_keys),
        "heldout_pairs_in_train_after": overlap,
        "passed": overlap == 0 and not (test_keys & train_keys),
    }


def _write_split(folder: Path, split: str, pairs: list[Pair], lang: str) -> None:
    for suffix, values in (
        ("en", [p.source for p in pairs]),
        (lang, [p.target for p in pairs]),
        ("origin", [p.origin for p in pairs]),
    ):
        for v in values:
            if "\n" in v or "\r" in v:
                raise ValueError(f"{split}.{suffix}: a line break inside a segment: {v[:60]!r}")
        (folder / f"{split}.{suffix}").write_text(
            "".join(v + "\n" for v in values), encoding="utf-8"
        )


def config_hash(
    cfg: PrepareConfig, records: dict[str, Any], extra: dict[str, Any] | None = None
) -> str:
    """What the output is made from; `extra` enters only when given, so that a run without
    extra data keeps the hash it always had."""
    content: dict[str, Any] = {"config": asdict(cfg), "format": FORMAT_VERSION, "packages": records}
    if extra is not None:
        content["extra"] = extra
    return sha256_bytes(json.dumps(content, sort_keys=True).encode())


def add_extra(
    train: list[Pair],
    srcs: list[Source],
    pool: catalogs.FetchedPool,
    lang: str,
    cache: Path,
    cfg: ExtraConfig,
    offline: bool,
    log: Log,
) -> tuple[list[Pair], dict[str, Any]]:
    """Extract, score and deduplicate the extra sources; return them as they join `train`
    (new pairs only) and their manifest record. The Ding glossary is also the lexicon that
    scores the catalogs."""
    records: dict[str, Any] = {}
    glossary: list[Pair] = []
    lexicon = None
    for src in srcs:
        root, archives = fetch_and_unpack(src.packages, cache, f"{src.name}-{lang}", offline)
        raw = src.extract(root, lang)
        lexicon = Lexicon.from_glossary(raw) if src.name == "ding-glossary" else lexicon
        kept, dropped = filter_pairs(raw, None, cfg)
        glossary.extend(kept)
        records[src.name] = {
            "license": src.license,
            "packages": archives,
            "extracted": len(raw),
            "kept": len(kept),
            "dropped": dict(sorted(dropped.items())),
        }
        log(f"[extra] {src.name}: {len(kept)} pairs kept of {len(raw)}")
    packages, failed = catalogs.read_pool(pool, lang, cache, log)
    catalog_pairs: list[Pair] = []
    dropped_all: Counter[str] = Counter()
    per_package = {}
    for pkg in packages:
        kept, dropped = filter_pairs(pkg.pairs, lexicon, cfg)
        catalog_pairs.extend(kept)
        dropped_all.update(dropped)
        per_package[pkg.name] = {**pkg.record, "kept": len(kept)}
    extracted = sum(len(p.pairs) for p in packages)
    log(
        f"[extra] {catalogs.ORIGIN}: {len(catalog_pairs)} pairs kept of {extracted} "
        f"from {len(packages)} packages ({len(failed)} failed)"
    )
    added, merge_dropped = merge_into_train(train, catalog_pairs + glossary, cfg.max_variants)
    by_origin = Counter(p.origin for p in added)
    by_package = Counter(p.doc.split(":", 1)[0] for p in added if p.origin == catalogs.ORIGIN)
    for name, rec in per_package.items():
        rec["added"] = by_package[name]
    for name, rec in records.items():
        rec["added"] = by_origin[name]
    records[catalogs.ORIGIN] = {
        "license": "per package, the first License: of its copyright file",
        "package_count": len(packages),
        "extracted": extracted,
        "kept": len(catalog_pairs),
        "dropped": dict(sorted(dropped_all.items())),
        "added": by_origin[catalogs.ORIGIN],
        "failed": failed,
        "packages": per_package,
    }
    log(f"[extra] {len(added)} new pairs for general train: {dict(sorted(by_origin.items()))}")
    record = {
        "rule": "train only: added to general train after the splits are drawn, then the "
        "contamination check; dev and test are those of a run without extra data",
        "config": asdict(cfg),
        "train_pairs_before": len(train),
        "merge": {"added": len(added), "dropped": merge_dropped},
        "sources": records,
    }
    return added, record


def prepare(
    out: Path,
    cache: Path,
    cfg: PrepareConfig = PrepareConfig(),
    offline: bool = False,
    force: bool = False,
    log: Log = print,
    only_sources: list[Source] | None = None,
    extra: ExtraConfig | None = None,
    extra_packages: list[str] | None = None,
) -> dict[str, Any]:
    """Build `<out>/<pair>/`; skip the work when the manifest says it is already up to date.

    With `extra`, the Ding glossary and Debian's gettext catalogs (`extra_packages`, by
    default the committed list) are added to general train only; dev and test are unchanged.
    """
    srcs = only_sources if only_sources is not None else sources(cfg.lang)
    extra_srcs = extra_sources(cfg.lang) if extra is not None else []
    if extra is not None and extra_packages is None:
        listed = catalogs.list_path(cfg.lang)
        if not listed.is_file():
            raise ValueError(f"no Debian catalog list for {cfg.lang}: {listed} is missing")
        extra_packages = catalogs.read_package_list(listed)
    # download and unpack tools run with the cache as their working directory: a relative
    # path (the CLI's default data/cache) is made absolute once, here
    cache = Path(cache).resolve()
    pair_dir = Path(out) / cfg.pair
    per_domain: dict[str, list[Pair]] = defaultdict(list)
    records: dict[str, Any] = {}
    # Cheap pass first: fetch packages and name them, to decide whether anything changed.
    pkg_hashes = {}
    packages = list(dict.fromkeys(pkg for src in srcs + extra_srcs for pkg in src.packages))
    for i, pkg in enumerate(packages, 1):
        path = fetch(
            pkg, cache, offline=offline, log=lambda m, i=i: log(f"[{i}/{len(packages)}] {m}")
        )
        pkg_hashes[pkg.label] = sha256_file(path)
    pool, extra_hash = None, None
    if extra is not None and extra_packages is not None:
        pool = catalogs.fetch_pool(extra_packages, cache, offline, log)
        extra_hash = {"config": asdict(extra), "catalogs": pool.sha256, "failed": pool.failed}
    chash = config_hash(cfg, pkg_hashes, extra_hash)
    mpath = pair_dir / MANIFEST
    if not force and mpath.is_file():
        old = json.loads(mpath.read_text(encoding="utf-8"))
        if old.get("config_hash") == chash:
            log(f"{pair_dir} is up to date (config hash {chash[:12]}); nothing to do")
            return old
    for src in srcs:
        log(f"[{src.domain}] {src.name}: fetching and extracting")
        pairs, rec = extract_source(src, cfg.lang, cache, offline)
        log(f"[{src.domain}] {src.name}: {rec['kept']} pairs kept of {rec['extracted']}")
        records[src.name] = rec
        per_domain[src.domain].extend(pairs)
    rng = random.Random(cfg.seed)
    splits: dict[str, dict[str, list[Pair]]] = {}
    for domain, pairs in sorted(per_domain.items()):
        sizes = cfg.domains[domain]
        splitter = split_by_document if sizes.by_document else split_stratified
        splits[domain] = splitter(pairs, sizes, rng)
    extra_record = None
    if extra is not None and pool is not None:
        train = splits["general"]["train"]
        added, extra_record = add_extra(
            train, extra_srcs, pool, cfg.lang, cache, extra, offline, log
        )
        splits["general"]["train"] = train + added
    check = remove_contamination(splits)
    if not check["passed"]:
        raise RuntimeError(f"contamination check failed: {check}")
    if extra_record is not None:
        final = Counter(p.origin for p in splits["general"]["train"])
        extra_record["in_train_after_contamination_check"] = {
            name: final[name] for name in extra_record["sources"]
        }
        extra_record["train_pairs_after"] = len(splits["general"]["train"])
    log(f"contamination check passed: {check['removed_from_train']} removed from train")
    counts = {
        domain: {
            s: {
                "pairs": len(d[s]),
                "by_origin": dict(sorted(Counter(p.origin for p in d[s]).items())),
            }
            for s in SPLITS
        }
        for domain, d in splits.items()
    }
    with atomic_directory(pair_dir) as tmp:
        for domain, d in splits.items():
            (tmp / domain).mkdir()
            for split in SPLITS:
                _write_split(tmp / domain, split, d[split], cfg.lang)
        manifest = write_manifest(
            tmp,
            {
                "kind": "corpus",
                "format_version": FORMAT_VERSION,
                "pair": cfg.pair,
                "languages": {"source": "en", "target": cfg.lang},
                "config": asdict(cfg),
                "config_hash": chash,
                "sources": records,
                "splits": counts,
                "contamination_check": check,
            }
            | ({"extra": extra_record} if extra_record is not None else {}),
        )
    for domain, c in counts.items():
        log(f"{domain}: " + ", ".join(f"{s} {c[s]['pairs']}" for s in SPLITS))
    return manifest
