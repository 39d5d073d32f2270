"""Sentence/paragraph pairs from documentation that is aligned by structure.

Each function takes ROOT, the root of extracted Debian packages (``ROOT/usr/share/...``), and a
target language code, and returns a list of :class:`Pair` (English source, target text).

* :func:`libreoffice_help` aligns by element id (exact).
* :func:`gimp_help` and :func:`debian_reference` align DocBook HTML by the sequence of leaf
  block elements.
* :func:`man_pages` aligns groff sources by the sequence of paragraph-level macros.

Whatever the source, a malformed or unreadable file is skipped, never fatal.
"""

from __future__ import annotations

import difflib
import gzip
import html
import logging
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import lxml.html
from lxml import etree

from index_builder.corpus import Pair

log = logging.getLogger(__name__)

__all__ = ["libreoffice_help", "gimp_help", "debian_reference", "man_pages"]

# ---------------------------------------------------------------------------------- common

_WS = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")
_DIGITS = re.compile(r"\d+")


def _clean(text: str) -> str:
    """Decode entities, collapse whitespace, strip."""
    text = html.unescape(text).replace("\u00ad", "").replace("\u200b", "")
    return _WS.sub(" ", text).strip()


def _letters_only(text: str) -> str:
    return "".join(_LETTER.findall(text)).casefold()


def _keep(en: str, tgt: str) -> bool:
    """Shared pair filter: both sides non-empty with letters, different, length ratio 0.5-2."""
    if not en or not tgt or en == tgt:
        return False
    if _letters_only(en) == _letters_only(tgt):  # untranslated, only quotes/spacing changed
        return False
    if not _LETTER.search(en) or not _LETTER.search(tgt):
        return False
    ratio = len(tgt) / len(en)
    return 0.5 <= ratio <= 2.0


def _digits_agree(en: str, tgt: str) -> bool:
    """Same multiset of digit runs on both sides: a cheap check against misalignment."""
    return sorted(_DIGITS.findall(en)) == sorted(_DIGITS.findall(tgt))


_WORD = re.compile(r"[^\W\d_]+")
_EN_FUNCTION_WORDS = frozenset(
    "the and of with is are you your this that for from to which be can used by".split()
)


def _looks_english(text: str) -> bool:
    """At least two English function words making up >= 15% of the words: left untranslated.

    Only for non-English targets; GIMP help in particular has partly translated paragraphs
    and figure titles ("Abbildung 8.8. Images used for the layer mode examples").
    """
    words = [w.casefold() for w in _WORD.findall(text)]
    n = sum(w in _EN_FUNCTION_WORDS for w in words)
    return n >= 2 and n >= 0.15 * len(words)


class _Collector:
    """Filters, de-duplicates (exact (en, tgt)) and keeps first-seen order.

    ``check_untranslated`` also drops targets that look English (see :func:`_looks_english`);
    off for LibreOffice, whose exact id alignment leaves only legitimate English names there.
    """

    def __init__(self, origin: str, check_untranslated: bool = False) -> None:
        self.origin = origin
        self.check_untranslated = check_untranslated
        self.seen: set[tuple[str, str]] = set()
        self.pairs: list[Pair] = []

    def add(self, en: str, tgt: str, doc: str) -> None:
        en, tgt = _clean(en), _clean(tgt)
        if not _keep(en, tgt) or (en, tgt) in self.seen:
            return
        if self.check_untranslated and _looks_english(tgt):
            return
        self.seen.add((en, tgt))
        self.pairs.append(Pair(source=en, target=tgt, origin=self.origin, doc=doc))


def _parse_html(path: Path) -> etree._Element | None:
    try:
        data = path.read_bytes()
        if not data.strip():
            return None
        parser = lxml.html.HTMLParser(encoding="utf-8")
        return lxml.html.document_fromstring(data, parser=parser)
    except (OSError, ValueError, etree.LxmlError) as exc:
        log.warning("skipping %s: %s", path, exc)
        return None


