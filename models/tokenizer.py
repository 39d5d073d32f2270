"""Text <-> ids, of two kinds a bundle's manifest names (`tokenizer.kind`).

sentencepiece: Moses punctuation normalisation, then one joint SentencePiece model for both
languages. A joint vocabulary lets the model tie source, target and output embeddings, and lets
names, numbers and placeholders be copied through.
bytes: the UTF-8 bytes of the NFC-normalised text, for byte-level models; no file, no
vocabulary to train, every script representable.
Ids 0-3 are fixed in both: pad, bos, eos, unk.
"""

from __future__ import annotations

import collections
import functools
import io
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm
from sacremoses import MosesPunctNormalizer

from models.artifacts import sha256_file

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
BYTE_OFFSET = 4  # byte b is id b + 4 in a byte tokenizer
TOKENIZER_KINDS = ("sentencepiece", "bytes")
_THREADED_BATCH = 1024  # from this many texts on, SentencePiece's threaded list call pays


# Languages whose full-width punctuation is their own: Moses' pre-replacement would turn
# "，" and "。" into ASCII in training targets, which their references never use.
FULL_WIDTH_PUNCTUATION = frozenset({"zh", "ja"})


def punctuation_normalizer(lang: str) -> PunctNormalizer:
    """Moses punctuation normalisation for `lang`: unicode punctuation replaced by ASCII
    first, except in the languages of `FULL_WIDTH_PUNCTUATION`."""
    return PunctNormalizer(
        MosesPunctNormalizer(
            lang=lang, pre_replace_unicode_punct=lang not in FULL_WIDTH_PUNCTUATION
        )
    )


class PunctNormalizer:
    """A `MosesPunctNormalizer` that first asks whether any of its rules can change the text.

    Moses' normalisation is some fifty regular-expression substitutions run one after the
    other (about 70 us a sentence here, a few per cent of a sentence's decoding at batch 1);
    most texts are left as they were. One search for all the rules' patterns at once decides:
    when none matches, no substitution changes anything and the text is only stripped, as
    Moses strips it. " +" (runs of spaces to one) is searched as two or more spaces, since a
    single space is its own replacement. Same output as Moses' on every prepared line and
    on random texts over the rules' characters (tests/models/test_tokenizer.py).
    """

    def __init__(self, moses: MosesPunctNormalizer) -> None:
        if moses.post_remove_control_chars:
            raise ValueError("control-character removal has no fast check here")
        self.moses = moses
        rules = list(moses.substitutions)
        if moses.pre_replace_unicode_punct:
            rules += moses.REPLACE_UNICODE_PUNCTUATION
        patterns = ["  +" if (p, r) == (" +", " ") else p for p, r in rules]
        self._changes = re.compile("|".join(f"(?:{p})" for p in patterns))

    def normalize(self, text: str) -> str:
        if self._changes.search(text) is None:
            return text.strip()
        return self.moses.normalize(text)


