"""Chinese in the joint vocabulary: the legacy SentencePiece training against the full-width one.

The Adaptive Sparse Transformer's joint 16k vocabulary (English and eight targets) was trained
with SentencePiece's NFKC, which maps Chinese full-width punctuation to ASCII, and at character
coverage 0.9995, which left rare ideographs to byte fallback. This trains both tokenizers on
the same text (`experiments/ast-bible.sh`'s `spm-text`) and records, per target language's
test references: the share of byte-fallback pieces, pieces per sentence, how much of the
references' full-width punctuation survives `decode(encode(...))`, and the BLEU and chrF of
`decode(encode(reference))` against the reference: the ceiling that a perfect model behind that
tokenizer could reach.

`--hyps SYSTEM=FILE` (a legacy-tokenizer model's Chinese test output) also scores that output
with its ASCII punctuation given back its full-width form: each mark the legacy normaliser
makes becomes the character that most often made it in the Chinese training text (itself
included, so a mark mostly written as ASCII stays), paired quotes alternating opening and
closing. That is the part of the tokenizer's cost a model trained with it pays in punctuation
alone, measured without training anything.

    python experiments/tokenizer_chinese.py --work runs/ast-bible \
        --hyps "dense, 5 epochs=experiments/results/ast-hyps/dense-5-epochs/zh.hyp.txt" \
        --results experiments/results/tokenizer-chinese.jsonl
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LANGS = ("de", "fr", "es", "pt", "ru", "uk", "hi", "zh")
QUOTES = {'"': ("\u201c", "\u201d"), "'": ("\u2018", "\u2019")}  # opening, closing


def restoring_map(text: list[str], normalise: Callable[[str], str]) -> dict[str, str]:
    """Each ASCII character that `normalise` makes out of another one in `text` -> the
    character that most often became it (itself counted: a mark mostly written as ASCII stays).
    Quotes map to themselves here; `restore` alternates them."""
    counts = Counter(c for line in text for c in line)
    made: dict[str, Counter] = {}
    for c, n in counts.items():
        out = normalise(c)
        if len(out) == 1 and out.isascii() and not out.isalnum():
            made.setdefault(out, Counter())[c] += n
    return {
        mark: sources.most_common(1)[0][0]
        for mark, sources in made.items()
        if mark not in QUOTES and sources.most_common(1)[0][0] != mark
    }


def restore(line: str, marks: dict[str, str]) -> str:
    """`line` with each mapped ASCII mark replaced; paired quotes open and close in turn."""
    out, seen = [], Counter()
    for c in line:
        if c in QUOTES:
            out.append(QUOTES[c][seen[c] % 2])
            seen[c] += 1
        else:
            out.append(marks.get(c, c))
    return "".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="ast-bible.sh's work directory")
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument(
        "--hyps",
        action="append",
        default=[],
        metavar="SYSTEM=FILE",
        help="a legacy-tokenizer model's Chinese test output, scored with its punctuation restored",
    )
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    args = ap.parse_args()
    hyps = []
    for spec in args.hyps:
        system, _, path = spec.partition("=")
        if not system or not path or not Path(path).is_file():
            sys.exit(f"--hyps wants SYSTEM=FILE with FILE a hypothesis file, got {spec!r}")
        hyps.append((system, Path(path)))

    from models.artifacts import sha256_file
    from models.data import read_lines
    from models.evaluate import score
    from models.results import FORMAT, append_record, git_state
    from models.tokenizer import FULL_WIDTH_KEPT, train_tokenizer

    texts = args.work / "spm-text"
    corpora = [(texts / lang, lang) for lang in ("en", *LANGS)]
    missing = [str(path) for path, _ in corpora if not path.is_file()]
    if missing:
        sys.exit(f"no tokenizer text (run ast-bible.sh with SYSTEMS= first): {missing}")
    full_width = {chr(cp) for cp in FULL_WIDTH_KEPT}
    git = git_state()
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("legacy", "full-width"):
            model = Path(tmp) / f"{name}.model"
            tok = train_tokenizer(corpora, model, vocab_size=args.vocab, legacy=name == "legacy")
            for lang in LANGS:
                refs = read_lines(args.work / "data" / "bible" / f"test.{lang}")
                pieces = [p for ref in refs for p in tok.pieces(ref, lang)]
                marks = sum(c in full_width for ref in refs for c in ref)
                trip = [tok.decode(tok.encode(ref, lang)) for ref in refs]
                kept = sum(c in full_width for line in trip for c in line)
                ceiling = score(trip, refs, lang)
                record = {
                    "format": FORMAT,
                    "kind": "tokenizer",
                    "tokenizer": name,
                    "vocab_size": args.vocab,
                    "languages": {"source": "en", "target": lang},
                    "sentences": len(refs),
                    "byte_fallback_pct": round(
                        100 * sum(p.startswith("<0x") for p in pieces) / len(pieces), 2
                    ),
                    "pieces_per_sentence": round(len(pieces) / len(refs), 2),
                    "full_width_marks": marks,
                    "full_width_kept_pct": round(100 * kept / marks, 1) if marks else None,
                    "ceiling_bleu": ceiling["bleu"],
                    "ceiling_chrf": ceiling["chrf"],
                    "bleu_signature": ceiling["bleu_signature"],
                    "chrf_signature": ceiling["chrf_signature"],
                    "spm_sha256": sha256_file(model),
                    "data": {
                        "reference_sha256": sha256_file(
                            args.work / "data" / "bible" / f"test.{lang}"
                        ),
                        "text_sha256": {path.name: sha256_file(path) for path, _ in corpora},
                    },
                    "git": git,
                }
                print(
                    name,
                    lang,
                    record["byte_fallback_pct"],
                    record["pieces_per_sentence"],
                    record["full_width_kept_pct"],
                    record["ceiling_bleu"],
                    record["ceiling_chrf"],
                    flush=True,
                )
                if args.results:
                    append_record(args.results, record)
            if name == "legacy" and hyps:
                text = read_lines(texts / "zh")
                marks = restoring_map(text, lambda c, t=tok: t.decode(t.encode(c, "zh")))
                refs = read_lines(args.work / "data" / "bible" / "test.zh")
                for system, path in hyps:
                    lines = read_lines(path)
                    before = score(lines, refs, "zh")
                    after = score([restore(line, marks) for line in lines], refs, "zh")
                    record = {
                        "format": FORMAT,
                        "kind": "punctuation-restored",
                        "system": system,
                        "tokenizer": name,
                        "languages": {"source": "en", "target": "zh"},
                        "sentences": len(lines),
                        "bleu": before["bleu"],
                        "chrf": before["chrf"],
                        "restored_bleu": after["bleu"],
                        "restored_chrf": after["chrf"],
                        "bleu_signature": after["bleu_signature"],
                        "chrf_signature": after["chrf_signature"],
                        "marks": dict(sorted(marks.items())),
                        "quotes": {q: "".join(pair) for q, pair in QUOTES.items()},
                        "spm_sha256": sha256_file(model),
                        "data": {
                            "hypotheses_sha256": sha256_file(path),
                            "reference_sha256": sha256_file(
                                args.work / "data" / "bible" / "test.zh"
                            ),
                        },
                        "git": git,
                    }
                    print(system, "as decoded", before["bleu"], before["chrf"],
                          "restored", after["bleu"], after["chrf"], flush=True)  # fmt: skip
                    if args.results:
                        append_record(args.results, record)


if __name__ == "__main__":
    main()
