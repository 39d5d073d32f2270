"""Debian's German gettext catalogs: which packages ship them, and their pairs.

Discovery reads Debian's Contents index (every file of every package) and keeps each
package with a `.../locale/<lang>/LC_MESSAGES/*.mo` file, minus the packages other sources
already use or that belong to a held-out domain, and minus very large packages. The result
is committed as `debian_gettext_<lang>.txt` (regenerate it with
`python -m index_builder.prepare.catalogs`) so that a prepare run does not depend on the
day's index. English is the msgid, the target the msgstr.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from index_builder.corpus import Pair
from index_builder.prepare.clean import clean_ui
from index_builder.prepare.fetch import FetchError, fetch_debs, unpack_members
from index_builder.prepare.gettext import CatalogError, read_mo
from index_builder.prepare.sources import sources
from models.artifacts import sha256_file

ORIGIN = "debian-gettext"
# The .deb files of the 34 bookworm packages above this size are game art, WebKit builds,
# KiCad's libraries and the like: about 2 GB more to download and decompress for a few
# catalogs each, some of which smaller packages ship again.
MAX_DEB_BYTES = 20_000_000
# Held-out domains (medical, bible) and their neighbours: their UI strings are kept out of
# general training data. Other sources' own packages are excluded by name, from `sources()`.
DOMAIN_EXCLUDED = re.compile(
    r"(gnumed|gnuhealth|libreoffice-help|aeskulap|invesalius|bibletime|xiphos)(-.*)?"
)

Log = Callable[[str], None]


def list_path(lang: str) -> Path:
    return Path(__file__).with_name(f"debian_gettext_{lang}.txt")


def read_package_list(path: Path) -> list[str]:
    """The package names of a committed list; `#` starts a comment."""
    names = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def catalog_pattern(lang: str) -> re.Pattern[str]:
    """Paths inside a package worth unpacking: `lang`'s catalogs and the copyright file."""
    return re.compile(
        rf"(?:.*/)?locale/{re.escape(lang)}/LC_MESSAGES/[^/]+\.mo|usr/share/doc/[^/]+/copyright"
    )


def packages_in_contents(lines: Iterable[str], lang: str) -> set[str]:
    """Packages with a `lang` catalog, from Contents lines `path  section/pkg,section/pkg`."""
    wanted = re.compile(rf"(?:.*/)?locale/{re.escape(lang)}/LC_MESSAGES/[^/]+\.mo")
    found: set[str] = set()
    for line in lines:
        fields = line.rstrip().rsplit(None, 1)
        if len(fields) != 2 or not wanted.fullmatch(fields[0]):
            continue
        owners = fields[1]
        found.update(o.rsplit("/", 1)[-1] for o in owners.split(",") if o)
    return found


def select_packages(
    found: set[str], sizes: dict[str, int], exclude: set[str], max_bytes: int = MAX_DEB_BYTES
) -> list[str]:
    """The discovery rule: sorted, minus excluded names and domains, known and small enough."""
    return sorted(
        n
        for n in found
        if n not in exclude
        and not DOMAIN_EXCLUDED.fullmatch(n)
        and n in sizes
        and sizes[n] <= max_bytes
    )


def used_packages(lang: str) -> set[str]:
    """Debian packages the regular sources of `lang` already read."""
    return {p.name for s in sources(lang) for p in s.packages if p.kind == "deb"}


def copyright_license(path: Path) -> str:
    """The first named `License:` of a machine-readable copyright file (some start with an
    empty one whose text follows), else a note saying why there is none."""
    if not path.is_file():
        return "unknown (no copyright file in the package)"
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        name = line.removeprefix("License:").strip() if line.startswith("License:") else ""
        if name:
            return name
    return "unknown (copyright file not machine-readable)"


@dataclass(frozen=True)
class PoolPackage:
    """One package of the pool after unpacking: its pairs and its manifest record."""

    name: str
    pairs: list[Pair]
    record: dict[str, object]


def unpack_catalogs(deb: Path, sha256: str, dest: Path, lang: str) -> Path:
    """Unpack a package's catalogs and copyright into `dest`, once per archive content."""
    stamp = dest / ".unpacked-from"
    want = f"{sha256} {catalog_pattern(lang).pattern}"
    if stamp.is_file() and stamp.read_text() == want:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    unpack_members(deb, dest, catalog_pattern(lang))
    stamp.write_text(want)
    return dest