def _drop(elements: Iterable[etree._Element]) -> None:
    """Remove elements from their tree, keeping the tail text."""
    for el in list(elements):
        parent = el.getparent()
        if parent is None:
            continue
        if el.tail:
            prev = el.getprevious()
            if prev is not None:
                prev.tail = (prev.tail or "") + el.tail
            else:
                parent.text = (parent.text or "") + el.tail
        parent.remove(el)


def _text(el: etree._Element) -> str:
    return _clean(el.text_content())


def _matches(a: Sequence[str], b: Sequence[str]) -> set[tuple[int, int]]:
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return {(i + k, j + k) for i, j, n in sm.get_matching_blocks() for k in range(n)}


_MIN_SEQ_RATIO = 0.9


def _aligned_indices(
    a: Sequence[str], b: Sequence[str], min_ratio: float = _MIN_SEQ_RATIO
) -> tuple[list[tuple[int, int]], bool]:
    """Index pairs of equal labels; (pairs, exact) where exact means the sequences are equal.

    When the sequences differ we do not skip the file outright: most differences are a single
    block inserted or dropped (a translator merged two paragraphs, a note left out) and the other
    blocks are still exact counterparts. We align the longest common subsequence of labels, but
    an inserted block of the *same* tag makes the alignment ambiguous (en p1 p2 p3 vs de p1 p3:
    is p2 matched to p3?). So we keep only the pairs on which the forward LCS and the LCS of the
    reversed sequences agree, which drops the ambiguous stretch around each difference. Files
    whose sequences are too different (similarity below `min_ratio`: e.g. an index or
    glossary sorted by the translated term) are skipped. Callers add a digit-agreement check
    for these files.
    """
    a, b = list(a), list(b)
    if a == b:
        return [(i, i) for i in range(len(a))], True
    if difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() < min_ratio:
        return [], False
    n, m = len(a), len(b)
    forward = _matches(a, b)
    backward = {(n - 1 - i, m - 1 - j) for i, j in _matches(a[::-1], b[::-1])}
    return sorted(forward & backward), False


# ---------------------------------------------------------------------- LibreOffice help

_LO_ID = re.compile(r"^(?:par|hd|bm)_")
_LO_SKIP_CLASSES = {"code", "codeintable", "smathcode", "example"}


def _lo_segments(path: Path) -> dict[str, list[str]] | None:
    doc = _parse_html(path)
    if doc is None:
        return None
    area = doc.get_element_by_id("DisplayArea", None)
    if area is None:
        area = doc.find("body")
        if area is None:
            return None
    # Switches (system / application) hold one hidden variant per case, the JS unhides the right
    # one; keep the "default" variant only so the text reads like the rendered page.
    _drop(
        el
        for el in area.iter()
        if isinstance(el.tag, str)
        and el.get("hidden") is not None
        and not (el.get("id") or "").startswith("default")
    )
    _drop(area.iter("script", "style", "pre", "img"))
    segs: dict[str, list[str]] = {}
    for el in area.iter():
        if not isinstance(el.tag, str):
            continue
        el_id = el.get("id")
        if not el_id or not _LO_ID.match(el_id):
            continue
        if set((el.get("class") or "").split()) & _LO_SKIP_CLASSES:
            continue
        segs.setdefault(el_id, []).append(_text(el))
    return segs


def libreoffice_help(root: Path, tgt_lang: str = "de") -> list[Pair]:
    """LibreOffice help: same relative HTML file, same element id (``par_*``, ``hd_*``)."""
    base = Path(root) / "usr/share/libreoffice/help"
    en_dir, tgt_dir = base / "en-US", base / tgt_lang
    out = _Collector("libreoffice-help")
    if not en_dir.is_dir() or not tgt_dir.is_dir():
        return out.pairs
    for en_path in sorted(en_dir.rglob("*.html")):
        rel = en_path.relative_to(en_dir)
        tgt_path = tgt_dir / rel
        if not tgt_path.is_file():
            continue
        en_segs, tgt_segs = _lo_segments(en_path), _lo_segments(tgt_path)
        if not en_segs or not tgt_segs:
            continue
        doc = rel.as_posix()
        for el_id, en_texts in en_segs.items():
            tgt_texts = tgt_segs.get(el_id)
            if not tgt_texts:
                continue
            if len(en_texts) != len(tgt_texts):  # repeated id, unequal counts: first only
                en_texts, tgt_texts = en_texts[:1], tgt_texts[:1]
            for en, tgt in zip(en_texts, tgt_texts, strict=True):
                out.add(en, tgt, doc)
    return out.pairs


