"""Translatable files (gettext PO, XLIFF 1.2 and 2.0): units in, the same file out with only
the untranslated units' targets filled.

A file is never re-serialised. Its parser (`service.documents_po`, `service.documents_xliff`)
records where each target lies in the decoded text, and `Document.render` splices the new
targets in at those offsets, so every other byte (comments, layout, attribute order, entities,
line endings, encoding) stays as it was.

What the model reads of a source is its text with each inline code (an XLIFF element such as
`<g>`, `<x/>`, `<ph>`) and each named or template placeholder (`%(name)s`, `%{name}`,
`{{ name }}`, `{% tag %}`: `models.literals.TEMPLATE_PLACEHOLDER`) replaced by a token,
`<gN>`...`</gN>` around translatable content, `<xN/>` for the rest. Tokens are markup to the
literal masking of `models.literals`, so the translation keeps them; `restore` puts back the
exact original of each, and one the translation lost (or misnested) at the start or end of
the text, so a target is always well-formed. Texts are translated one line at a time (what
the model was trained on), and each distinct line of a file once.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from models.literals import TEMPLATE_PLACEHOLDER

__all__ = [
    "Code",
    "Coded",
    "Document",
    "DocumentError",
    "LanguageMismatch",
    "Unit",
    "code_text",
    "read_document",
    "restore",
]


class DocumentError(ValueError):
    """A file that cannot be read or written as PO or XLIFF; the message says what and where."""


class LanguageMismatch(DocumentError):
    """The languages a file declares are not the ones a request asks for."""


# Named printf (Python, Ruby) and template placeholders (Jinja, Twig, Django, Mustache,
# Angular, ICU), as models.literals finds them.
PROTECTED = re.compile(TEMPLATE_PLACEHOLDER)
_LETTER = re.compile(r"[^\W\d_]")
_LINE_BREAK = re.compile(r"(\s*(?:\r\n|\r|\n)\s*)")


@dataclass(frozen=True)
class Code:
    """One token of a coded text: what it stands for in the output (`raw`, already escaped
    for the file's format), whether it opens or closes a pair (`pair`: the pair's number) or
    stands alone, and whether it opened the source (a lost one goes back there)."""

    token: str
    raw: str
    kind: str  # "open", "close" or "single"
    pair: int = 0
    leading: bool = False


@dataclass(frozen=True)
class Coded:
    """A source as the model reads it: `text` with each of `codes` as its token."""

    text: str
    codes: tuple[Code, ...] = ()

    def chunks(self) -> list[tuple[str, bool]]:
        """`text` cut at line breaks: (piece, whether it is translated). Line breaks and the
        white space around each line are kept as they are, as is a line with no letters."""
        out: list[tuple[str, bool]] = []
        for i, part in enumerate(_LINE_BREAK.split(self.text)):
            if i % 2:
                out.append((part, False))
                continue
            core = part.strip()
            lead = part[: len(part) - len(part.lstrip())]
            trail = part[len(part.rstrip()) :]
            if lead:
                out.append((lead, False))
            if core:
                out.append((core, self.wordy(core)))
            if trail:
                out.append((trail, False))
        return out

    def wordy(self, piece: str) -> bool:
        """Whether `piece` has letters outside its tokens (else nothing to translate)."""
        for code in self.codes:
            piece = piece.replace(code.token, " ")
        return _LETTER.search(piece) is not None

    def translated(self, translations: Mapping[str, str]) -> str:
        """The text with each translated line replaced (lines not in `translations` kept)."""
        return "".join(translations.get(p, p) if t else p for p, t in self.chunks())


def _token_names(plain: str) -> tuple[str, str]:
    """Token letters for paired and single codes that no token-like text of `plain` uses."""
    for paired, single in (("g", "x"), ("gg", "xx"), ("tg", "tx"), ("tgg", "txx")):
        if not re.search(rf"</?(?:{paired}|{single})\d+/?>", plain):
            return paired, single
    raise DocumentError("a source text holds too many tag-like strings to code its tags")


def code_text(
    parts: Iterable[tuple[str, str] | tuple[str, str, int]], escape: Callable[[str], str]
) -> Coded:
    """A coded text from `parts` in order: ("text", plain text), ("single", raw),
    ("open", raw, pair), ("close", raw, pair). Protected placeholders in text become single
    codes; their raw is the placeholder `escape`d for the output format."""
    items: list[tuple[str, str, int]] = []
    for part in parts:
        if part[0] != "text":
            items.append((part[0], part[1], part[2] if len(part) > 2 else 0))  # type: ignore[misc]
            continue
        text, pos = part[1], 0
        for m in PROTECTED.finditer(text):
            items.append(("text", text[pos : m.start()], 0))
            items.append(("single", escape(m.group()), 0))
            pos = m.end()
        items.append(("text", text[pos:], 0))
    plain = "".join(value for kind, value, _ in items if kind == "text")
    paired, single = _token_names(plain)
    text_parts: list[str] = []
    codes: list[Code] = []
    numbers: dict[int, int] = {}  # the caller's pair -> its tokens' number
    count = 0
    for kind, value, pair in items:
        if kind == "text":
            text_parts.append(value)
            continue
        if kind == "close":
            n = numbers[pair]
        else:
            count += 1
            n = count
        if kind == "open":
            numbers[pair] = n
            token = f"<{paired}{n}>"
        elif kind == "close":
            token = f"</{paired}{n}>"
        else:
            token = f"<{single}{n}/>"
        leading = not "".join(text_parts).strip()
        codes.append(Code(token, value, kind, n if kind != "single" else 0, leading))
        text_parts.append(token)
    return Coded("".join(text_parts), tuple(codes))


def restore(translation: str, coded: Coded, escape: Callable[[str], str]) -> str:
    """The output form of `translation` (a translation of `coded.text`): text `escape`d, each
    token replaced by its code's raw once. Lost codes come back where they stood (start or
    end); pairs the translation broke (one side lost, closed before opened, crossed) are put
    back around the whole text, so the result nests as the source did."""
    if not coded.codes:
        return escape(translation)
    by_token = {c.token: c for c in coded.codes}
    tokens = sorted(by_token, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(t) for t in tokens))
    stray = re.compile(r"</?(?:" + "|".join(_token_letters(coded)) + r")\d+/?>")
    seq: list[str | Code] = []
    seen: set[str] = set()
    pos = 0
    for m in pattern.finditer(translation):
        seq.append(stray.sub("", translation[pos : m.start()]))
        code = by_token[m.group()]
        if code.token not in seen:
            seen.add(code.token)
            seq.append(code)
        pos = m.end()
    seq.append(stray.sub("", translation[pos:]))
    seq = _drop_broken_pairs(seq)
    kept = {c.token for c in seq if isinstance(c, Code)}
    lost = [c for c in coded.codes if c.token not in kept]
    # in source order: lost pairs are whole, so their opens and closes nest as they did
    head = [c for c in lost if c.kind == "open" or (c.kind == "single" and c.leading)]
    tail = [c for c in lost if c.kind == "close" or (c.kind == "single" and not c.leading)]
    body = "".join(x.raw if isinstance(x, Code) else escape(x) for x in seq)
    return "".join(c.raw for c in head) + body + "".join(c.raw for c in tail)


def _token_letters(coded: Coded) -> set[str]:
    return {re.sub(r"[</>\d]", "", c.token) for c in coded.codes}


def _drop_broken_pairs(seq: list[str | Code]) -> list[str | Code]:
    """`seq` without the pair codes that do not nest: a side lost, closed before opened, or
    crossing another pair (then every pair goes, to be put back around the text)."""
    sides: dict[int, list[str]] = {}
    for x in seq:
        if isinstance(x, Code) and x.kind != "single":
            sides.setdefault(x.pair, []).append(x.kind)
    broken = {p for p, s in sides.items() if s != ["open", "close"]}
    stack: list[int] = []
    for x in seq:
        if not isinstance(x, Code) or x.kind == "single" or x.pair in broken:
            continue
        if x.kind == "open":
            stack.append(x.pair)
        elif stack and stack[-1] == x.pair:
            stack.pop()
        else:  # crossed pairs: none of them is trusted
            broken |= set(sides)
            break
    return [x for x in seq if not (isinstance(x, Code) and x.kind != "single" and x.pair in broken)]


@dataclass
class Unit:
    """A translatable unit of a file: its id, source and current target as plain text, the
    line its target is (or goes) on, its state, and whether it is to be filled (`todo`).
    `coded`: its source(s) as the model reads them; a PO plural entry has two."""

    id: str
    source: str
    target: str | None
    line: int
    state: str  # translated, untranslated, fuzzy, or not-translatable
    todo: bool
    coded: tuple[Coded, ...] = ()


@dataclass
class Document:
    """A parsed file: its units and what `render` needs to write it back."""

    kind: str  # "po", "xliff-1.2" or "xliff-2.0"
    text: str  # the decoded file
    codec: str  # what it was decoded with, and what it is encoded with again
    bom: bytes  # a byte-order mark it began with, kept
    units: list[Unit] = field(default_factory=list)
    source_lang: str | None = None  # the first source language it declares
    target_lang: str | None = None
    languages: list[tuple[str, str, int]] = field(default_factory=list)  # (what, tag, line)

    @property
    def todo(self) -> list[Unit]:
        return [u for u in self.units if u.todo]

    @property
    def media_type(self) -> str:
        if self.kind == "po":
            return f"text/x-gettext-translation; charset={self.codec}"
        return "application/xliff+xml" if self.kind == "xliff-2.0" else "application/x-xliff+xml"

    def texts(self) -> list[str]:
        """The distinct lines to translate to fill every untranslated unit, in file order."""
        seen: dict[str, None] = {}
        for unit in self.todo:
            for coded in unit.coded:
                for piece, translate in coded.chunks():
                    if translate:
                        seen.setdefault(piece, None)
        return list(seen)

    def check_languages(self, source: str, target: str) -> None:
        """LanguageMismatch when a language the file declares is not `source` or `target`
        (compared by primary subtag: en-US is en); a file that declares none passes."""
        want = {"source": source, "target": target}
        for what, tag, line in self.languages:
            if primary(tag) != primary(want[what]):
                raise LanguageMismatch(
                    f"the file's {what} language is {tag!r} (line {line}), "
                    f"not the requested {want[what]!r}"
                )

    def render(self, translations: Mapping[str, str], needs_review: bool = False) -> bytes:
        """The file with every untranslated unit's target filled from `translations` (line
        -> translation; a line missing from it is copied); nothing else changes. With
        `needs_review`, filled units are marked for review in the format's own way."""
        raise NotImplementedError

    def fill(
        self, translate: Callable[[list[str]], Sequence[str]], needs_review: bool = False
    ) -> bytes:
        """`render` with the translations of `translate(self.texts())` (tests, scripts)."""
        texts = self.texts()
        return self.render(dict(zip(texts, translate(texts), strict=True)), needs_review)

    def encode(self, text: str, errors: str = "strict") -> bytes:
        """`text` in the file's encoding, after its byte-order mark."""
        return self.bom + text.encode(self.codec, errors)

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