class Tokenizer:
    """Text <-> ids. `encode(decode(ids))` is stable; `decode(encode(t)) == normalize(t)`."""

    def __init__(self, model_file: Path | str) -> None:
        self.model_file = Path(model_file)
        self.sp = spm.SentencePieceProcessor(model_file=str(self.model_file))
        if (self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id(), self.sp.unk_id()) != (
            PAD_ID,
            BOS_ID,
            EOS_ID,
            UNK_ID,
        ):
            raise ValueError(f"{model_file}: special ids must be pad=0 bos=1 eos=2 unk=3")
        self._normalizers: dict[str, PunctNormalizer] = {}

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def normalize(self, text: str, lang: str) -> str:
        norm = self._normalizers.get(lang)
        if norm is None:
            norm = self._normalizers[lang] = punctuation_normalizer(lang)
        return " ".join(norm.normalize(text).split())

    def encode(self, text: str, lang: str) -> list[int]:
        return self.sp.encode(self.normalize(text, lang))

    def encode_batch(self, texts: Iterable[str], lang: str) -> list[list[int]]:
        """SentencePiece's list call starts a thread pool on every call (0.3-0.9 ms here,
        5 ms on a busy host, against ~15 us to encode a short sentence), so a small batch —
        a request's query and its neighbours — is encoded string by string."""
        normed = [self.normalize(t, lang) for t in texts]
        if len(normed) >= _THREADED_BATCH:
            return self.sp.encode(normed)
        return [self.sp.encode(t) for t in normed]

    def decode(self, ids: list[int]) -> str:
        return _one_line(self.sp.decode([i for i in ids if i >= UNK_ID]))

    def pieces(self, text: str, lang: str) -> list[str]:
        return self.sp.encode(self.normalize(text, lang), out_type=str)

    def canonical_ids(self) -> list[int]:
        """Per id, the smallest id of the pieces that read the same case-folded and without
        the word-start mark: what decoding compares to catch a loop that changes case
        ("Speichern speichern") or that a word start cuts differently ("X-Achse ... Achse",
        `Ach` then `\u2581Ach`)."""
        sp = self.sp
        first: dict[str, int] = {}
        out = []
        for i in range(self.vocab_size):
            piece = sp.id_to_piece(i)
            key = piece if sp.is_control(i) or sp.is_unknown(i) else _bare(piece)
            out.append(first.setdefault(key, i))
        return out

    def word_ids(self) -> list[int]:
        """Ids of pieces that are a whole word of four letters or more by themselves (a word
        start, letters only): said twice in a row ("Speichern speichern") they are a loop,
        where "die die" or a repeated sub-word piece may be German."""
        out = []
        for i in range(self.vocab_size):
            piece = self.sp.id_to_piece(i)
            if piece.startswith("\u2581") and len(piece) > 4 and piece[1:].isalpha():
                out.append(i)
        return out

    def wordy_ids(self) -> list[int]:
        """Ids of pieces with two letters or more: a repeated span is a loop only when it
        holds one ("heute nett heute nett"), not a row of dots, numbers or "%s %s"."""
        out = []
        for i in range(self.vocab_size):
            if sum(c.isalpha() for c in self.sp.id_to_piece(i)) >= 2:
                out.append(i)
        return out

    def gap_ids(self) -> list[int]:
        """Ids of pieces that only separate, end a sentence or bracket ("," ";" ":" "-" "/"
        and those of `stop_ids`), and the bare word-start piece: a span said again after one
        of them ("die Söhne, die Söhne", "Die Kanaaniter. Die Kanaaniter", "-Achse in ...
        ▁Achse in") is a loop too."""
        bare = self.sp.piece_to_id("\u2581")
        spaces = [bare] if self.sp.id_to_piece(bare) == "\u2581" else []
        return sorted(self._marks_only(_SEPARATORS + _STOPS) + spaces)

    def stop_ids(self) -> list[int]:
        """Ids of pieces that only end a sentence or open or close a bracket or quote ("."
        "!" "?" "..." "(" ")" '"'): a whole word said again after one of them ("Abschnitte.
        Abschnitte", "Japanisch (japanisch)") is a loop, where "wird, wird" is German."""
        return self._marks_only(_STOPS)

    def _marks_only(self, marks: str) -> list[int]:
        out = []
        for i in range(self.vocab_size):
            piece = self.sp.id_to_piece(i).lstrip("\u2581")
            if piece and set(piece) <= set(marks):
                out.append(i)
        return out


_SEPARATORS = ",;:-/\u2013\u2014"
_STOPS = ".!?\u2026()[]\"'"


_LINE_BREAKS = re.compile(r"[ \t]*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+[ \t]*")


def _one_line(text: str) -> str:
    """A translation as one line: a line break a model spelled in byte pieces becomes a
    space, so a translated file keeps one line per source line."""
    return _LINE_BREAKS.sub(" ", text)


def _bare(piece: str) -> str:
    """A piece as loops compare it: without the word-start mark, case-folded."""
    return piece.lstrip("\u2581").casefold() or piece


class ByteTokenizer:
    """UTF-8 bytes as ids (byte b is b + 4); `decode(encode(t)) == normalize(t)`.

    The same calls as `Tokenizer`, so the translator and training need not know which kind a
    model reads. A byte sequence cut inside a character (a length cap, a model's mistake)
    decodes with U+FFFD in its place instead of failing.
    """

    vocab_size = 256 + BYTE_OFFSET

    def normalize(self, text: str, lang: str) -> str:
        return " ".join(unicodedata.normalize("NFC", text).split())

    def encode(self, text: str, lang: str) -> list[int]:
        return [b + BYTE_OFFSET for b in self.normalize(text, lang).encode("utf-8")]

    def encode_batch(self, texts: Iterable[str], lang: str) -> list[list[int]]:
        return [self.encode(t, lang) for t in texts]

    def decode(self, ids: list[int]) -> str:
        raw = bytes(i - BYTE_OFFSET for i in ids if BYTE_OFFSET <= i < self.vocab_size)
        return _one_line(raw.decode("utf-8", errors="replace"))

    def pieces(self, text: str, lang: str) -> list[str]:
        return [chr(b) if b < 128 else f"<0x{b:02X}>" for b in self.normalize(text, lang).encode()]


def tokenizer_id(tok: Tokenizer | ByteTokenizer) -> str:
    """What identifies a tokenizer's ids (cache keys, checkpoints that must agree): the
    SentencePiece model file's sha256, or "bytes"."""
    if isinstance(tok, ByteTokenizer):
        return "bytes"
    return sha256_file(tok.model_file)


