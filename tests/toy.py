"""The toy task every test model learns: a word-for-word English->German lexicon."""

from __future__ import annotations

import random

LEXICON = {
    "one": "eins", "two": "zwei", "three": "drei", "four": "vier", "five": "fünf",
    "red": "rot", "blue": "blau", "green": "grün", "house": "haus", "tree": "baum",
}  # fmt: skip


def gloss(en: str) -> str:
    return " ".join(LEXICON[w] for w in en.split())


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Sentences of 2-5 words, repetitions allowed."""
    rng = random.Random(seed)
    words = sorted(LEXICON)
    sents = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) for _ in range(n)]
    return [(s, gloss(s)) for s in sents]
