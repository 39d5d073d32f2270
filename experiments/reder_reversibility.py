"""Reversibility of a two-way model (REDER, SEEDS §3.2): BLEU(x, back(forward(x))), each side of
a split translated into the other language and back by the same checkpoint (the paper: 66.0 on
WMT14 En-De dev). Each start language gives one record, with the forward pass's own BLEU
against the reference beside it:

    python experiments/reder_reversibility.py --model BUNDLE --data data/en-de \
        [--domain general] [--split dev] [--quantize auto] --results FILE
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

from index_builder.retrieval.encoder import bundle_sha256
from models import pipeline
from models.bundle import load_bundle
from models.data import read_lines
from models.evaluate import score
from models.quantize import resolve
from models.results import FORMAT, append_record, data_info, git_state
from models.translator import DecodeOptions, Translator


def round_trip(translator: Translator, texts: list[str], start: str, other: str) -> dict:
    """Translate `texts` from `start` into `other` and back; both passes' outputs."""
    options = DecodeOptions(beam_size=1)
    there = pipeline.translate(translator.for_pair(start, other), texts, options)
    forward = [o.text for o in there.outputs]
    back = pipeline.translate(translator.for_pair(other, start), forward, options)
    return {"forward": forward, "back": [o.text for o in back.outputs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="a two-way bundle (reder)")
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domain", default="general")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--quantize", default="auto")
    ap.add_argument("--system", default=None, help="the records' label (default: bundle name)")
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    started = git_state()
    bundle = load_bundle(args.model)
    translator = Translator.from_loaded(bundle, args.quantize)
    langs = sorted({lang for pair in translator.card.pairs for lang in pair})
    if len(langs) != 2 or len(translator.card.pairs) != 2:
        sys.exit(f"{args.model}: not a two-way model (pairs {translator.card.pairs})")
    folder = args.data / args.domain
    texts = {lang: read_lines(folder / f"{args.split}.{lang}") for lang in langs}
    for start in langs:
        other = next(lang for lang in langs if lang != start)
        out = round_trip(translator, texts[start], start, other)
        back = score(out["back"], texts[start], start)
        forward = score(out["forward"], texts[other], other)
        print(f"{start}->{other}->{start}: BLEU {back['bleu']:.2f} chrF {back['chrf']:.2f} "
              f"(forward BLEU {forward['bleu']:.2f}); {back['bleu_signature']}")  # fmt: skip
        record = {
            "format": FORMAT,
            "kind": "reder-reversibility",
            "system": args.system or args.model.resolve().name,
            "git": started,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv]),
            "bundle": {
                "path": str(args.model),
                "sha256": bundle_sha256(bundle.manifest),
                "architecture": bundle.manifest.get("architecture"),
            },  # fmt: skip
            "decoding": {"ctc_beam": 1, "quantize": resolve(args.quantize, "cpu", bundle.model)},
            "domain": args.domain,
            "split": args.split,
            "start_lang": start,
            "via_lang": other,
            "data": data_info(args.data, args.domain, args.split, start, other),
            **back,
            "forward_bleu": forward["bleu"],
            "forward_chrf": forward["chrf"],
        }
        if args.results is not None:
            append_record(args.results, record)


if __name__ == "__main__":
    main()