def load_tokenizer(kind: str, model_file: Path | str | None = None) -> Tokenizer | ByteTokenizer:
    """The tokenizer of `kind` (one of TOKENIZER_KINDS); SentencePiece reads `model_file`."""
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "sentencepiece":
        if model_file is None:
            raise ValueError("a SentencePiece tokenizer needs its model file")
        return Tokenizer(model_file)
    raise ValueError(f"unknown tokenizer kind {kind!r}; known: {', '.join(TOKENIZER_KINDS)}")


@functools.cache
def full_width_rules() -> str:
    """SentencePiece normalisation rules (its TSV format: code points in hex, a tab, their
    replacement) that keep full-width punctuation.

    SentencePiece's default rule (`nmt_nfkc`) is NFKC, which maps "，；：！？（）" to ASCII:
    a Chinese model trained with it can never write its references' punctuation. These rules
    are NFKC for every other character, composition of decomposed letters (NFC), and the
    whitespace rules `nmt_nfkc` adds: whitespace and line separators become a space, other
    control characters and invisible marks (zero-width space, word joiner, byte-order mark)
    go. The zero-width joiner and non-joiner stay: in Devanagari and Arabic script they are
    spelling (Hindi writes "परमेश्‍वर" with one), so dropping them would change the text.
    """
    rules: dict[str, str] = {}
    for cp in range(1, 0x110000):  # NUL cannot be a key of SentencePiece's trie
        if 0xD800 <= cp <= 0xDFFF or cp in FULL_WIDTH_KEPT:
            continue
        char = chr(cp)
        category = unicodedata.category(char)
        if char.isspace() or category in ("Zs", "Zl", "Zp"):
            rules[char] = " "
        elif category == "Cc" or cp in (0x200B, 0x2060, 0xFEFF):
            rules[char] = ""
        else:
            rules[char] = unicodedata.normalize("NFKC", char)
        decomposed = unicodedata.normalize("NFD", char)
        if len(decomposed) > 1 and unicodedata.normalize("NFC", decomposed) == char:
            rules[decomposed] = unicodedata.normalize("NFKC", char)
    return "".join(
        " ".join(f"{ord(c):X}" for c in source)
        + "\t"
        + " ".join(f"{ord(c):X}" for c in target)
        + "\n"
        for source, target in rules.items()
        if source != target
    )


def _coverage(lines: list[str], vocab_size: int) -> float:
    """The character coverage that keeps every character of `lines` in the vocabulary, or,
    where they are more than half of it, the most frequent half of the vocabulary's size
    (SentencePiece refuses a coverage whose characters do not fit)."""
    counts = collections.Counter(c for line in lines for c in line if not c.isspace())
    ranked = sorted(counts.values(), reverse=True)
    kept = ranked[: vocab_size // 2]
    return 1.0 if len(kept) == len(ranked) else sum(kept) / sum(ranked)


# Full-width ASCII punctuation, U+FF01-FF5E less the letters and digits (which NFKC may map).
FULL_WIDTH_KEPT = frozenset(
    cp for cp in range(0xFF01, 0xFF5F) if not unicodedata.normalize("NFKC", chr(cp)).isalnum()
)


def train_tokenizer(
    corpora: list[tuple[Path, str]],
    out_file: Path,
    vocab_size: int = 8000,
    max_sentences: int = 400_000,
    seed: int = 1,
    legacy: bool = False,
) -> Tokenizer:
    """Train a joint unigram SentencePiece model on normalised lines of (file, lang) corpora.

    Byte fallback keeps rare characters (other scripts, symbols) representable instead of
    collapsing them to <unk>, so decoding never loses them. With a language of
    `FULL_WIDTH_PUNCTUATION` among the corpora, the vocabulary covers every character of the
    training text (in a joint vocabulary, coverage 0.9995 left thousands of Chinese
    characters to byte fallback) and normalisation keeps full-width punctuation
    (`full_width_rules`). `legacy` trains as before that: `nmt_nfkc` and coverage 0.9995 for
    every language mix, to reproduce models trained with it.
    """
    normalizers = {lang: punctuation_normalizer(lang) for _, lang in corpora}
    lines: list[str] = []
    for path, lang in corpora:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            line = " ".join(normalizers[lang].normalize(line).split())
            if line:
                lines.append(line)
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    full_width = not legacy and any(lang in FULL_WIDTH_PUNCTUATION for _, lang in corpora)
    rules = out_file.with_suffix(".rules.tmp")
    if full_width:
        rules.write_text(full_width_rules(), encoding="utf-8")
    options = (
        {"character_coverage": _coverage(lines, vocab_size), "normalization_rule_tsv": str(rules)}
        if full_width
        else {"character_coverage": 0.9995}
    )
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            byte_fallback=True,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            seed_sentencepiece_size=200_000,
            num_threads=2,
            minloglevel=2,
            **options,
        )
    finally:
        rules.unlink(missing_ok=True)
    tmp = out_file.with_suffix(".tmp")
    tmp.write_bytes(model.getvalue())
    tmp.replace(out_file)
    return Tokenizer(out_file)