# ------------------------------------------------------------------------- DocBook HTML

_BLOCK_TAGS = frozenset(
    {"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "td", "th", "dt", "dd", "caption", "title"}
)
_DROP_DIV_CLASSES = {
    "navheader",
    "navfooter",
    "toc",
    "list-of-figures",
    "list-of-tables",
    "list-of-examples",
    "list-of-procedures",
    "breadcrumbs",
}
_DROP_TAGS = ("script", "style", "pre", "head", "img")


def _docbook_blocks(path: Path) -> list[tuple[str, str]] | None:
    """(label, text) of the leaf block elements (blocks without block descendants) in order."""
    doc = _parse_html(path)
    if doc is None:
        return None
    _drop(doc.iter(*_DROP_TAGS))
    _drop(
        el
        for el in doc.iter("div", "table", "ul", "dl")
        if set((el.get("class") or "").split()) & _DROP_DIV_CLASSES
        or (el.tag == "table" and (el.get("summary") or "").startswith("Navigation"))
    )
    body = doc.find("body")
    if body is None:
        return None
    blocks: list[tuple[str, str]] = []
    for el in body.iter(*_BLOCK_TAGS):
        if any(d is not el and d.tag in _BLOCK_TAGS for d in el.iter(*_BLOCK_TAGS)):
            continue
        label = el.tag + "." + ".".join(sorted((el.get("class") or "").split()))
        blocks.append((label, _text(el)))
    return blocks


def _align_docbook(
    en_path: Path, tgt_path: Path, doc: str, out: _Collector, max_len: int | None = None
) -> None:
    en_blocks, tgt_blocks = _docbook_blocks(en_path), _docbook_blocks(tgt_path)
    if not en_blocks or not tgt_blocks:
        return
    idx, exact = _aligned_indices([b[0] for b in en_blocks], [b[0] for b in tgt_blocks])
    for i, j in idx:
        en, tgt = en_blocks[i][1], tgt_blocks[j][1]
        if max_len is not None and len(en) > max_len:
            continue
        if not exact and not _digits_agree(en, tgt):
            continue
        out.add(en, tgt, doc)


def gimp_help(root: Path, tgt_lang: str = "de") -> list[Pair]:
    """GIMP help (DocBook HTML): same file, aligned by the sequence of leaf block elements."""
    base = Path(root) / "usr/share/gimp/2.0/help"
    en_dir, tgt_dir = base / "en", base / tgt_lang
    out = _Collector("gimp-help", check_untranslated=True)
    if not en_dir.is_dir() or not tgt_dir.is_dir():
        return out.pairs
    for en_path in sorted(en_dir.rglob("*.html")):
        rel = en_path.relative_to(en_dir)
        tgt_path = tgt_dir / rel
        if tgt_path.is_file() and not en_path.is_symlink():
            _align_docbook(en_path, tgt_path, rel.as_posix(), out)
    return out.pairs


def debian_reference(root: Path, tgt_lang: str = "de") -> list[Pair]:
    """Debian Reference: ``NAME.en.html`` vs ``NAME.<lang>.html``, aligned by block sequence."""
    base = Path(root) / "usr/share/debian-reference"
    out = _Collector("debian-reference", check_untranslated=True)
    if not base.is_dir():
        return out.pairs
    for en_path in sorted(base.glob("*.en.html")):
        stem = en_path.name[: -len(".en.html")]
        tgt_path = base / f"{stem}.{tgt_lang}.html"
        if tgt_path.is_file():
            _align_docbook(en_path, tgt_path, en_path.name, out)
    return out.pairs


# ---------------------------------------------------------------------------- man pages

_GLYPHS = {
    "em": "\u2014",
    "en": "\u2013",
    "hy": "-",
    "bu": "\u2022",
    "aq": "'",
    "dq": '"',
    "lq": "\u201c",
    "rq": "\u201d",
    "oq": "\u2018",
    "cq": "\u2019",
    "Bq": "\u201e",
    "bq": "\u201a",
    "Fo": "\u00ab",
    "Fc": "\u00bb",
    "fo": "\u2039",
    "fc": "\u203a",
    "ti": "~",
    "ha": "^",
    "rs": "\\",
    "sl": "/",
    "ba": "|",
    "bv": "|",
    "or": "|",
    "pl": "+",
    "mi": "\u2212",
    "eq": "=",
    "mu": "\u00d7",
    "di": "\u00f7",
    "de": "\u00b0",
    "co": "\u00a9",
    "rg": "\u00ae",
    "tm": "\u2122",
    "sc": "\u00a7",
    "ps": "\u00b6",
    "ga": "`",
    "aa": "\u00b4",
    "at": "@",
    "sh": "#",
    "Do": "$",
    "lB": "[",
    "rB": "]",
    "lC": "{",
    "rC": "}",
    "la": "\u27e8",
    "ra": "\u27e9",
    "->": "\u2192",
    "<-": "\u2190",
    ">=": "\u2265",
    "<=": "\u2264",
    "!=": "\u2260",
    "+-": "\u00b1",
    "ss": "\u00df",
    ":a": "\u00e4",
    ":o": "\u00f6",
    ":u": "\u00fc",
    ":A": "\u00c4",
    ":O": "\u00d6",
    ":U": "\u00dc",
    "'e": "\u00e9",
    "`e": "\u00e8",
    "'a": "\u00e1",
    "`a": "\u00e0",
    "^o": "\u00f4",
    "~n": "\u00f1",
    ",c": "\u00e7",
    "12": "\u00bd",
    "14": "\u00bc",
    "34": "\u00be",
    "*m": "\u00b5",
    "*p": "\u03c0",
    "if": "\u221e",
    "**": "*",
    "sq": "\u25a1",
    "dg": "\u2020",
}
_STRINGS = {
    "lq": "\u201c",
    "rq": "\u201d",
    "R": "\u00ae",
    "Tm": "\u2122",
    "--": "\u2014",
    "PI": "\u03c0",
    'L"': "\u201c",
    'R"': "\u201d",
    "C`": "\u201c",
    "C'": "\u201d",
    "C+": "C++",
    "Aq": "'",
    "q": '"',
}
_ESCAPE = re.compile(
    r"""\\(?:
        \((?P<g2>..)                         # \(xx glyph
      | \[(?P<gn>[^\]]*)\]                   # \[name] glyph
      | \*(?:\((?P<s2>..)|\[(?P<sn>[^\]]*)\]|(?P<s1>.))   # string
      | f(?:\(..|\[[^\]]*\]|.)               # font
      | s(?:[-+]?\d+|\(\d\d|\[[^\]]*\])      # size
      | [hvwlLDoxbNXZ](?P<q>['"|]).*?(?P=q)  # drawing/motion/width/...: drop
      | [nkg](?:\(..|\[[^\]]*\]|.)           # registers, marks
      | \$(?:\d|\*|@)                        # macro arguments
      | (?P<one>.)                           # single-char escape
    )""",
    re.VERBOSE,
)
_ONE = {
    "e": "\\",
    "\\": "\\",
    "-": "-",
    "&": "",
    "%": "",
    ":": "",
    "|": "",
    "^": "",
    "c": "",
    "{": "",
    "}": "",
    "~": " ",
    " ": " ",
    "0": " ",
    "t": " ",
    ".": ".",
    "'": "\u00b4",
    "`": "`",
    "/": "",
    ",": "",
    "!": "",
    "z": "",
    "p": "",
    "r": "",
    "u": "",
    "d": "",
    "a": "",
    '"': "",
}


def _glyph(name: str) -> str:
    if name in _GLYPHS:
        return _GLYPHS[name]
    m = re.fullmatch(r"u([0-9A-Fa-f]{4,6})(?:_.*)?", name)
    if m:
        try:
            return chr(int(m.group(1), 16))
        except ValueError:
            return ""
    if name.startswith("char") and name[4:].isdigit():
        return chr(int(name[4:]))
    return ""


def _unescape_groff(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group("g2") is not None:
            return _glyph(m.group("g2"))
        if m.group("gn") is not None:
            return _glyph(m.group("gn"))
        for g in ("s2", "sn", "s1"):
            if m.group(g) is not None:
                return _STRINGS.get(m.group(g), "")
        if m.group("one") is not None:
            c = m.group("one")
            return _ONE.get(c, c)
        return ""

    return _ESCAPE.sub(sub, text)


def _strip_comment(line: str) -> str:
    # \" and \# start a comment unless the backslash is itself escaped (\\").
    m = re.search(r'(?<!\\)(?:\\\\)*\\["#]', line)
    return line[: m.end() - 2] if m else line


def _macro_args(rest: str) -> list[str]:
    """Split macro arguments on spaces, honouring double quotes ("" inside quotes is a quote)."""
    args: list[str] = []
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t":
            i += 1
        if i >= n:
            break
        if rest[i] == '"':
            i += 1
            buf = []
            while i < n:
                if rest[i] == '"':
                    if i + 1 < n and rest[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(rest[i])
                i += 1
            args.append("".join(buf))
        else:
            j = i
            while j < n and rest[j] not in " \t":
                if rest[j] == "\\" and j + 1 < n:
                    j += 1
                j += 1
            args.append(rest[i:j])
            i = j
    return args


_FONT_JOIN = {"BR", "IR", "RB", "RI", "BI", "IB"}
_FONT_SPACE = {"B", "I", "SM", "SB"}
_PARA = {"PP", "P", "LP", "Sp", "sp", "HP", "RS", "RE", "ns"}
_SKIP_BLOCKS = {"nf": "fi", "EX": "EE", "TS": "TE", "Vb": "Ve", "SY": "YS", "EQ": "EN", "PS": "PE"}
# Skipped outright: header, index entries, layout requests, register/string definitions.
_IGNORE = {
    "TH", "IX", "PD", "in", "ad", "na", "nh", "hy", "ft", "ps", "ne", "br", "ti", "ll", "ds",
    "nr", "rr", "tr", "so", "UC", "tm", "q", "UR", "MT", "ce", "ta", "bp", "ls", "vs", "cs",
    "ss", "fam", "mso", "ig", "Ip", "PU", "DT", "UN", "OP", "AT", "ie", "el", "if",
}  # fmt: skip


def _groff_blocks(source: str) -> list[tuple[str, str]]:
    """Split groff man source into (macro-type, text) blocks; code blocks become ("CODE", "")."""
    blocks: list[tuple[str, str]] = []
    cur: list[str] = []
    cur_type = "PP"
    one_line_type: str | None = None  # the next text line forms a block of this type alone
    lines = source.splitlines()
    i = 0

    def flush(new_type: str | None = None) -> None:
        nonlocal cur, cur_type
        if cur:
            joined = "\n".join(cur)
            joined = re.sub(r"\\c\n", "", joined)
            blocks.append((cur_type, _clean(_unescape_groff(joined))))
        cur = []
        if new_type is not None:
            cur_type = new_type

    def text_line(t: str) -> None:
        nonlocal one_line_type
        if one_line_type is not None:
            flush(one_line_type)
            cur.append(t)
            flush("TP" if one_line_type == "TPtag" else "PP")
            one_line_type = None
        else:
            cur.append(t)

    while i < len(lines):
        raw = lines[i]
        i += 1
        line = _strip_comment(raw)
        if raw.startswith(('.\\"', "'\\\"", '.\\"')) or raw.strip() in (".", "'"):
            continue
        if not line.strip():
            if raw.strip():  # a line that was only a comment
                continue
            flush()
            continue
        if line[0] not in ".'":
            text_line(line)
            continue
        m = re.match(r"^[.']\s*([^\s\\]+)\s*(.*)$", line)
        if not m:
            continue
        name, rest = m.group(1), m.group(2)
        if name in _SKIP_BLOCKS:
            flush()
            blocks.append(("CODE", ""))
            end = _SKIP_BLOCKS[name]
            while i < len(lines) and not re.match(rf"^[.']\s*{re.escape(end)}\b", lines[i]):
                i += 1
            i += 1
            continue
        if name in ("de", "de1", "am", "ig"):
            stop = ".." if name != "ig" or not rest.strip() else "." + rest.split()[0]
            while i < len(lines) and lines[i].strip() != stop:
                i += 1
            i += 1
            continue
        if name in ("if", "ie", "el"):
            if "\\{" in line:
                depth = line.count("\\{") - line.count("\\}")
                while depth > 0 and i < len(lines):
                    depth += lines[i].count("\\{") - lines[i].count("\\}")
                    i += 1
            continue
        if name in ("SH", "SS"):
            flush()
            if rest.strip():
                blocks.append((name, _clean(_unescape_groff(" ".join(_macro_args(rest))))))
                cur_type = "PP"
            else:
                one_line_type = name
            continue
        if name in ("TP", "TQ"):
            flush("TP")
            one_line_type = "TPtag"
            continue
        if name == "IP":
            flush("IP")
            args = _macro_args(rest)
            if args:
                blocks.append(("IPtag", _clean(_unescape_groff(args[0]))))
            continue
        if name in _PARA:
            flush("PP" if name not in ("RS", "RE") else cur_type)
            continue
        if name in _FONT_JOIN:
            text_line("".join(_macro_args(rest)))
            continue
        if name in _FONT_SPACE:
            args = _macro_args(rest)
            if args:
                text_line(" ".join(args))
            continue
        if name in ("UE", "ME"):
            args = _macro_args(rest)
            if cur and args:
                cur[-1] += "\\c"  # glue trailing punctuation to the link text
                cur.append(" ".join(args))
            continue
        # _IGNORE and anything unknown: layout requests or custom macros, no text.
    flush()
    return [(t, s) for t, s in blocks if t == "CODE" or s]


def _read_man(path: Path) -> str | None:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        log.warning("skipping %s: %s", path, exc)
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


_MAN_MAX = 400
_MAN_MIN = 10


def man_pages(root: Path, tgt_lang: str = "de") -> list[Pair]:
    """Man pages: ``man/manN/X`` vs ``man/<lang>/manN/X``, aligned by macro-block sequence."""
    base = Path(root) / "usr/share/man"
    tgt_base = base / tgt_lang
    out = _Collector("man-pages", check_untranslated=True)
    if not base.is_dir() or not tgt_base.is_dir():
        return out.pairs
    for en_path in sorted(base.glob("man*/*")):
        rel = en_path.relative_to(base)
        tgt_path = tgt_base / rel
        # Symlinks are aliases of another page: skip them so a page has a single doc.
        if en_path.is_symlink() or not en_path.is_file() or not tgt_path.is_file():
            continue
        if tgt_path.is_symlink():
            continue
        en_src, tgt_src = _read_man(en_path), _read_man(tgt_path)
        if not en_src or not tgt_src:
            continue
        try:
            en_blocks, tgt_blocks = _groff_blocks(en_src), _groff_blocks(tgt_src)
        except (ValueError, IndexError, re.error) as exc:
            log.warning("skipping %s: %s", en_path, exc)
            continue
        if not en_blocks or not tgt_blocks:
            continue
        # Translations (po4a) append one section (translators, licence) after the last one.
        en_sh = [k for k, b in enumerate(en_blocks) if b[0] == "SH"]
        tgt_sh = [k for k, b in enumerate(tgt_blocks) if b[0] == "SH"]
        if len(tgt_sh) == len(en_sh) + 1:
            tgt_blocks = tgt_blocks[: tgt_sh[-1]]
        idx, exact = _aligned_indices(
            [b[0] for b in en_blocks], [b[0] for b in tgt_blocks], min_ratio=0.8
        )
        doc = rel.as_posix()
        for a, b in idx:
            (kind, en), (_, tgt) = en_blocks[a], tgt_blocks[b]
            if kind == "CODE" or not (_MAN_MIN <= len(en) <= _MAN_MAX):
                continue
            if len(tgt) < _MAN_MIN or len(tgt) > 2 * _MAN_MAX:
                continue
            if not exact and not _digits_agree(en, tgt):
                continue
            out.add(en, tgt, doc)
    return out.pairs
