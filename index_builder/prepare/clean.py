"""Text cleaning and pair filters shared by every source.

UI catalogs carry markup, accelerator markers and placeholders; documentation carries
whitespace and entities. A pair is kept only if both sides hold letters, differ, have a
plausible length ratio and carry the same placeholders.
"""

from __future__ import annotations

import html
import re
from collections import Counter

_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9_:-]*(\s[^<>]*)?/?>")
_WS = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")
# Accelerator markers: "_File", "~File", "&File" (but "&&" is a literal ampersand, and
# "A & B" or an entity is not a marker).
_ACCEL_UNDERSCORE = re.compile(r"(?<![\w_])_(?=\w)")
_ACCEL_TILDE = re.compile(r"~(?=\w)")
_ACCEL_AMP = re.compile(r"&(?=[^\W_])(?![A-Za-z]+;|#\d+;)")
# Placeholders that must survive translation: printf (%s, %1$d, %.2f, %(name)s),
# numbered (%1), braces ({0}, {name}), dollar-delimited ($name$, $(ARG1)).
PLACEHOLDER = re.compile(
    r"%\(\w+\)[-+ #0]*\d*(?:\.\d+)?[a-zA-Z]"
    r"|%(?:\d+\$)?[-+#0]*\d*(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t|I64)?[diouxXeEfFgGcrsaApS]"
    r"|%\d+"
    r"|\{\w*\}"
    r"|\$\(\w+\)"
    r"|\$\w+\$"
)


def collapse(text: str) -> str:
    """Collapse all whitespace runs (newlines included) to one space and strip."""
    return _WS.sub(" ", text).strip()


def strip_markup(text: str) -> str:
    """Remove XML/HTML tags and decode entities; placeholders such as {0} are not tags."""
    return html.unescape(_TAG.sub("", text))


def strip_accelerators(text: str) -> str:
    text = _ACCEL_TILDE.sub("", text)
    text = _ACCEL_UNDERSCORE.sub("", text)
    text = _ACCEL_AMP.sub("", text)
    return text.replace("&&", "&")


def clean_ui(text: str) -> str:
    """Clean one UI catalog string: markup, accelerators, escapes and whitespace."""
    text = text.replace("\\n", " ").replace("\\t", " ")
    return collapse(strip_markup(strip_accelerators(text)))


def placeholders(text: str) -> Counter[str]:
    return Counter(PLACEHOLDER.findall(text))


def has_letters(text: str) -> bool:
    return _LETTER.search(text) is not None


def keep_pair(
    source: str,
    target: str,
    *,
    min_ratio: float = 0.5,
    max_ratio: float = 2.0,
    ratio_min_chars: int = 12,
    max_chars: int = 600,
) -> str | None:
    """Return None if the pair is kept, otherwise the reason it is dropped.

    The length ratio is only judged once a side is long enough for it to mean something:
    "OK" -> "In Ordnung" is a fine pair.
    """
    if not source or not target:
        return "empty"
    if not has_letters(source) or not has_letters(target):
        return "no-letters"
    if source == target:
        return "identical"
    if len(source) > max_chars or len(target) > max_chars:
        return "too-long"
    if max(len(source), len(target)) >= ratio_min_chars:
        ratio = len(target) / len(source)
        if not min_ratio <= ratio <= max_ratio:
            return "length-ratio"
    if placeholders(source) != placeholders(target):
        return "placeholders"
    return None


def dedup_key(text: str) -> str:
    """Key under which two source strings count as the same sentence (contamination check)."""
    return collapse(text).casefold()
