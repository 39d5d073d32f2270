"""Chinese in the joint vocabulary: the legacy SentencePiece training against the full-width one.

The Adaptive Sparse Transformer's joint 16k vocabulary (English and eight targets) was trained
with SentencePiece's NFKC, which maps Chinese full-width punctuation to ASCII, and at character
coverage 0.9995, which left rare ideographs to byte fallback. This trains both tokenizers on
the same text (`experiments/ast-bible.sh`'s `spm-text`) and records, per target language's
test references: the share of byte-fallback pieces, pieces per sentence, and how much of the
references' full-width punctuation survives `decode(encode(...))`.

    python experiments/tokenizer_chinese.py --work runs/ast-bible \
        --results experiments/results/tokenizer-chinese.jsonl
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LANGS = ("de", "fr", "es", "pt", "ru", "uk", "hi", "zh")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="ast-bible.sh's work directory")
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--results", type=Path, help="append records here (JSON Lines)")
    args = ap.parse_args()

    from models.artifacts import sha256_file
    from models.data import read_lines
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
                kept = sum(
                    c in full_width for ref in refs for c in tok.decode(tok.encode(ref, lang))
                )
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
                    flush=True,
                )
                if args.results:
                    append_record(args.results, record)


if __name__ == "__main__":
    main()
