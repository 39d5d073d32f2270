"""A real (tiny) model bundle: a SentencePiece model plus a Transformer that learns, in a few
seconds, a word-for-word English->German toy lexicon, so the API can be tested end to end."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import torch
import torch.nn.functional as F
from fastapi import FastAPI

from index_builder.corpus import Pair
from index_builder.store import build_store, open_store, set_active
from models.bundle import save_bundle
from models.registry import build_model
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer
from tests.toy import LEXICON, gloss

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

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


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a verified en->de bundle named "toy-en-de" (about 6 s to build)."""
    root = tmp_path_factory.mktemp("service-bundle")
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


# --- stores and running apps for the service tests ------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_store(
    stores_dir: Path,
    domain: str,
    pairs: list[tuple[str, str]],
    method: str = "idf-sentence",
    activate: bool = False,
) -> str:
    """Build a real store version of `pairs` (optionally made ACTIVE); return its id."""
    path = build_store([Pair(s, t) for s, t in pairs], domain, method, stores_dir)
    if activate:
        set_active(stores_dir, domain, path.name)
    return path.name


def store_pairs(stores_dir: Path, domain: str, version: str) -> list[tuple[str, str]]:
    """The pairs a version holds, read back through the verified store."""
    pairs = open_store(stores_dir / domain / version).pairs
    return [(pairs.sources[i], pairs.targets[i]) for i in range(len(pairs))]


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, and an async client talking to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ragmt.test") as c:
            yield c
