"""XLIFF 1.2 and 2.0 files: units read with the offsets of their elements, targets written
back by splicing them in (see service.documents).

The file is first checked to be well-formed by lxml with a parser that resolves no entities,
loads no DTD and reaches no network (a DTD that declares entities is refused); a small lexer
then reads it again for offsets, which lxml does not give.

XLIFF 1.2: a `<trans-unit>` is untranslated without a `<target>`, with an empty one, or with
`state="new"` or `"needs-translation"` (and, when asked for fuzzy ones, a `needs-review-*`
state); `translate="no"` (on it or a `<group>` or `<file>` around it) skips it. A filled
target is `<target state="translated">`, or `state="needs-review-translation"` when marked
for review; a new one goes after `</source>` (after `</seg-source>` when there is one), on
a line of its own indented as `<source>` is. `<g>` and `<mrk>` are translated inside (a
`mtype="protected"` mark is kept whole); every other inline element is kept whole.

XLIFF 2.0: a `<segment>` is untranslated without a `<target>`, with an empty one, or with
`state="initial"`; its state becomes `translated` when filled (left as it was when marked for
review). `<pc>` and `<mrk>` are translated inside (`<mrk translate="no">` kept whole);
`<ph/>`, `<sc/>`, `<ec/>`, `<cp/>`, `<sm/>`, `<em/>` are kept; `<ignorable>` is untouched.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lxml import etree

from index_builder.readers import SAFE_XML
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

__all__ = ["XliffDocument", "read_xliff", "xml_escape"]

NS_12 = "urn:oasis:names:tc:xliff:document:1.2"
NS_20 = "urn:oasis:names:tc:xliff:document:2.0"
_TOKEN = re.compile(
    r"(?P<comment><!--.*?-->)"
    r"|(?P<cdata><!\[CDATA\[.*?\]\]>)"
    r"|(?P<pi><\?.*?\?>)"
    r"|(?P<doctype><!DOCTYPE(?:[^\[>]|\[.*?\])*>)"
    r"|(?P<end></(?P<ename>[^\s>]+)\s*>)"
    r"|(?P<start><(?P<sname>[^\s/>]+)(?P<attrs>(?:\s+[^\s=/>]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)"
    r"\s*(?P<empty>/?)>)"
    r"|(?P<text>[^<]+)",
    re.DOTALL,
)
_ATTR = re.compile(r"([^\s=/>]+)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")
_DECLARED = re.compile(rb"^(?:\s*)<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
UNTRANSLATED_12 = frozenset({"new", "needs-translation"})
REVIEW_12 = frozenset({"needs-review-translation", "needs-review-adaptation", "needs-review-l10n"})
PAIRED = {"1.2": frozenset({"g", "mrk"}), "2.0": frozenset({"pc", "mrk"})}


def xml_escape(text: str) -> str:
    """`text` as XML character data (and the characters XML 1.0 cannot hold dropped)."""
    text = _INVALID_XML.sub("", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass
class _Node:
    """Character data, a comment, CDATA or a processing instruction: its span."""

    kind: str
    start: int
    end: int


@dataclass
class _Element:
    """An element: its start tag's span (and where its attributes end), its end tag's span
    (the start tag's again when it is empty), its attributes and children."""

    qname: str
    ns: str | None
    start: int
    start_end: int
    attrs_end: int
    end: int = 0
    end_end: int = 0
    attrs: dict[str, str] = field(default_factory=dict)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # attribute value spans
    children: list[_Element | _Node] = field(default_factory=list)
    nsmap: dict[str, str] = field(default_factory=dict)

    @property
    def local(self) -> str:
        return self.qname.rsplit(":", 1)[-1]

    @property
    def prefix(self) -> str:
        return self.qname[: -len(self.local)]

    def elements(self, local: str | None = None) -> list[_Element]:
        return [
            c
            for c in self.children
            if isinstance(c, _Element) and (local is None or c.local == local)
        ]

    def first(self, local: str) -> _Element | None:
        found = self.elements(local)
        return found[0] if found else None


def _check_well_formed(data: bytes) -> None:
    """DocumentError naming the line of the first XML error; entity declarations refused."""
    parser = etree.XMLParser(**SAFE_XML)
    try:
        tree = etree.fromstring(data, parser).getroottree()
    except etree.XMLSyntaxError as e:
        line = e.position[0] if e.position else "?"
        message = re.sub(r",? line \d+, column \d+.*$", "", str(e.msg or e))
        raise DocumentError(f"not well-formed XML: {message} (line {line})") from None
    dtd = tree.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise DocumentError("the XML declares entities in its DTD, which are not accepted")


def _parse(text: str, line_of: list[int]) -> _Element:
    """The element tree of `text` (well-formed: checked before) with offsets."""
    stack: list[_Element] = []
    root: _Element | None = None
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            break
        pos = m.end()
        kind = m.lastgroup
        if kind in ("sname", "attrs", "empty", "ename"):
            kind = "start" if m.group("start") else "end"
        if kind == "start":
            attrs, spans, nsmap = {}, {}, dict(stack[-1].nsmap) if stack else {}
            base = m.start("attrs")
            for a in _ATTR.finditer(m.group("attrs")):
                value = a.group(2) if a.group(2) is not None else a.group(3)
                group = 2 if a.group(2) is not None else 3
                attrs[a.group(1)] = html.unescape(value)
                spans[a.group(1)] = (base + a.start(group), base + a.end(group))
                if a.group(1) == "xmlns" or a.group(1).startswith("xmlns:"):
                    nsmap[a.group(1)[6:]] = attrs[a.group(1)]
            qname = m.group("sname")
            prefix = qname.rsplit(":", 1)[0] if ":" in qname else ""
            el = _Element(qname, nsmap.get(prefix), m.start(), m.end(), m.end("attrs"))
            el.attrs, el.spans, el.nsmap = attrs, spans, nsmap
            if stack:
                stack[-1].children.append(el)
            elif root is None:
                root = el
            if m.group("empty"):
                el.end, el.end_end = m.start(), m.end()
            else:
                stack.append(el)
        elif kind == "end":
            el = stack.pop()
            el.end, el.end_end = m.start(), m.end()
        elif stack:
            stack[-1].children.append(_Node(kind or "text", m.start(), m.end()))
    if pos != len(text) or root is None or stack:
        line = bisect.bisect_left(line_of, pos) + 1
        raise DocumentError(f"cannot read the XML at line {line}")
    return root


@dataclass
class _Target:
    """Where a unit's target goes: the element holding source and target, the source (or
    seg-source) it follows, the target if there is one, and the element whose `state`
    attribute records the unit's state (1.2: the target; 2.0: the segment)."""

    parent: _Element
    after: _Element
    target: _Element | None
    state_on: _Element | None


@dataclass
class XliffDocument(Document):
    """An XLIFF file; `_targets[i]` is where `todo[i]`'s target goes."""

    version: str = "1.2"
    _targets: list[_Target] = field(default_factory=list)

    def render(self, translations: Mapping[str, str], needs_review: bool = False) -> bytes:
        edits: list[tuple[int, int, str]] = []
        for unit, where in zip(self.todo, self._targets, strict=True):
            content = restore(unit.coded[0].translated(translations), unit.coded[0], xml_escape)
            edits += self._fill(where, content, needs_review)
        return self.encode(apply_edits(self.text, edits), "xmlcharrefreplace")

    def _fill(self, where: _Target, content: str, review: bool) -> list[tuple[int, int, str]]:
        text = self.text
        state = "needs-review-translation" if review else "translated"
        edits = []
        target = where.target
        if self.version == "2.0":
            segment = where.state_on
            if segment is not None and not review:
                edits.append(_set_attr(text, segment, "state", "translated"))
        if target is None:
            name = where.after.prefix + "target"
            attrs = f' state="{state}"' if self.version == "1.2" else ""
            indent = _indent(text, where.parent, where.after)
            new = f"{indent}<{name}{attrs}>{content}</{name}>"
            return [*edits, (where.after.end_end, where.after.end_end, new)]
        start_tag = text[target.start : target.start_end]
        if self.version == "1.2":
            a, b, value = _set_attr(text, target, "state", state)
            start_tag = start_tag[: a - target.start] + value + start_tag[b - target.start :]
        if start_tag.endswith("/>"):  # <target/>: opened and closed around the content
            start_tag = start_tag[:-2].rstrip() + ">"
            end_tag = f"</{target.qname}>"
        else:
            end_tag = text[target.end : target.end_end]
        return [*edits, (target.start, target.end_end, start_tag + content + end_tag)]


def _set_attr(text: str, el: _Element, name: str, value: str) -> tuple[int, int, str]:
    """The edit that sets attribute `name` of `el`'s start tag to `value`."""
    if name in el.spans:
        start, end = el.spans[name]
        return (start, end, value)
    return (el.attrs_end, el.attrs_end, f' {name}="{value}"')


def _indent(text: str, parent: _Element, after: _Element) -> str:
    """The white space before `after` in `parent` (a new sibling goes on a line like it)."""
    i = next(i for i, c in enumerate(parent.children) if c is after)
    before = parent.children[i - 1] if i > 0 else None
    if isinstance(before, _Node) and before.kind == "text":
        space = text[before.start : before.end]
        if not space.strip():
            return space
    return ""


def _is_blank(text: str, el: _Element | None) -> bool:
    """Whether a target is missing or holds nothing but white space."""
    if el is None:
        return True
    for c in el.children:
        if not isinstance(c, _Node) or c.kind != "text" or text[c.start : c.end].strip():
            return False
    return True


def _plain(text: str, el: _Element) -> str:
    """An element's text content (what a reader of the unit sees), entities resolved."""
    out = []
    for c in el.children:
        if isinstance(c, _Element):
            out.append(_plain(text, c))
        elif c.kind == "text":
            out.append(html.unescape(text[c.start : c.end]))
        elif c.kind == "cdata":
            out.append(text[c.start + 9 : c.end - 3])
    return "".join(out)


def _coded(text: str, source: _Element, version: str) -> Coded:
    """The source as the model reads it: text with inline codes as tokens."""
    parts: list[tuple[str, str] | tuple[str, str, int]] = []
    pairs = [0]

    def walk(el: _Element) -> None:
        for c in el.children:
            if isinstance(c, _Node):
                raw = text[c.start : c.end]
                if c.kind == "text":
                    parts.append(("text", html.unescape(raw)))
                elif c.kind == "cdata":
                    parts.append(("text", raw[9:-3]))
                else:
                    parts.append(("single", raw))
            elif _translated_inside(c, version) and c.start_end != c.end_end:
                pairs[0] += 1
                pair = pairs[0]
                parts.append(("open", text[c.start : c.start_end], pair))
                walk(c)
                parts.append(("close", text[c.end : c.end_end], pair))
            else:
                parts.append(("single", text[c.start : c.end_end]))

    walk(source)
    return code_text(parts, xml_escape)


def _translated_inside(el: _Element, version: str) -> bool:
    if el.local not in PAIRED[version]:
        return False
    if version == "1.2":
        return el.attrs.get("mtype") != "protected"
    return el.attrs.get("translate") != "no"


def read_xliff(data: bytes, fuzzy: bool = False) -> XliffDocument:
    """Parse an XLIFF 1.2 or 2.0 file (see the module docstring)."""
    declared = _DECLARED.match(data)
    codec = declared.group(1).decode("ascii") if declared else "utf-8"
    text, codec, bom = decode(data, codec, "the XML file")
    _check_well_formed(data)
    line_of = [m.start() for m in re.finditer("\n", text)]
    root = _parse(text, line_of)
    if root.local != "xliff":
        raise DocumentError(f"not an XLIFF file: its root element is <{root.qname}>")
    version = root.attrs.get("version", "")
    if root.ns == NS_20 or version.startswith("2."):
        version = "2.0"
    elif root.ns in (NS_12, None) and version.startswith("1."):
        version = "1.2"
    else:
        raise DocumentError(f"XLIFF version {version or '(none)'} is not supported (1.2, 2.0)")
    doc = XliffDocument(kind=f"xliff-{version}", text=text, codec=codec, bom=bom)
    doc.version = version

    def line(offset: int) -> int:
        return bisect.bisect_left(line_of, offset) + 1

    if version == "1.2":
        _read_12(doc, root, fuzzy, line)
    else:
        _read_20(doc, root, line)
    return doc


def _languages(doc: XliffDocument, el: _Element, names: tuple[str, str], line: int) -> None:
    for what, name in zip(("source", "target"), names, strict=True):
        tag = el.attrs.get(name, "").strip()
        if tag:
            doc.languages.append((what, tag, line))
            if getattr(doc, f"{what}_lang") is None:
                setattr(doc, f"{what}_lang", tag)


def _read_12(doc: XliffDocument, root: _Element, fuzzy: bool, line: Callable[[int], int]) -> None:
    text = doc.text

    def walk(el: _Element, translate: bool) -> None:
        for c in el.elements():
            here = translate and c.attrs.get("translate", "yes") != "no"
            if c.local == "trans-unit":
                unit(c, here)
            elif c.local in ("group", "body"):
                walk(c, here)

    def unit(tu: _Element, translate: bool) -> None:
        source = tu.first("source")
        if source is None:
            raise DocumentError(f"line {line(tu.start)}: a <trans-unit> without <source>")
        target = tu.first("target")
        state = target.attrs.get("state") if target is not None else None
        blank = _is_blank(text, target)
        if not translate:
            status = "not-translatable"
        elif blank or state in UNTRANSLATED_12:
            status = "untranslated"
        else:
            status = "fuzzy" if state in REVIEW_12 else "translated"
        todo = status == "untranslated" or (status == "fuzzy" and fuzzy)
        after = tu.first("seg-source") or source
        at = target.start if target is not None else after.end_end
        doc.units.append(
            Unit(
                id=tu.attrs.get("id", ""),
                source=_plain(text, source),
                target=None if target is None else _plain(text, target),
                line=line(at),
                state=status,
                todo=todo,
                coded=(_coded(text, source, "1.2"),) if todo else (),
            )
        )
        if todo:
            doc._targets.append(_Target(tu, after, target, target))

    for f in root.elements("file"):
        _languages(doc, f, ("source-language", "target-language"), line(f.start))
        walk(f, f.attrs.get("translate", "yes") != "no")


def _read_20(doc: XliffDocument, root: _Element, line: Callable[[int], int]) -> None:
    text = doc.text
    _languages(doc, root, ("srcLang", "trgLang"), line(root.start))

    def walk(el: _Element, translate: bool) -> None:
        for c in el.elements():
            here = translate and c.attrs.get("translate", "yes") != "no"
            if c.local == "unit":
                unit(c, here)
            elif c.local in ("group", "file"):
                walk(c, here)

    def unit(u: _Element, translate: bool) -> None:
        for n, seg in enumerate(u.elements("segment"), start=1):
            source = seg.first("source")
            if source is None:
                raise DocumentError(f"line {line(seg.start)}: a <segment> without <source>")
            target = seg.first("target")
            state = seg.attrs.get("state")
            if not translate:
                status = "not-translatable"
            elif _is_blank(text, target) or state == "initial":
                status = "untranslated"
            else:
                status = "translated"
            todo = status == "untranslated"
            at = target.start if target is not None else source.end_end
            doc.units.append(
                Unit(
                    id=f"{u.attrs.get('id', '')}/{seg.attrs.get('id', n)}",
                    source=_plain(text, source),
                    target=None if target is None else _plain(text, target),
                    line=line(at),
                    state=status,
                    todo=todo,
                    coded=(_coded(text, source, "2.0"),) if todo else (),
                )
            )
            if todo:
                doc._targets.append(_Target(seg, source, target, seg))

    walk(root, True)
