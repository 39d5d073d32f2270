"""Gettext catalogs (.mo binary, .po text) read without any gettext runtime.

Only what translation pairs need: singular msgid -> first msgstr, minus header, fuzzy and
untranslated entries. Contexts are kept so that one English string with several German
translations stays several entries.
"""

from __future__ import annotations

import ast
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    msgid: str
    msgstr: str
    context: str = ""


class CatalogError(ValueError):
    """A catalog file that cannot be parsed; the message names the file."""


def read_mo(path: Path) -> list[CatalogEntry]:
    """Parse a GNU .mo file (either byte order)."""
    data = Path(path).read_bytes()
    if len(data) < 28:
        raise CatalogError(f"{path}: too short for a .mo file")
    magic = struct.unpack("<I", data[:4])[0]
    if magic == 0x950412DE:
        order = "<"
    elif magic == 0xDE120495:
        order = ">"
    else:
        raise CatalogError(f"{path}: not a .mo file (bad magic {magic:#x})")
    _rev, count, orig_off, trans_off = struct.unpack(order + "4I", data[4:20])
    entries: list[CatalogEntry] = []
    for i in range(count):
        olen, opos = struct.unpack(order + "2I", data[orig_off + 8 * i : orig_off + 8 * i + 8])
        tlen, tpos = struct.unpack(order + "2I", data[trans_off + 8 * i : trans_off + 8 * i + 8])
        if opos + olen > len(data) or tpos + tlen > len(data):
            raise CatalogError(f"{path}: entry {i} points past the end of the file")
        orig = data[opos : opos + olen].decode("utf-8", errors="replace")
        trans = data[tpos : tpos + tlen].decode("utf-8", errors="replace")
        if not orig:  # the header
            continue
        context, _, msgid = orig.rpartition("\x04")
        msgid = msgid.split("\x00")[0]  # plural forms: keep the singular
        msgstr = trans.split("\x00")[0]
        if msgid and msgstr:
            entries.append(CatalogEntry(msgid, msgstr, context))
    return entries


def _unquote(line: str, path: Path, lineno: int) -> str:
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError) as e:
        raise CatalogError(f"{path}:{lineno}: bad quoted string {line[:40]!r}") from e
    if not isinstance(value, str):
        raise CatalogError(f"{path}:{lineno}: expected a quoted string")
    return value


def _has_msgstr(fields: dict[str, str]) -> bool:
    """The entry being read has its translation (singular or plural), so a new one starts."""
    return any(k == "msgstr" or k.startswith("msgstr[") for k in fields)


def read_po(path: Path) -> list[CatalogEntry]:
    """Parse a .po file; fuzzy and obsolete (#~) entries are skipped."""
    path = Path(path)
    entries: list[CatalogEntry] = []
    fields: dict[str, str] = {}
    current: str | None = None
    fuzzy = False

    def flush() -> None:
        nonlocal fields, current, fuzzy
        msgid = fields.get("msgid", "")
        msgstr = fields.get("msgstr", fields.get("msgstr[0]", ""))
        if msgid and msgstr and not fuzzy:
            entries.append(CatalogEntry(msgid, msgstr, fields.get("msgctxt", "")))
        fields, current, fuzzy = {}, None, False

    text = path.read_text(encoding="utf-8", errors="replace")
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            if fields:
                flush()
            continue
        if line.startswith("#,"):
            if _has_msgstr(fields):
                flush()
            fuzzy = fuzzy or "fuzzy" in line
            continue
        if line.startswith("#"):
            continue
        if line.startswith('"'):
            if current is None:
                raise CatalogError(f"{path}:{lineno}: continuation line outside an entry")
            fields[current] += _unquote(line, path, lineno)
            continue
        keyword, _, rest = line.partition(" ")
        if keyword == "msgctxt" or (keyword == "msgid" and _has_msgstr(fields)):
            if "msgid" in fields:
                flush()
        if keyword not in ("msgctxt", "msgid", "msgid_plural", "msgstr") and not (
            keyword.startswith("msgstr[")
        ):
            raise CatalogError(f"{path}:{lineno}: unknown keyword {keyword!r}")
        current = keyword
        fields[current] = _unquote(rest.strip(), path, lineno)
    if fields:
        flush()
    return entries
