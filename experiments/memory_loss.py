"""Teacher-forced loss of a memory bundle on dev sentences: with no memory, with their
retrieved neighbours, and with one slot replaced by a damaged copy of the sentence itself —
whether (and how much) the model reads its memory, without decoding.

    python experiments/memory_loss.py --model BUNDLE --data DATA/general \
        --neighbours NB/dev.jsonl [--sentences 200] [--k 3]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from models.bundle import load_bundle
from models.data import pad_batch
from models.semiparametric import Neighbours
from models.tokenizer import PAD_ID, Tokenizer
from models.train import batch_gate, damaged_self, label_smoothed_loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="semi-parametric bundle")
    ap.add_argument("--data", type=Path, required=True, help="domain folder with dev.en/dev.de")
    ap.add_argument("--neighbours", type=Path, required=True, help="`ragmt neighbours` of dev")
    ap.add_argument("--sentences", type=int, default=200)
    ap.add_argument("--k", type=int, default=3, help="neighbours per sentence")
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = load_bundle(args.model)
    model, c = bundle.model.float().eval(), bundle.model.config
    tok = Tokenizer(bundle.file("spm.model"))
    n, width = args.sentences, c.max_neighbour_len
    src = tok.encode_batch((args.data / "dev.en").read_text().splitlines()[:n], "en")
    tgt = tok.encode_batch((args.data / "dev.de").read_text().splitlines()[:n], "de")
    with args.neighbours.open() as fh:
        found = [json.loads(line)["neighbours"][: args.k] for line in fh][:n]

    def encode(f: list[dict]) -> list[tuple[list[int], list[int]]]:
        s = tok.encode_batch([x["source"] for x in f], "en")
        t = tok.encode_batch([x["target"] for x in f], "de")
        return [(a[:width], b[:width]) for a, b in zip(s, t, strict=True) if a and b]

    real = [encode(f) for f in found]
    rng = random.Random(0)
    damaged = [
        r[: args.k - 1] + [damaged_self(s, t, 0.3, width, rng)]
        for r, s, t in zip(real, src, tgt, strict=True)
    ]
    cut = c.max_len - 2
    x = pad_batch([s[:cut] + [c.eos_id] for s in src])
    t_in = pad_batch([[c.bos_id] + t[:cut] for t in tgt])
    t_out = pad_batch([t[:cut] + [c.eos_id] for t in tgt])
    with torch.no_grad():
        for name, nb in (("no memory", None), ("neighbours", real), ("+ damaged self", damaged)):
            logits = (
                model(x, t_in) if nb is None else model(x, t_in, Neighbours.from_lists(nb, PAD_ID))
            )
            loss = label_smoothed_loss(logits, t_out, 0.0).item()
            gate = batch_gate(model, t_out) if nb is not None else None
            print(json.dumps({"memory": name, "loss": round(loss, 4),
                              "gate": None if gate is None else round(gate, 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
