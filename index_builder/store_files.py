"""A store directory's files in memory: its manifest, each file read once and parsed from the
bytes whose sha256 was checked, and the HMAC signature of the manifest.

`index_builder.store` builds the store format on these; nothing here knows a retrieval method.
A signature covers the files through their sha256 in the manifest; checksums without one
catch corruption, not an edit whose checksums were recomputed.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from index_builder.columns import TextColumn
from models.artifacts import MANIFEST, ArtifactError, parse_manifest, sha256_bytes

SIGNATURE = "signature"  # manifest field: HMAC-SHA256 (hex) of the rest of the manifest
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # stores are flat: no path in a name


def read_manifest(root: Path, kind: str, max_format_version: int) -> dict[str, Any]:
    """The manifest of `root`, read once and checked: kind, a supported format version, and
    files listed by plain names."""
    manifest = parse_manifest(root, kind, max_format_version)
    mpath = root / MANIFEST
    files = manifest["files"]
    for rel, digest in files.items():
        if not _FILE_NAME.fullmatch(rel) or rel == MANIFEST or not isinstance(digest, str):
            raise ArtifactError(f"{mpath}: invalid file entry {rel[:80]!r}: {digest!r}")
    return manifest


def read_files(
    root: Path, files: Mapping[str, str]
) -> tuple[dict[str, np.ndarray], dict[str, TextColumn], dict[str, Any]]:
    """(arrays, columns, FAISS indexes) by name: each file read once, its sha256 checked on
    those bytes, then parsed from them, so that no byte is used that was not checked."""
    on_disk = {p.name for p in root.iterdir() if p.name != MANIFEST}
    for rel in files:
        if rel not in on_disk:
            raise ArtifactError(f"{root}: file {rel} listed in the manifest is missing")
    if extra := on_disk - set(files):
        raise ArtifactError(f"{root}: files not in the manifest: {sorted(extra)}")
    arrays: dict[str, np.ndarray] = {}
    blobs: dict[str, bytes] = {}
    indexes: dict[str, Any] = {}
    for rel, digest in sorted(files.items()):
        try:
            data = (root / rel).read_bytes()
        except OSError as e:
            raise ArtifactError(f"{root}: {rel}: unreadable: {e}") from e
        actual = sha256_bytes(data)
        if actual != digest:
            raise ArtifactError(
                f"{root}: checksum mismatch for {rel} (expected {digest[:12]}…, got {actual[:12]}…)"
            )
        try:
            if rel.endswith(".npy"):
                arrays[rel.removesuffix(".npy")] = parse_npy(data)
            elif rel.endswith(".bin"):
                blobs[rel.removesuffix(".bin")] = data  # the column's buffer: not copied
            elif rel.endswith(".faiss"):
                from index_builder.retrieval.faiss_index import index_from_bytes

                indexes[rel.removesuffix(".faiss")] = index_from_bytes(data)
            else:
                raise ValueError("not a kind of file a store holds")
        except ValueError as e:
            raise ArtifactError(f"{root}: {rel}: {e}") from e
    columns: dict[str, TextColumn] = {}
    for name, blob in blobs.items():
        offsets = arrays.pop(f"{name}.offsets", None)
        if offsets is None:
            raise ArtifactError(f"{root}: {name}.bin without {name}.offsets.npy")
        try:
            columns[name] = TextColumn.from_bytes(blob, offsets, name)
        except ValueError as e:
            raise ArtifactError(f"{root}: {e}") from e
    return arrays, columns, indexes


def parse_npy(data: bytes) -> np.ndarray:
    """A plain 1-d numeric array from ``.npy`` bytes (no pickle), read-only like the store."""
    try:
        values = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise ValueError(f"not a plain numeric array: {e}") from e
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "iuf" or values.ndim != 1:
        raise ValueError(f"not a plain numeric array: {getattr(values, 'dtype', type(values))}")
    values.flags.writeable = False
    return values


def check_key(key: bytes) -> None:
    """ValueError unless `key` is usable for HMAC: bytes, not empty."""
    if not isinstance(key, bytes) or not key:
        raise ValueError("a signing key must be non-empty bytes")


def manifest_signature(manifest: Mapping[str, Any], key: bytes) -> str:
    """HMAC-SHA256 (hex) with `key` of the manifest without its signature, as canonical JSON
    (sorted keys, no spaces, UTF-8). The manifest holds every file's sha256: it signs them."""
    check_key(key)
    body = {k: v for k, v in manifest.items() if k != SIGNATURE}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def check_signature(root: Path, manifest: Mapping[str, Any], key: bytes) -> None:
    """ArtifactError unless `manifest` carries the signature that `key` makes of it."""
    signature = manifest.get(SIGNATURE)
    if signature is None:
        raise ArtifactError(f"{root}: unsigned store, and a signed one is required")
    expected = manifest_signature(manifest, key)
    if not isinstance(signature, str) or not hmac.compare_digest(
        signature.encode("utf-8"), expected.encode("utf-8")
    ):
        raise ArtifactError(
            f"{root}: signature does not match: signed with another key, or edited since"
        )


def manifest_text(manifest: Mapping[str, Any]) -> str:
    """The text of manifest.json, as `models.artifacts.write_manifest` writes it."""
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def replace_file(target: Path, text: str, tmp_dir: Path) -> None:
    """Replace `target` by `text` atomically: a hidden temporary file in `tmp_dir` (on the
    same file system), fsynced, renamed over it, keeping its mode; then the directory fsynced."""
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(tmp, target.stat().st_mode & 0o777)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
