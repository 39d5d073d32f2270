"""experiments/tokenizer_chinese.py: a legacy-tokenizer model's output, its punctuation restored."""

from __future__ import annotations

import unicodedata

import pytest

from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

tokenizer_chinese = load("tokenizer_chinese")


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