def primary(tag: str) -> str:
    """A language tag's primary subtag, lower-cased: "de_DE" and "de-AT" are "de"."""
    return tag.strip().replace("_", "-").split("-")[0].lower()


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """`text` with each (start, end, replacement) spliced in; edits must not overlap."""
    out: list[str] = []
    pos = 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < pos:
            raise AssertionError(f"overlapping edits at offset {start}")
        out.append(text[pos:start])
        out.append(new)
        pos = end
    out.append(text[pos:])
    return "".join(out)


BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"))
BOMS += ((codecs.BOM_UTF16_BE, "utf-16-be"),)


def decode(data: bytes, codec: str, what: str) -> tuple[str, str, bytes]:
    """(text, codec, byte-order mark) of `data`; a mark overrides `codec`. DocumentError
    naming the line of the first byte that is not `codec` (or an unknown codec)."""
    bom = b""
    for mark, name in BOMS:
        if data.startswith(mark):
            bom, codec = mark, name
            break
    try:
        codec = codecs.lookup(codec).name
    except LookupError:
        raise DocumentError(f"{what} declares an unknown encoding {codec!r}") from None
    body = data[len(bom) :]
    try:
        return body.decode(codec), codec, bom
    except UnicodeDecodeError as e:
        line = body.count(b"\n", 0, e.start) + 1
        raise DocumentError(
            f"{what} is not valid {codec}: byte {e.start + len(bom)} (line {line})"
        ) from None


_XML_START = re.compile(rb"^(?:\xef\xbb\xbf|\xff\xfe|\xfe\xff)?\s*<", re.DOTALL)


def read_document(data: bytes, fuzzy: bool = False) -> Document:
    """Parse a PO or XLIFF file (told apart by its content). `fuzzy`: fuzzy PO entries and
    XLIFF 1.2 targets in a needs-review state count as untranslated (are filled anew).
    DocumentError names what is wrong and where."""
    from service import documents_po, documents_xliff

    if not data.strip():
        raise DocumentError("the file is empty")
    if _XML_START.match(data) or data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return documents_xliff.read_xliff(data, fuzzy)
    return documents_po.read_po(data, fuzzy)
