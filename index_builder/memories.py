"""Translation memories that ship with the project, installed as stores at first start.

The memory is the product: a fresh clone's `ragmt serve` should translate the `general`
domain with retrieval, not with the bare model (23.8 BLEU without a store against 30.9 with
the general pool's). The pool's text ships compressed (`memories/<name>/pairs.tsv.xz`, a few
MB) with a manifest holding its checksum, origins, licenses and the contamination check made
when it was packed; the store itself (tens of MB of arrays) is built from it in seconds the
first time a server starts on a stores directory without that domain.

    ragmt memory pack --data data/en-de --domain general   # writes memories/general.en-de/
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import lzma
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from index_builder.corpus import Pair
from index_builder.prepare.clean import dedup_key
from index_builder.store import build_store, list_versions, set_active
from models.artifacts import (
    MANIFEST,
    ArtifactError,
    atomic_directory,
    parse_manifest,
    sha256_file,
    write_manifest,
)

__all__ = [
    "SHIPPED",
    "ShippedMemory",
    "install_memories",
    "pack_memory",
    "shipped_memories",
]

SHIPPED = Path(__file__).resolve().parent / "memories"
KIND = "translation-memory"
FORMAT_VERSION = 1
PAIRS_FILE = "pairs.tsv.xz"
LOCK_FILE = ".memories.lock"


@dataclass(frozen=True)
class ShippedMemory:
    """One packed memory: where it lies and what its manifest says."""

    path: Path
    manifest: Mapping[str, Any]

    @property
    def domain(self) -> str:
        return str(self.manifest["domain"])

    @property
    def languages(self) -> tuple[str, str]:
        lang = self.manifest["languages"]
        return str(lang["source"]), str(lang["target"])

    def pairs(self) -> list[Pair]:
        """The memory's pairs, after checking the file against the manifest's sha256."""
        file = self.path / PAIRS_FILE
        expected = self.manifest["files"][PAIRS_FILE]
        data = file.read_bytes()
        if hashlib.sha256(data).hexdigest() != expected:
            raise ArtifactError(f"{file}: sha256 differs from its manifest (damaged or edited)")
        lines = lzma.decompress(data).decode("utf-8").splitlines()
        out = []
        for n, line in enumerate(lines, start=1):
            src, sep, tgt = line.partition("\t")
            if not sep or not src.strip() or not tgt.strip() or "\t" in tgt:
                raise ArtifactError(f"{file}: line {n} is not 'source<TAB>target'")
            out.append(Pair(src, tgt, origin=self.domain, doc=self.domain))
        if len(out) != self.manifest["pairs"]:
            said = self.manifest["pairs"]
            raise ArtifactError(f"{file}: {len(out)} pairs, the manifest says {said}")
        return out


def shipped_memories(root: Path = SHIPPED) -> list[ShippedMemory]:
    """The memories under `root`, each manifest checked for its kind and format."""
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        out.append(ShippedMemory(d, parse_manifest(d, KIND, FORMAT_VERSION)))
    return out


def install_memories(
    stores_dir: Path,
    pairs_served: Sequence[tuple[str, str]],
    domains: Sequence[str] = (),
    signing_key: bytes | None = None,
    root: Path = SHIPPED,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Build and activate a store of each shipped memory whose domain has no version under
    `stores_dir` yet, whose language pair a served model translates and which `domains`
    names (empty: any). Replicas sharing the directory take a file lock, so one builds and
    the others find it built. Returns what was installed (domain, version, seconds)."""
    wanted = [
        m
        for m in shipped_memories(root)
        if m.languages in set(pairs_served) and (not domains or m.domain in domains)
    ]
    if not wanted:
        return []
    stores_dir.mkdir(parents=True, exist_ok=True)
    done = []
    with open(stores_dir / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for memory in wanted:
            if list_versions(stores_dir, memory.domain):  # built before, or the operator's own
                continue
            started = time.perf_counter()
            log(f"building the shipped {memory.domain!r} memory ({memory.manifest['pairs']} pairs)")
            path = build_store(
                memory.pairs(),
                memory.domain,
                memory.manifest["method"],
                stores_dir,
                memory.manifest.get("params", {}),
                memory.languages,
                signing_key=signing_key,
            )
            set_active(stores_dir, memory.domain, path.name, signing_key=signing_key)
            seconds = round(time.perf_counter() - started, 1)
            log(f"{memory.domain!r} memory ready as {path.name} in {seconds} s")
            done.append({"domain": memory.domain, "version": path.name, "seconds": seconds})
    return done


def pack_memory(
    data_dir: Path,
    domain: str,
    out: Path,
    languages: tuple[str, str] = ("en", "de"),
    method: str = "idf-ngram",
    split: str = "train",
) -> dict[str, Any]:
    """Pack a prepared domain's `split` (``data_dir/<domain>/<split>.<lang>``) as a shipped
    memory at `out`, refusing it when a dev or test source of any domain of `data_dir` is in
    it (the test sets must stay unseen by what is served)."""
    src_lang, tgt_lang = languages
    folder = data_dir / domain
    sources = (folder / f"{split}.{src_lang}").read_text(encoding="utf-8").splitlines()
    targets = (folder / f"{split}.{tgt_lang}").read_text(encoding="utf-8").splitlines()
    origins_file = folder / f"{split}.origin"
    origins = origins_file.read_text(encoding="utf-8").splitlines() if origins_file.exists() else []
    if len(sources) != len(targets):
        raise ValueError(f"{folder}: {len(sources)} sources for {len(targets)} targets")
    held: dict[str, str] = {}
    checked = {}
    for d in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        for s in ("dev", "test"):
            f = d / f"{s}.{src_lang}"
            if f.exists():
                checked[f"{d.name}/{f.name}"] = sha256_file(f)
                for line in f.read_text(encoding="utf-8").splitlines():
                    held[dedup_key(line)] = f"{d.name}/{s}"
    lines, counts, skipped = [], collections.Counter(), 0
    for i, (s, t) in enumerate(zip(sources, targets, strict=True)):
        if "\t" in s + t or not s.strip() or not t.strip():
            skipped += 1
            continue
        if dedup_key(s) in held:
            raise ValueError(f"{folder}/{split} line {i + 1} is a {held[dedup_key(s)]} source")
        lines.append(f"{s}\t{t}\n")
        counts[origins[i] if i < len(origins) else domain] += 1
    data_file = data_dir / MANIFEST
    data_manifest = json.loads(data_file.read_text(encoding="utf-8")) if data_file.exists() else {}
    licenses = {
        name: src.get("license")
        for name, src in data_manifest.get("sources", {}).items()
        if name in counts
    }
    with atomic_directory(out) as tmp:
        (tmp / PAIRS_FILE).write_bytes(
            lzma.compress("".join(lines).encode("utf-8"), preset=9 | lzma.PRESET_EXTREME)
        )
        manifest = write_manifest(
            tmp,
            {
                "kind": KIND,
                "format_version": FORMAT_VERSION,
                "domain": domain,
                "languages": {"source": src_lang, "target": tgt_lang},
                "method": method,
                "params": {},
                "pairs": len(lines),
                "skipped_with_tabs_or_blank": skipped,
                "origins": dict(sorted(counts.items())),
                "licenses": licenses,
                "data": {
                    "split": f"{domain}/{split}",
                    "config_hash": data_manifest.get("config_hash"),
                },
                "contamination_check": {
                    "rule": "no dev/test source string (casefolded, whitespace-collapsed) "
                    "of any domain in the memory",
                    "held_out_files": checked,
                    "held_out_sources": len(held),
                    "passed": True,
                },
            },
        )
    return manifest
