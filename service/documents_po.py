"""gettext PO files: entries read with the offsets of their msgstr lines, written back by
replacing only those lines (see service.documents).

What counts as untranslated: an entry with an empty msgstr (a plural entry: any empty
msgstr[i], and only those are filled), not the header (msgid ""), not obsolete (`#~`), not
fuzzy unless asked. A plural entry's msgstr[0] takes the singular's translation and the other
forms the plural's (nplurals from the header's Plural-Forms; a language with one form takes
the plural's). A filled msgstr is written on one line, or as gettext writes a text with
line breaks: `msgstr ""` and one line per `\\n`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.documents import (
    Coded,
    Document,
    DocumentError,
    Unit,
    apply_edits,
    code_text,
    decode,
    restore,
)

__all__ = ["PoDocument", "escape", "read_po", "unescape"]

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\n|\r)?")
_KEYWORD = re.compile(r"(\s*)(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?(?=[\s\"])\s*(.*)$")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"\s*$')
_ESCAPE = re.compile(r"\\(?:([ntrabfv\\\"'?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|(.)|$)")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_SIMPLE |= {"\\": "\\", '"': '"', "'": "'", "?": "?"}
_OUT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a"}
_OUT |= {"\b": "\\b", "\f": "\\f", "\v": "\\v"}
_CONTROL = re.compile(r"[\x00-\x06\x0e-\x1f\x7f]")
_CHARSET = re.compile(rb"charset\s*=\s*([A-Za-z0-9_.:-]+)")
_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")


def unescape(body: str, line: int) -> str:
    """A PO string's content (between its quotes) with C escapes resolved."""

    def one(m: re.Match[str]) -> str:
        simple, octal, hexa, bad = m.groups()
        if simple:
            return _SIMPLE[simple]
        if octal:
            return chr(int(octal, 8))
        if hexa:
            return chr(int(hexa, 16))
        what = f"\\{bad}" if bad else "a backslash at the end"
        raise DocumentError(f"line {line}: invalid escape {what} in a string")

    return _ESCAPE.sub(one, body) if "\\" in body else body


def escape(text: str) -> str:
    """`text` as the content of a PO string: quotes, backslashes and controls escaped."""
    text = _CONTROL.sub("", text)
    return "".join(_OUT.get(ch, ch) for ch in text)


@dataclass
class _Field:
    """A keyword and its string: where it starts (the keyword) and ends (the last string
    line, before its line break), on which line, and the line break it ends with."""

    keyword: str
    index: int | None
    value: str
    start: int
    end: int
    line: int
    eol: str
    indent: str


@dataclass
class _Entry:
    fields: list[_Field] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    flags_line: tuple[int, int] | None = None  # the `#,` line's content span
    previous_at: int | None = None  # offset of its first `#|` line

    def get(self, keyword: str) -> _Field | None:
        return next((f for f in self.fields if f.keyword == keyword), None)

    @property
    def msgstrs(self) -> list[_Field]:
        return [f for f in self.fields if f.keyword == "msgstr"]

    @property
    def complete(self) -> bool:
        return bool(self.msgstrs)


