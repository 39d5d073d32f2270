"""Readers for users' parallel corpora (TSV, Moses line-aligned files, TMX) into `Pair` lists.

Translation memories feed the retrieval store directly, so a bad line silently kept would be
served back to users as a "match". The readers therefore refuse rather than repair: invalid
UTF-8, an empty side, a missing column or unequal Moses files all raise `CorpusError` naming the
file and, where known, the line. Nothing else escapes for bad input (no `UnicodeDecodeError`, no
lxml exceptions). Readers only read; `write_tsv` is the one writer and it replaces atomically.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from lxml import etree

from index_builder.corpus import CorpusError, Pair

__all__ = ["FORMATS", "SAFE_XML", "read_corpus", "read_moses", "read_tmx", "read_tsv", "write_tsv"]

# lxml's options for files from outside (TMX, TBX, XLIFF): no DTD loaded, no entity resolved,
# nothing fetched, no huge trees: a file can neither expand nor reach anything.
SAFE_XML: dict[str, bool] = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "huge_tree": False,
}

FORMATS = ("tsv", "moses", "tmx")
StrPath = str | os.PathLike[str]

_BOM = b"\xef\xbb\xbf"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
# Native-code elements of TMX 1.4 whose content is the original format's markup, not text.
_CODE_TAGS = frozenset({"bpt", "ept", "ph", "it", "ut"})
_SNIFF_BYTES = 64 * 1024


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e.strerror or e}") from None


def _read_lines(path: Path) -> list[str]:
    """Decode a text file strictly and split it into lines (BOM stripped, CRLF normalised).

    Trailing blank lines are dropped; an empty or blank-only file is an error.
    """
    data = _read_bytes(path)
    skip = len(_BOM) if data.startswith(_BOM) else 0
    try:
        text = data[skip:].decode("utf-8")
    except UnicodeDecodeError as e:
        start = e.start + skip
        line = data.count(b"\n", 0, start) + 1
        raise CorpusError(
            f"{path}: line {line}: invalid UTF-8 (byte offset {start}: {e.reason})"
        ) from None
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise CorpusError(f"{path}: empty file")
    return lines


def _pair(source: str, target: str, origin: str, where: str) -> Pair:
    """Build a pair from stripped sides; an empty side is an error, not something to skip."""
    source, target = source.strip(), target.strip()
    if not source or not target:
        side = "source" if not source else "target"
        raise CorpusError(f"{where}: empty {side} side")
    return Pair(source=source, target=target, origin=origin)


def read_tsv(path: StrPath, src_col: int = 0, tgt_col: int = 1) -> list[Pair]:
    """Read a UTF-8 tab-separated file, one pair per line; extra columns are ignored."""
    if src_col < 0 or tgt_col < 0 or src_col == tgt_col:
        raise ValueError(f"bad columns src_col={src_col}, tgt_col={tgt_col}")
    path = Path(path)
    need = max(src_col, tgt_col) + 1
    pairs = []
    for number, line in enumerate(_read_lines(path), start=1):
        cols = line.split("\t")
        if len(cols) < need:
            raise CorpusError(f"{path}: line {number}: {len(cols)} column(s), need at least {need}")
        pairs.append(_pair(cols[src_col], cols[tgt_col], path.name, f"{path}: line {number}"))
    return pairs


def read_moses(src_path: StrPath, tgt_path: StrPath) -> list[Pair]:
    """Read two line-aligned files (Moses style); line i of one translates line i of the other."""
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise CorpusError(
            f"line counts differ: {src_path} has {len(src_lines)}, {tgt_path} has {len(tgt_lines)}"
        )
    return [
        _pair(s, t, src_path.name, f"{src_path} / {tgt_path}: line {n}")
        for n, (s, t) in enumerate(zip(src_lines, tgt_lines, strict=True), start=1)
    ]


def _primary(lang: str) -> str:
    return lang.replace("_", "-").split("-", 1)[0].strip().lower()


def _seg_text(el: etree._Element) -> str:
    """Text of a <seg>: `hi` (and unknown) children keep their text, native codes drop theirs.

    Tails always belong to the enclosing text. Entity references left unresolved (we never
    resolve them) and comments contribute nothing.
    """
    parts = [el.text or ""]
    for child in el:
        if isinstance(child.tag, str) and child.tag not in _CODE_TAGS:
            parts.append(_seg_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def read_tmx(path: StrPath, src_lang: str = "en", tgt_lang: str = "de") -> list[Pair]:
    """Read a TMX memory, streaming <tu> elements; tus lacking either language are skipped.

    Languages match on the primary subtag, case-insensitively (``en-US`` is ``en``), from
    ``xml:lang`` (TMX 1.4) or ``lang`` (TMX 1.1). The parser never touches the network, never
    loads a DTD and never expands entities, so a hostile file cannot read local files.
    """
    path = Path(path)
    src, tgt = _primary(src_lang), _primary(tgt_lang)
    pairs: list[Pair] = []
    skipped = 0
    try:
        with path.open("rb") as fh:
            if not fh.read(1):
                raise CorpusError(f"{path}: empty file")
            fh.seek(0)
            events = etree.iterparse(
                fh,
                events=("end",),
                tag="tu",
                **SAFE_XML,
                remove_comments=True,
                remove_pis=True,
            )
            for _, tu in events:
                sides: dict[str, str] = {}
                for tuv in tu.iterchildren("tuv"):
                    lang = _primary(tuv.get(_XML_LANG) or tuv.get("lang") or "")
                    seg = tuv.find("seg")
                    if lang in (src, tgt) and lang not in sides and seg is not None:
                        sides[lang] = _seg_text(seg)
                if src in sides and tgt in sides:
                    where = f"{path}: line {tu.sourceline}"
                    pairs.append(_pair(sides[src], sides[tgt], path.name, where))
                else:
                    skipped += 1
                # Free what we have read so memory stays flat on large memories.
                tu.clear(keep_tail=True)
                parent = tu.getparent()
                while parent is not None and tu.getprevious() is not None:
                    del parent[0]
    except etree.XMLSyntaxError as e:
        line = e.position[0] if e.position else e.lineno
        raise CorpusError(f"{path}: line {line}: malformed TMX: {e.msg}") from None
    except OSError as e:
        raise CorpusError(f"{path}: cannot read: {e.strerror or e}") from None
    if not pairs:
        raise CorpusError(
            f"{path}: no <tu> with both {src_lang} and {tgt_lang} ({skipped} <tu> skipped)"
        )
    return pairs


def _moses_paths(path: Path, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """``corpus.en`` -> (corpus.en, corpus.de); a stem ``corpus`` -> the same two files."""
    if path.suffix == f".{src_lang}":
        return path, path.with_suffix(f".{tgt_lang}")
    stem = str(path).rstrip(".")
    return Path(f"{stem}.{src_lang}"), Path(f"{stem}.{tgt_lang}")


def _guess_format(path: Path, src_lang: str, tgt_lang: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".tmx":
        return "tmx"
    if suffix == ".tsv":
        return "tsv"
    if path.is_file() and suffix == ".txt":
        with path.open("rb") as fh:
            if b"\t" in fh.read(_SNIFF_BYTES):
                return "tsv"
    src_file, tgt_file = _moses_paths(path, src_lang, tgt_lang)
    if src_file.is_file() and tgt_file.is_file():
        return "moses"
    raise CorpusError(
        f"{path}: cannot tell the corpus format (expected .tsv, .txt with tabs, .tmx, or "
        f"Moses files {src_file.name} + {tgt_file.name}); pass fmt= one of {', '.join(FORMATS)}"
    )


def read_corpus(
    path_or_paths: StrPath | Sequence[StrPath],
    fmt: str | None = None,
    src_lang: str = "en",
    tgt_lang: str = "de",
) -> list[Pair]:
    """Read a corpus in any supported format, guessing the format when `fmt` is None.

    Two paths mean Moses (source, target); one path is guessed from its extension, or taken as a
    Moses stem (``corpus`` or ``corpus.en`` for ``corpus.en`` + ``corpus.de``).
    """
    if fmt is not None and fmt not in FORMATS:
        raise CorpusError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(path_or_paths, (str, os.PathLike)):
        paths = [Path(p) for p in path_or_paths]
        if len(paths) != 2 or fmt not in (None, "moses"):
            raise CorpusError(
                f"a list of paths must be exactly a Moses (source, target) pair, got "
                f"{len(paths)} path(s) with fmt={fmt!r}"
            )
        return read_moses(paths[0], paths[1])
    path = Path(path_or_paths)
    fmt = fmt or _guess_format(path, src_lang, tgt_lang)
    if fmt == "tsv":
        return read_tsv(path)
    if fmt == "tmx":
        return read_tmx(path, src_lang, tgt_lang)
    return read_moses(*_moses_paths(path, src_lang, tgt_lang))


def write_tsv(pairs: Iterable[Pair], path: StrPath) -> None:
    """Write pairs as UTF-8 TSV atomically: all of it appears, or the old file stays untouched.

    Pairs that `read_tsv` could not read back identically (a tab or line break inside a side,
    an empty or padded side) are rejected up front, before anything is written.
    """
    path = Path(path)
    pairs = list(pairs)
    if not pairs:
        raise CorpusError(f"{path}: no pairs to write")
    for i, p in enumerate(pairs, start=1):
        for side, text in (("source", p.source), ("target", p.target)):
            if any(c in text for c in "\t\n\r"):
                raise CorpusError(f"{path}: pair {i}: {side} contains a tab or line break")
            if not text or text != text.strip():
                raise CorpusError(f"{path}: pair {i}: {side} is empty or has outer whitespace")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(f"{p.source}\t{p.target}\n" for p in pairs)
            fh.flush()
            os.fsync(fh.fileno())
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # Make the rename itself durable; not every platform lets us open a directory.
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