def package_pairs(name: str, root: Path, lang: str) -> list[Pair]:
    """Every catalog entry of one unpacked package, cleaned like the other UI catalogs."""
    pairs = []
    for f in sorted(root.rglob(f"locale/{lang}/LC_MESSAGES/*.mo")):
        doc = f"{name}:{f.relative_to(root).as_posix()}"
        for e in read_mo(f):
            pairs.append(Pair(clean_ui(e.msgid), clean_ui(e.msgstr), ORIGIN, doc))
    return pairs


@dataclass(frozen=True)
class FetchedPool:
    """The pool's archives in the cache (name -> file, name -> sha256) and what failed."""

    debs: dict[str, Path]
    sha256: dict[str, str]
    failed: dict[str, str]


def fetch_pool(names: list[str], cache: Path, offline: bool, log: Log) -> FetchedPool:
    """Fetch every listed package; a package that cannot be had is reported, not fatal."""
    debs, failed = fetch_debs(names, Path(cache).resolve(), offline, log)
    return FetchedPool(debs, {n: sha256_file(p) for n, p in debs.items()}, failed)


def read_pool(
    pool: FetchedPool, lang: str, cache: Path, log: Log
) -> tuple[list[PoolPackage], dict[str, str]]:
    """Unpack and read each fetched package; returns the packages read and, merged with the
    fetch failures, each package that failed and why."""
    failed = dict(pool.failed)
    out = []
    for i, (name, deb) in enumerate(sorted(pool.debs.items()), 1):
        if i % 200 == 0:
            log(f"[{ORIGIN}] reading package {i}/{len(pool.debs)}")
        root = Path(cache).resolve() / "unpacked" / f"{ORIGIN}-{lang}" / name
        try:
            unpack_catalogs(deb, pool.sha256[name], root, lang)
            pairs = package_pairs(name, root, lang)
        except (FetchError, CatalogError) as e:
            failed[name] = str(e)
            continue
        record: dict[str, object] = {
            "file": deb.name,
            "sha256": pool.sha256[name],
            "license": copyright_license(root / "usr/share/doc" / name / "copyright"),
            "extracted": len(pairs),
        }
        out.append(PoolPackage(name, pairs, record))
    return out, dict(sorted(failed.items()))


def _contents_lines() -> Iterable[str]:
    """Lines of the Contents indexes `apt-get update` fetched (needs apt-file installed)."""
    files = subprocess.run(
        ["apt-get", "indextargets", "--format", "$(FILENAME)", "Identifier: Contents-deb"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not files:
        raise SystemExit("no Contents index: install apt-file, then run apt-get update")
    for f in sorted(files):
        cat = ["/usr/lib/apt/apt-helper", "cat-file", f]
        yield from subprocess.run(cat, capture_output=True, text=True, check=True).stdout.split(
            "\n"
        )


def _deb_sizes(names: set[str]) -> dict[str, int]:
    """The candidate version's .deb size of each package, from apt's package lists."""
    out = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", *sorted(names)],
        capture_output=True,
        text=True,
    ).stdout
    sizes: dict[str, int] = {}
    name = ""
    for line in out.splitlines():
        if line.startswith("Package: "):
            name = line.split()[1]
        elif line.startswith("Size: ") and name:
            sizes[name] = int(line.split()[1])
    return sizes


def main(argv: list[str] | None = None) -> None:
    """Print the package list for `--lang` from this machine's apt indexes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lang", default="de")
    ap.add_argument("--max-bytes", type=int, default=MAX_DEB_BYTES)
    args = ap.parse_args(argv)
    found = packages_in_contents(_contents_lines(), args.lang)
    sizes = _deb_sizes(found)
    names = select_packages(found, sizes, used_packages(args.lang), args.max_bytes)
    print(
        f"# Debian packages with a {args.lang} gettext catalog (.../locale/{args.lang}/"
        f"LC_MESSAGES/*.mo): {len(found)} in this\n# machine's Contents indexes, less other "
        f"sources' packages, held-out domains and .deb\n# files over {args.max_bytes} bytes. "
        "Made by `python -m index_builder.prepare.catalogs`."
    )
    sys.stdout.write("".join(n + "\n" for n in names))


if __name__ == "__main__":
    main()