@dataclass
class PoDocument(Document):
    """A PO file; its entries (`_entries[i]` is `units[i]`'s) keep their offsets."""

    nplurals: int | None = None
    _entries: list[_Entry] = field(default_factory=list)

    def render(self, translations: Mapping[str, str], needs_review: bool = False) -> bytes:
        edits: list[tuple[int, int, str]] = []
        for unit, entry in zip(self.units, self._entries, strict=True):
            if unit.todo:
                edits += self._fill(unit, entry, translations, needs_review)
        out = apply_edits(self.text, edits)
        try:
            return self.encode(out)
        except UnicodeEncodeError as e:
            line = out.count("\n", 0, e.start) + 1
            raise DocumentError(
                f"a translation cannot be written in the file's charset {self.codec} "
                f"(line {line} of the output)"
            ) from None

    def _fill(
        self, unit: Unit, entry: _Entry, translations: Mapping[str, str], needs_review: bool
    ) -> list[tuple[int, int, str]]:
        outs = [restore(c.translated(translations), c, lambda s: s) for c in unit.coded]
        strs = entry.msgstrs
        edits = []
        fuzzy = "fuzzy" in entry.flags
        if entry.get("msgid_plural") is None:
            forms = {None: outs[0]}
        else:
            nplurals = self.nplurals or len(strs)
            singular = outs[0] if nplurals > 1 else outs[1]  # one form: the plural's
            forms = {i: (singular if i == 0 else outs[1]) for i in range(max(nplurals, len(strs)))}
        last = strs[-1]
        for index, text in forms.items():
            old = next((f for f in strs if f.index == index), None)
            if old is None:  # a form the file lacks (fewer msgstr[i] than nplurals)
                new = _field_text(last.indent, "msgstr", index, escape(text), last.eol)
                edits.append((last.end, last.end, last.eol + new))
            elif not old.value or fuzzy:
                new = _field_text(old.indent, "msgstr", index, escape(text), old.eol)
                edits.append((old.start, old.end, new))
        if needs_review and not fuzzy:
            edits.append(self._mark(entry))
        return edits

    def _mark(self, entry: _Entry) -> tuple[int, int, str]:
        """The edit that adds the fuzzy flag to `entry`."""
        first = entry.fields[0]
        if entry.flags_line is not None:  # `#, c-format` -> `#, c-format, fuzzy`
            _, end = entry.flags_line
            return (end, end, ", fuzzy")
        # a flags line of its own, where gettext writes it: before `#|` lines, else the keywords
        at = entry.previous_at
        if at is None:
            at = first.start - len(first.indent)
        return (at, at, "#, fuzzy" + (first.eol or "\n"))


def _field_text(indent: str, keyword: str, index: int | None, body: str, eol: str) -> str:
    """A keyword and its string as gettext writes them (without the last line break)."""
    name = keyword if index is None else f"{keyword}[{index}]"
    pieces = re.findall(r".*?\\n|.+$", body)
    if len(pieces) <= 1:
        return f'{indent}{name} "{body}"'
    lines = [f'{indent}{name} ""'] + [f'{indent}"{p}"' for p in pieces]
    return eol.join(lines)


def _charset(data: bytes) -> str:
    """The charset the header declares (UTF-8 when none, or the template's CHARSET)."""
    head = data[:4096]
    at = head.find(b"Content-Type:")
    m = _CHARSET.search(head, at) if at >= 0 else None
    if m is None or m.group(1).upper() == b"CHARSET":
        return "utf-8"
    return m.group(1).decode("ascii")


def read_po(data: bytes, fuzzy: bool = False) -> PoDocument:
    """Parse a PO file (see the module docstring); DocumentError names the line at fault."""
    text, codec, bom = decode(data, _charset(data), "the PO file")
    doc = PoDocument(kind="po", text=text, codec=codec, bom=bom)
    entries: list[_Entry] = []
    entry: _Entry | None = None
    pending = _Entry()  # comments seen before the next entry
    last: _Field | None = None
    offset = 0
    for number, m in enumerate(_LINE.finditer(text), start=1):
        raw = m.group()
        if not raw:
            break
        start, offset = offset, offset + len(raw)
        content = raw.rstrip("\r\n")
        eol = raw[len(content) :]
        stripped = content.strip()
        if not stripped or stripped.startswith("#"):
            if entry is not None:
                if stripped and not entry.complete:
                    raise DocumentError(f"line {number}: a comment inside an entry, before msgstr")
                _close(entry, number)
                entries.append(entry)
                entry, last = None, None
            if stripped.startswith("#~"):  # an obsolete entry: its comments go with it
                pending = _Entry()
            elif stripped.startswith("#,"):
                pending.flags = [f.strip() for f in stripped[2:].split(",") if f.strip()]
                pending.flags_line = (start, start + len(content.rstrip()))
            elif stripped.startswith("#|") and pending.previous_at is None:
                pending.previous_at = start
            continue
        if stripped.startswith('"'):
            if last is None:
                raise DocumentError(f"line {number}: a string without a keyword before it")
            last.value += _string(stripped, number)
            last.end, last.eol = start + len(content.rstrip()), eol
            continue
        k = _KEYWORD.match(content)
        if k is None:
            word = stripped.split()[0][:40]
            raise DocumentError(f"line {number}: unexpected {word!r} (not a PO keyword or string)")
        indent, keyword, index, rest = k.groups()
        if entry is not None and entry.complete and keyword in ("msgctxt", "msgid"):
            entries.append(entry)
            entry = None
        if entry is None:
            if keyword not in ("msgctxt", "msgid"):
                raise DocumentError(f"line {number}: {keyword} without a msgid before it")
            entry, pending = pending, _Entry()
        _check_order(entry, keyword, index, number)
        last = _Field(
            keyword,
            int(index) if index is not None else None,
            _string(rest, number),
            start + len(indent),
            start + len(content.rstrip()),
            number,
            eol,
            indent,
        )
        entry.fields.append(last)
    if entry is not None:
        _close(entry, text.count("\n") + 1)
        entries.append(entry)
    if not entries:
        raise DocumentError("not a PO file: it holds no msgid entries")
    _units(doc, entries, fuzzy)
    return doc


