"""experiments/tokenizer_chinese.py: a legacy-tokenizer model's output, its punctuation restored."""

from __future__ import annotations

import importlib.util
import unicodedata
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "tokenizer_chinese.py"
spec = importlib.util.spec_from_file_location("tokenizer_chinese", SCRIPT)
tokenizer_chinese = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tokenizer_chinese)  # type: ignore[union-attr]


def _nfkc(c: str) -> str:
    return unicodedata.normalize("NFKC", c)


def test_each_mark_goes_back_to_what_made_it_most_often() -> None:
    """ "，" made "," more often than "," was written; "." was written as ASCII more often than
    "．" made it, so it stays; letters and quotes are left alone."""
    text = ["起初，神创造天地：一．二．", "他说，好！v1.2.3.", "ＡＢ"]
    marks = tokenizer_chinese.restoring_map(text, _nfkc)
    assert marks == {",": "，", ":": "：", "!": "！"}


def test_restore_replaces_marks_and_alternates_quotes() -> None:
    marks = {",": "，", "!": "！"}
    line = 'He said, "Light!" and "Dark".'
    assert tokenizer_chinese.restore(line, marks) == "He said， “Light！” and “Dark”."
    assert tokenizer_chinese.restore("'a' 'b'", {}) == "‘a’ ‘b’"
