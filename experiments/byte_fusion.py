"""Local byte fusion against the vanilla byte model (and a subword baseline) on a Bible-M2O set:
train each system for the same number of epochs, then score it per source language on the
clean and the noisy test sources, one self-describing record per system, language and test set
(`ragmt eval --results`; hypotheses in `<runs>/<system>/eval-<source>-hyps/` for
`experiments/paired_bootstrap.py`). Each step resumes: run it again after an interruption.

    ragmt data mix --bible data/bible --from de,ru,hi,zh --to en --out data/m2o-4-nt --nt \\
        --test-verses 300 --noise 0.05,0.1
    python experiments/byte_fusion.py --data data/m2o-4-nt --runs runs/m2o \\
        --systems byte-none,byte-ncf,byte-wsf --results experiments/results/byte-fusion.jsonl

A system "byte-X" trains `models/configs/byte-X-m2o.json` with the byte tokenizer; "subword"
trains `models/configs/subword-m2o.json` with a SentencePiece model of the training data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "models" / "configs"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="from ragmt data mix")
    ap.add_argument("--runs", type=Path, required=True, help="run directories go here")
    ap.add_argument("--systems", default="byte-none,byte-ncf,byte-wsf")
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--skip-eval", action="store_true")
    args = ap.parse_args()
    manifest = json.loads((args.data / "manifest.json").read_text())
    sources = [s for s, _ in manifest["pairs"]]
    test_sets = ["bible"] + [f"bible-noise{round(r * 100)}" for r in manifest.get("noise", [])]
    ragmt = [sys.executable, "-m", "service.cli"]
    for system in args.systems.split(","):
        kind, _, fusion = system.partition("-")
        config = CONFIGS / (f"byte-{fusion}-m2o.json" if kind == "byte" else "subword-m2o.json")
        run_dir = args.runs / system
        bundle = run_dir / "bundle"
        train = ["train", "--data", str(args.data), "--domain", "bible", "--config", str(config)]
        train += ["--run", str(run_dir), "--out", str(bundle)]
        train += ["--tokenizer", "bytes" if kind == "byte" else "sentencepiece"]
        run([*ragmt, *train])
        if args.skip_eval:
            continue
        for source in sources:
            run([*ragmt, "eval", "--model", str(bundle), "--data", str(args.data),
                 "--domains", ",".join(test_sets), "--source-lang", source,
                 "--beam", str(args.beam), "--results", str(args.results),
                 "--system", system, "--out", str(run_dir / f"eval-{source}")])  # fmt: skip


if __name__ == "__main__":
    main()