def _string(rest: str, line: int) -> str:
    m = _STRING.match(rest)
    if m is None:
        raise DocumentError(f"line {line}: expected a quoted string")
    return unescape(m.group(1), line)


def _check_order(entry: _Entry, keyword: str, index: str | None, line: int) -> None:
    """The keywords of an entry come as msgctxt? msgid msgid_plural? msgstr..."""
    has = {f.keyword for f in entry.fields}
    plural = "msgid_plural" in has
    if keyword == "msgctxt" and has:
        raise DocumentError(f"line {line}: msgctxt after msgid")
    if keyword == "msgid" and "msgid" in has:
        raise DocumentError(f"line {line}: a second msgid in one entry")
    if keyword in ("msgid_plural", "msgstr") and "msgid" not in has:
        raise DocumentError(f"line {line}: {keyword} without a msgid before it")
    if keyword == "msgid_plural" and "msgstr" in has:
        raise DocumentError(f"line {line}: msgid_plural after msgstr")
    if keyword == "msgstr":
        if plural and index is None:
            raise DocumentError(f"line {line}: a plural entry needs msgstr[N], not msgstr")
        if not plural and index is not None:
            raise DocumentError(f"line {line}: msgstr[{index}] without msgid_plural")
        if index is not None and int(index) != len(entry.msgstrs):
            raise DocumentError(f"line {line}: msgstr[{index}] out of order")


def _close(entry: _Entry, line: int) -> None:
    if not entry.complete:
        first = entry.fields[0].line if entry.fields else line
        raise DocumentError(f"line {first}: an entry without msgstr")


def _units(doc: PoDocument, entries: list[_Entry], fuzzy: bool) -> None:
    """The header's charset and plural forms, and a unit per entry other than the header."""
    for entry in entries:
        msgid = entry.get("msgid")
        assert msgid is not None
        ctxt = entry.get("msgctxt")
        strs = entry.msgstrs
        if msgid.value == "" and ctxt is None:  # the header
            header = strs[0].value
            m = _NPLURALS.search(header)
            doc.nplurals = int(m.group(1)) if m else None
            lang = re.search(r"^Language:[ \t]*([^\s]*)", header, re.M)
            if lang and lang.group(1):
                doc.target_lang = lang.group(1)
                doc.languages.append(("target", lang.group(1), strs[0].line))
            continue
        plural = entry.get("msgid_plural")
        is_fuzzy = "fuzzy" in entry.flags
        empty = any(not f.value for f in strs) or (
            plural is not None and doc.nplurals is not None and len(strs) < doc.nplurals
        )
        if empty:
            state = "untranslated"
        else:
            state = "fuzzy" if is_fuzzy else "translated"
        todo = empty or (is_fuzzy and fuzzy)
        sources = [msgid.value] + ([plural.value] if plural is not None else [])
        unit_id = msgid.value if ctxt is None else f"{ctxt.value}\x04{msgid.value}"
        doc.units.append(
            Unit(
                id=unit_id,
                source=msgid.value,
                target=strs[0].value,
                line=strs[0].line,
                state=state,
                todo=todo,
                coded=tuple(_coded(s) for s in sources),
            )
        )
        doc._entries.append(entry)


def _coded(source: str) -> Coded:
    return code_text([("text", source)], lambda s: s)
