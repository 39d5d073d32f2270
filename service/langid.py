"""Language identification for LibreTranslate's `source: auto` and `POST /detect`.

py3langid (langid.py's naive Bayes model over byte n-grams, shipped inside its wheel as
`model.npz.xz`: nothing is downloaded) restricted to the languages ragmt knows, the 22 of the
multilingual Bible. Chosen by `benchmarks/langid.py`: on 3-10-word texts it was the most
accurate of six offline identifiers and the fastest (docs/language-identification.md).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from index_builder.prepare.bible import VERSIONS

LANGUAGES: tuple[str, ...] = tuple(VERSIONS)  # en de fr es ... zh ja ko
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # the identifier's probability in [0, 1], normalised over `languages`


class LanguageIdentifier:
    """Identifies the language of short texts; the model loads once, on first use or `load()`."""

    def __init__(self, languages: Sequence[str] = LANGUAGES) -> None:
        self.languages = tuple(languages)
        self._ident = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the model (about 0.4 s); later calls return at once."""
        with self._lock:
            if self._ident is None:
                from py3langid.langid import MODEL_FILE
                from py3langid.langid import LanguageIdentifier as Model

                ident = Model.from_model_file(MODEL_FILE, norm_probs=True)
                ident.set_languages(list(self.languages))
                self._ident = ident

    def detect(self, text: str) -> Detection | None:
        """The most probable language of `text`; None for a text without letters (blank,
        digits, punctuation), where the model can only answer a uniform guess."""
        if not _LETTER.search(text):
            return None
        if self._ident is None:
            self.load()
        assert self._ident is not None
        language, prob = self._ident.classify(text)
        return Detection(str(language), float(prob))
