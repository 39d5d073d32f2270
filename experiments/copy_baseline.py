"""The floor a translation must beat: each test source scored as its own translation (sacreBLEU
BLEU and chrF against the reference), per domain and direction, as eval records labelled
"source copied (no model)". A CTC model that has learned little copies its source (its frames
are the source's tokens, and a near-identity stack labels each frame with its own token), and
names, numbers and software strings shared by both languages then score several BLEU:

    python experiments/copy_baseline.py --data data/en-de --results FILE
"""

from __future__ import annotations

import argparse
from pathlib import Path

from models.data import read_lines
from models.evaluate import score
from models.results import append_record, eval_records, git_state

DOMAINS = ["general", "bible", "medical", "software-docs"]
SYSTEM = "source copied (no model)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("data/en-de"))
    ap.add_argument("--domains", default=",".join(DOMAINS))
    ap.add_argument("--split", default="test")
    ap.add_argument("--results", type=Path, required=True)
    args = ap.parse_args()
    git = git_state()
    for source, target in (("en", "de"), ("de", "en")):
        results = {}
        for domain in args.domains.split(","):
            folder = args.data / domain
            src = read_lines(folder / f"{args.split}.{source}")
            results[domain] = score(src, read_lines(folder / f"{args.split}.{target}"), target)
            print(f"{source}->{target} {domain}: BLEU {results[domain]['bleu']:.2f} "
                  f"chrF {results[domain]['chrf']:.2f}")  # fmt: skip
        for record in eval_records(
            results, system=SYSTEM, split=args.split,
            bundle={"path": None, "sha256": None, "architecture": None},
            decoding={"copy": True}, store_dirs={}, store_label=None, data_dir=args.data,
            languages=(source, target), git=git,
        ):  # fmt: skip
            append_record(args.results, record)


if __name__ == "__main__":
    main()
