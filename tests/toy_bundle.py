"""The tiny real bundle the service, CLI and dense-retrieval tests share: a SentencePiece model
plus a Transformer that learns, in a few seconds, a word-for-word English->German toy lexicon,
so the API can be tested end to end. Built once per test session (`bundle` in conftest.py)."""

from __future__ import annotations

import random
from pathlib import Path

import torch
import torch.nn.functional as F

from models.bundle import load_bundle, save_bundle
from models.registry import build_model
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer
from tests.toy import LEXICON, gloss

HELD_OUT = "red tree two house"  # never seen in training


def _sentences(rng: random.Random, n: int) -> list[str]:
    words = sorted(LEXICON)
    out = (" ".join(rng.sample(words, rng.randint(1, 4))) for _ in range(n))
    return [s for s in out if s != HELD_OUT]


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(seqs), max(map(len, seqs))), PAD_ID)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out


def _train(tok: Tokenizer, steps: int = 400) -> torch.nn.Module:
    torch.manual_seed(0)
    config = dict(vocab_size=tok.vocab_size, d_model=64, n_heads=4, enc_layers=2, dec_layers=2)
    model = build_model("transformer", {**config, "d_ff": 128, "dropout": 0.0, "max_len": 32})
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30, max(0.05, (steps - s) / (0.5 * steps)))
    )
    rng = random.Random(2)
    model.train()
    for _ in range(steps):
        batch = _sentences(rng, 32)  # fresh sentences each step: no memorising
        src = _pad([tok.encode(s, "en") for s in batch])
        tgt = [tok.encode(gloss(s), "de") for s in batch]
        tgt_in, tgt_out = _pad([[BOS_ID, *t] for t in tgt]), _pad([[*t, EOS_ID] for t in tgt])
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


def build_toy_bundle(root: Path) -> Path:
    """Train the toy model under `root`; return the verified bundle `root/toy-en-de`."""
    sents = _sentences(random.Random(1), 400)
    (root / "train.en").write_text("".join(s + "\n" for s in sents), encoding="utf-8")
    (root / "train.de").write_text("".join(gloss(s) + "\n" for s in sents), encoding="utf-8")
    corpora = [(root / "train.en", "en"), (root / "train.de", "de")]
    tok = train_tokenizer(corpora, root / "spm.model", vocab_size=300)
    path = root / "toy-en-de"
    save_bundle(
        path,
        _train(tok),
        "transformer",
        languages={"source": "en", "target": "de"},
        extra_files={"spm.model": root / "spm.model"},
    )
    return path


def build_memory_bundle(baseline: Path, path: Path) -> Path:
    """The toy baseline warm-started into a semi-parametric model (memory untrained): a real
    memory model's interface (neighbours in, gates out) without training one."""
    import dataclasses

    from models.semiparametric import SemiParametricConfig, from_transformer

    base = load_bundle(baseline).model
    fields = {f.name for f in dataclasses.fields(base.config)}
    config = SemiParametricConfig(
        **{k: v for k, v in base.config.to_dict().items() if k in fields},
        max_neighbours=4,
        max_neighbour_len=16,
    )
    torch.manual_seed(0)
    save_bundle(
        path,
        from_transformer(base, config).eval(),
        "semiparametric",
        languages={"source": "en", "target": "de"},
        extra_files={"spm.model": baseline / "spm.model"},
    )
    return path
