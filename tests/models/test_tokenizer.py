from pathlib import Path

import pytest

from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ByteTokenizer, Tokenizer

pytestmark = pytest.mark.unit


def test_special_ids(toy_tokenizer: Tokenizer) -> None:
    sp = toy_tokenizer.sp
    assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID)
    assert toy_tokenizer.vocab_size == 300


@pytest.mark.parametrize(
    "text",
    ["one two three", "  red   house ", "Größe „Test“ «quoted» – dash", "日本 %s {0} $name$", ""],
)
def test_round_trip(toy_tokenizer: Tokenizer, text: str) -> None:
    ids = toy_tokenizer.encode(text, "en")
    assert all(i > EOS_ID for i in ids)  # no specials inside a sentence
    assert toy_tokenizer.decode(ids) == toy_tokenizer.normalize(text, "en")
    # byte fallback: characters never seen in training survive (no <unk>)
    assert UNK_ID not in ids


def test_normalisation_is_moses_punct(toy_tokenizer: Tokenizer) -> None:
    assert toy_tokenizer.normalize("„Test“ «x»", "de") == '"Test" "x"'
    assert toy_tokenizer.normalize("a\u00a0 b", "en") == "a b"


def test_chinese_and_japanese_keep_their_full_width_punctuation(toy_tokenizer: Tokenizer) -> None:
    """Their references use "，" and "。": Moses' ASCII replacement would teach a model to
    write "," instead; other languages still get it ("„" becomes '"')."""
    assert toy_tokenizer.normalize("起初， 神创造天地。", "zh") == "起初， 神创造天地。"
    assert toy_tokenizer.normalize("はじめに、神は天と地を創造した。", "ja").endswith("。")
    assert toy_tokenizer.normalize("„Hallo“, sagte er…", "de") == '"Hallo", sagte er...'


def test_decode_drops_specials(toy_tokenizer: Tokenizer) -> None:
    ids = toy_tokenizer.encode("one two", "en")
    assert toy_tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID]) == "one two"


def test_rejects_wrong_special_ids(tmp_path: Path, toy_data: Path) -> None:
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(toy_data / "train.en"),
        model_prefix=str(tmp_path / "bad"),
        vocab_size=30,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special ids"):
        Tokenizer(tmp_path / "bad.model")


@pytest.mark.parametrize("n", [0, 1, 7, 1500])  # 1500: the threaded list call
def test_encode_batch_equals_encode(toy_tokenizer: Tokenizer, n: int) -> None:
    texts = [f"one „two“ {i} three {'red ' * (i % 5)}" for i in range(n)]
    assert toy_tokenizer.encode_batch(texts, "en") == [toy_tokenizer.encode(t, "en") for t in texts]


def test_loop_classes_of_the_served_vocabulary() -> None:
    """What the repeat ban compares: pieces equal up to case and the word-start mark, the
    pieces that separate a repeated span, and those that end a sentence."""
    tok = Tokenizer(Path(__file__).parents[2] / "models/semiparametric_bundle/spm.model")
    sp, canon = tok.sp, tok.canonical_ids()
    same = lambda *pieces: len({canon[sp.piece_to_id(p)] for p in pieces}) == 1  # noqa: E731
    assert same("\u2581Ach", "ach")
    assert same("\u2581Speichern", "\u2581speichern")
    assert same("\u2581Die", "\u2581die", "die")
    assert not same("\u2581die", "\u2581der")
    assert all(canon[i] == i for i in (PAD_ID, BOS_ID, EOS_ID, UNK_ID))
    assert all(canon[canon[i]] == canon[i] for i in range(tok.vocab_size))
    gaps = {sp.id_to_piece(i) for i in tok.gap_ids()}
    stops = {sp.id_to_piece(i) for i in tok.stop_ids()}
    assert {",", "-", ".", "?", "!", "...", "\u2581"} <= gaps
    assert {".", "?", "!", "...", "(", ")", '"', "\u2581("} <= stops
    assert not stops & {",", "-", ":", ";", "\u2581"}
    assert stops <= gaps
    wordy = {sp.id_to_piece(i) for i in tok.wordy_ids()}
    assert {"\u2581Speichern", "ach", "\u2581die"} <= wordy
    assert not wordy & {".", "s", "\u2581%", "\u2581", "\u25811"}


def test_a_translation_is_one_line_whatever_bytes_the_model_writes(
    toy_tokenizer: Tokenizer,
) -> None:
    newline = toy_tokenizer.sp.piece_to_id("<0x0A>")
    assert toy_tokenizer.sp.id_to_piece(newline) == "<0x0A>"  # byte fallback spells it
    ids = toy_tokenizer.encode("one two", "en")
    assert "\n" not in toy_tokenizer.decode([*ids, newline, *ids])
    assert toy_tokenizer.decode([*ids, newline, *ids]) == "one two one two"
    byte = ByteTokenizer()
    assert (
        byte.decode(byte.encode("a", "en") + [ord("\n") + 4, ord("\r") + 4] + [ord("b") + 4])
        == "a b"
    )


