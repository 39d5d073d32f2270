"""Artifact directories: a manifest with sha256 of every file, written atomically.

Model bundles, retrieval stores and prepared data sets all share this format so that a
reader never sees half an artifact and nothing is parsed before its checksum matches.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


class ArtifactError(ValueError):
    """An artifact directory is missing, incomplete, tampered with or of an unknown format."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_checksums(root: Path) -> dict[str, str]:
    """sha256 of every regular file under `root` except the manifest, by relative path."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Add `files` (sha256 per file) to `manifest`, write it to root/manifest.json, return it."""
    manifest = dict(manifest)
    manifest["files"] = file_checksums(root)
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with open(root / MANIFEST, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return manifest


@contextlib.contextmanager
def atomic_directory(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success fsync it and rename it to `final`.

    On any exception the temporary directory is removed and `final` is untouched. An existing
    `final` is replaced only after the new one is complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        for p in tmp.rglob("*"):
            if p.is_file():
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def parse_manifest(root: Path, kind: str, max_format_version: int) -> dict[str, Any]:
    """An artifact directory's manifest, read once and checked: it parses, names the expected
    kind and a supported format version, and lists files (not yet verified)."""
    root = Path(root)
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise ArtifactError(f"{root}: no {MANIFEST}; not a {kind} directory")
    try:
        manifest = json.loads(mpath.read_bytes().decode("utf-8"))
    except OSError as e:
        raise ArtifactError(f"{mpath}: unreadable: {e}") from e
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"{mpath}: manifest is not valid JSON: {e}") from e
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{mpath}: manifest must be a JSON object")
    if manifest.get("kind") != kind:
        raise ArtifactError(f"{mpath}: kind is {manifest.get('kind')!r}, expected {kind!r}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise ArtifactError(f"{mpath}: missing or invalid format_version {version!r}")
    if version > max_format_version:
        raise ArtifactError(
            f"{mpath}: format_version {version} is newer than this ragmt supports "
            f"({max_format_version}); upgrade ragmt"
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise ArtifactError(f"{mpath}: manifest lists no files")
    return manifest


def read_manifest(root: Path, kind: str, max_format_version: int) -> dict[str, Any]:
    """Read and fully verify an artifact directory; return its manifest.

    Checks the manifest (`parse_manifest`), and that every listed file exists with the
    recorded sha256 and no unlisted file is present.
    """
    root = Path(root)
    manifest = parse_manifest(root, kind, max_format_version)
    files = manifest["files"]
    for rel, digest in files.items():
        p = root / rel
        if not p.is_file():
            raise ArtifactError(f"{root}: file {rel} listed in the manifest is missing")
        actual = sha256_file(p)
        if actual != digest:
            raise ArtifactError(
                f"{root}: checksum mismatch for {rel} (expected {digest[:12]}…, got {actual[:12]}…)"
            )
    extra = set(file_checksums(root)) - set(files)
    if extra:
        raise ArtifactError(f"{root}: files not in the manifest: {sorted(extra)}")
    return manifest