@pytest.mark.parametrize("lang", ["en", "de", "fr", "zh"])
def test_the_quick_check_changes_no_normalisation(lang: str) -> None:
    """Random texts over every character Moses' rules mention (quotes, spaces of every kind,
    brackets, digits, percent signs, full-width punctuation), and real-looking sentences:
    the normaliser with its quick check writes exactly what Moses writes, and plain text
    does take the quick path."""
    import random

    from models.tokenizer import punctuation_normalizer

    norm = punctuation_normalizer(lang)
    rules = norm.moses.substitutions + norm.moses.REPLACE_UNICODE_PUNCTUATION
    mentioned = sorted({ch for pattern, _ in rules for ch in pattern})
    alphabet = mentioned + list("abcXYZ019 ,.") + [" ", "  ", "\t", "\u00a0", "\u2009"]
    rng = random.Random(7)
    texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 24))) for _ in range(4000)]
    texts += [
        "Save the file (Ctrl+S) before you close it.",
        "„Gut“, sagte er – und ging.",
        " Twice  spaced , and 50 % off : now ; ok ",
        "It’s 1,000.5 km « far » away…",
        "Plain text with single spaces only",
        "",
    ]
    quick = 0
    for text in texts:
        assert norm.normalize(text) == norm.moses.normalize(text), repr(text)
        quick += norm._changes.search(text) is None
    assert norm._changes.search("Plain text with single spaces only") is None
    assert quick > 100  # the random texts reach both paths


def _chinese_corpus(folder: Path, lines: int, characters: int) -> list[tuple[Path, str]]:
    """Random 'Chinese' lines over `characters` ideographs with full-width punctuation (rarer
    ideographs drawn less often), beside English: a joint vocabulary's language mix."""
    import random

    rng = random.Random(3)
    ideographs = [chr(0x4E00 + i) for i in range(characters)]
    weights = [1 / (i + 1) for i in range(characters)]
    zh, en = [], []
    for _ in range(lines):
        words = ["".join(rng.choices(ideographs, weights, k=rng.randint(1, 3))) for _ in range(8)]
        zh.append("，".join(words[:4]) + "：" + "；".join(words[4:]) + rng.choice("！？。"))
        en.append(" ".join(rng.choice(["one", "two", "three", "four", "five"]) for _ in range(8)))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zh").write_text("\n".join(zh) + "\n", encoding="utf-8")
    (folder / "en").write_text("\n".join(en) + "\n", encoding="utf-8")
    return [(folder / "en", "en"), (folder / "zh", "zh")]


def test_a_chinese_vocabulary_keeps_full_width_punctuation_and_every_character(
    tmp_path: Path, toy_tokenizer: Tokenizer
) -> None:
    """SentencePiece's default NFKC turns "，：；！？" into ASCII, which Chinese references never
    use, and coverage 0.9995 of a joint vocabulary leaves rare ideographs to byte fallback."""
    from models.tokenizer import train_tokenizer

    corpora = _chinese_corpus(tmp_path / "text", 3000, 400)
    new = train_tokenizer(corpora, tmp_path / "new.model", vocab_size=1200)
    old = train_tokenizer(corpora, tmp_path / "old.model", vocab_size=1200, legacy=True)
    text = "一丁，七万：丈三；上下！不与？（丐）"
    assert new.decode(new.encode(text, "zh")) == text
    assert old.decode(old.encode(text, "zh")) == "一丁,七万:丈三;上下!不与?(丐)"
    every_ideograph = "".join(chr(0x4E00 + i) for i in range(400))
    fallbacks = [
        sum(p.startswith("<0x") for p in t.pieces(every_ideograph, "zh")) for t in (new, old)
    ]
    assert fallbacks[0] == 0 < fallbacks[1]
    # A vocabulary without Chinese or Japanese trains as before.
    assert b"nmt_nfkc" in toy_tokenizer.sp.serialized_model_proto()  # English and German
    assert b"nmt_nfkc" not in new.sp.serialized_model_proto()


def test_the_full_width_rules_are_nfkc_otherwise() -> None:
    """Rules read as SentencePiece does (hex code points, tab, replacement), applied to text
    one character at a time, and to the decomposed letters they compose."""
    from models.tokenizer import full_width_rules

    rules = {}
    for line in full_width_rules().splitlines():
        source, target = line.split("\t")
        rules["".join(chr(int(c, 16)) for c in source.split())] = "".join(
            chr(int(c, 16)) for c in target.split()
        )
    assert "，" not in rules and "！" not in rules and "（" not in rules
    assert rules["Ａ"] == "A" and rules["１"] == "1" and rules["ﬁ"] == "fi"
    assert rules["\u3000"] == " " and rules["\t"] == " " and rules["\u200b"] == ""
    assert rules["e\u0301"] == "é" and rules["\x01"] == ""
    assert "a" not in rules and "中" not in rules
    assert "\u200d" not in rules and "\u200c" not in rules  # joiners: Hindi spells with them


def test_the_coverage_keeps_characters_to_half_the_vocabulary() -> None:
    """More distinct characters than half the vocabulary: SentencePiece would refuse coverage
    1.0, so the coverage keeps the most frequent half's share."""
    from models.tokenizer import _coverage

    assert _coverage(["ab ba", "c"], 8) == 1.0
    assert _coverage(["aaaabbc"], 4) == 6 / 7
