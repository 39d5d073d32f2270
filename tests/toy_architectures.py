"""Two test-only architectures, one per decoding kind, and the copy-and-upper-case task they learn.

They exist so the translation pipeline can be tested against the registry's decoding kinds
without training a real model: each learns `TOY_TASK` from bytes in about a second on one CPU
thread and then gets held-out words exactly right. `register_toys()` adds them to the registry.
"""

from __future__ import annotations

import dataclasses
import math
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.layers import DecoderCache, EncoderLayer, EncoderState, SinusoidalPositions
from models.registry import Architecture, register
from models.sparse_transformer import SparseTransformer, SparseTransformerConfig
from models.tokenizer import ByteTokenizer

__all__ = [
    "SPARSE_HELD_OUT",
    "SPARSE_LANGS",
    "SPARSE_TASKS",
    "train_toy_sparse",
    "next_letter",
    "TOY_TASK",
    "ToyAR",
    "ToyARConfig",
    "ToyCTC",
    "ToyCTCConfig",
    "register_toys",
    "toy_pairs",
    "train_toy_ar",
    "train_toy_ctc",
]

# Target of a source text: the same bytes, so output length == input length (monotonic).
TOY_TASK: Callable[[str], str] = str.upper


def toy_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` (source, TOY_TASK(source)) pairs: a random lowercase word of 3-8 letters, or two.

    One letter in five repeats the one before, so a CTC model sees enough doubled letters to
    learn to put a blank between them.
    """
    rng = random.Random(seed)

    def word() -> str:
        letters = [rng.choice(string.ascii_lowercase)]
        for _ in range(rng.randint(2, 7)):
            repeat = rng.random() < 0.2
            letters.append(letters[-1] if repeat else rng.choice(string.ascii_lowercase))
        return "".join(letters)

    sources = [word() if rng.random() < 0.7 else f"{word()} {word()}" for _ in range(n)]
    return [(s, TOY_TASK(s)) for s in sources]


class _ConfigDict:
    """`from_dict` / `to_dict` as model bundles store configs; unknown keys name themselves."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys: {unknown}")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ToyARConfig(_ConfigDict):
    """Sizes and ids of `ToyAR`; the ids are `ByteTokenizer`'s."""

    vocab_size: int = ByteTokenizer.vocab_size
    d_model: int = 32
    max_len: int = 64
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2


class ToyAR(nn.Module):
    """Monotonic autoregressive model: step t reads source token t and the previous output.

    Past the source it reads the pad embedding, which it learns to map to EOS. The encoder state
    is just the source embeddings and the cache just the step count, so `greedy` and
    `beam_search` run it unchanged (a real `DecoderCache` with no layers).
    """

    def __init__(self, config: ToyARConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.src_embed = nn.Embedding(c.vocab_size, c.d_model)  # pad has a vector: "ended"
        self.prev_embed = nn.Embedding(c.vocab_size, c.d_model)
        self.output = nn.Linear(c.d_model, c.vocab_size)

    def encode(self, src: Tensor, source: EncoderState | None = None) -> EncoderState:
        """src `(B, S)` right-padded ids -> embeddings `(B, S, D)`; `source` is returned as is."""
        if source is not None:
            return source
        return EncoderState(memory=self.src_embed(src), src_pad=src.eq(self.config.pad_id))

    def _source_at(self, memory: Tensor, start: int, length: int) -> Tensor:
        """Source embeddings at target positions start..start+length-1, pad past the end."""
        b, s, d = memory.shape
        x = memory[:, start : start + length]  # (B, <=T, D)
        missing = length - x.size(1)
        if missing > 0:
            pad = self.src_embed.weight[self.config.pad_id].expand(b, missing, d)
            x = torch.cat([x, pad], dim=1)
        return x  # (B, T, D)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src `(B, S)`, tgt_in `(B, T)` (BOS + target) -> logits `(B, T, V)`."""
        x = self._source_at(self.encode(src).memory, 0, tgt_in.size(1))
        return self.output(x + self.prev_embed(tgt_in))

    def init_cache(self, state: EncoderState) -> DecoderCache:
        """Only the step count: the model reads no earlier decoder states."""
        return DecoderCache(layers=[])

    def decode_step(self, last_tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        """One token per row at position `cache.step` -> log-probs `(R, V)`; advances the cache.

        Beam search keeps one state row per sentence for its K consecutive rows, so the state
        is expanded here when it has fewer rows than `last_tokens`.
        """
        x = self._source_at(state.memory, cache.step, 1)[:, 0]  # (B, D)
        rows = last_tokens.size(0)
        if x.size(0) != rows:
            x = x.repeat_interleave(rows // x.size(0), dim=0)  # (R, D)
        cache.step += 1
        logits = self.output(x + self.prev_embed(last_tokens))
        return torch.log_softmax(logits.float(), dim=-1)


@dataclass(frozen=True)
class ToyCTCConfig(_ConfigDict):
    """Sizes and ids of `ToyCTC`; the blank is `ByteTokenizer`'s unk, which no byte produces."""

    vocab_size: int = ByteTokenizer.vocab_size
    d_model: int = 32
    n_heads: int = 2
    d_ff: int = 64
    dropout: float = 0.0
    attn_dropout: float = 0.0
    max_len: int = 64
    upsample: int = 2  # frames per source token: a doubled letter needs a blank between
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    blank_id: int = 3


class ToyCTC(nn.Module):
    """Non-autoregressive: embed, one encoder layer, `upsample` frames per source token."""

    def __init__(self, config: ToyCTCConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.positions = SinusoidalPositions(c.max_len, c.d_model)
        self.layer = EncoderLayer(c)
        self.norm = nn.LayerNorm(c.d_model)
        self.upsample = nn.Linear(c.d_model, c.upsample * c.d_model)
        self.output = nn.Linear(c.d_model, c.vocab_size)

    def ctc_log_probs(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src `(B, S)` right-padded ids -> (log-probs `(B, S*U, V)`, valid frames `(B,)`)."""
        c = self.config
        pad = src.eq(c.pad_id)  # (B, S)
        x = self.embed(src) * math.sqrt(c.d_model) + self.positions(src.size(1))
        x = self.norm(self.layer(x, pad))  # (B, S, D)
        b, s, d = x.shape
        frames = self.upsample(x).view(b, s * c.upsample, d)  # (B, S*U, D)
        log_probs = torch.log_softmax(self.output(frames).float(), dim=-1)
        return log_probs, (~pad).sum(dim=1) * c.upsample


def register_toys() -> None:
    """Add "toy-ar" and "toy-ctc" to the registry; calling it again changes nothing."""
    register("toy-ar", Architecture(ToyARConfig, ToyAR, decoding="autoregressive"))
    register("toy-ctc", Architecture(ToyCTCConfig, ToyCTC, decoding="ctc"))


def _padded(seqs: list[list[int]], pad_id: int) -> Tensor:
    out = torch.full((len(seqs), max(map(len, seqs))), pad_id, dtype=torch.long)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = torch.tensor(seq)
    return out


def _encoded(pairs: list[tuple[str, str]]) -> tuple[list[list[int]], list[list[int]]]:
    tok = ByteTokenizer()
    return [tok.encode(s, "src") for s, _ in pairs], [tok.encode(t, "tgt") for _, t in pairs]


def _fit(
    model: nn.Module, loss_of: Callable[[Tensor], Tensor], n: int, steps: int, lr: float
) -> None:
    """Adam on minibatches of 32 sampled pairs; `loss_of(rows)` is the loss of those pairs."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, n, (min(32, n),))
        opt.zero_grad()
        loss_of(rows).backward()
        opt.step()
    model.eval()


def train_toy_ar(pairs: list[tuple[str, str]], steps: int = 300, seed: int = 0) -> ToyAR:
    """A `ToyAR` trained with teacher-forced cross-entropy on (source, target) texts."""
    torch.manual_seed(seed)
    model = ToyAR(ToyARConfig())
    c = model.config
    srcs, tgts = _encoded(pairs)
    src = _padded(srcs, c.pad_id)
    tgt_in = _padded([[c.bos_id, *t] for t in tgts], c.pad_id)  # (N, T)
    tgt_out = _padded([[*t, c.eos_id] for t in tgts], c.pad_id)

    # Label smoothing keeps EOS from being the usual runner-up mid-word: beam search ends a
    # sentence once K hypotheses have ended, so K early endings would stop a long word first.
    def loss_of(rows: Tensor) -> Tensor:
        logits = model(src[rows], tgt_in[rows]).transpose(1, 2)  # (b, V, T)
        return F.cross_entropy(logits, tgt_out[rows], ignore_index=c.pad_id, label_smoothing=0.1)

    _fit(model, loss_of, len(pairs), steps, lr=0.05)
    return model


def train_toy_ctc(pairs: list[tuple[str, str]], steps: int = 200, seed: int = 0) -> ToyCTC:
    """A `ToyCTC` trained with CTC loss on (source, target) texts."""
    torch.manual_seed(seed)
    model = ToyCTC(ToyCTCConfig())
    c = model.config
    srcs, tgts = _encoded(pairs)
    src, tgt = _padded(srcs, c.pad_id), _padded(tgts, c.pad_id)
    tgt_len = torch.tensor([len(t) for t in tgts])

    def loss_of(rows: Tensor) -> Tensor:
        log_probs, lengths = model.ctc_log_probs(src[rows])  # (b, T, V), (b,)
        return F.ctc_loss(
            log_probs.transpose(0, 1), tgt[rows], lengths, tgt_len[rows], blank=c.blank_id
        )

    _fit(model, loss_of, len(pairs), steps, lr=0.01)
    return model


def next_letter(text: str) -> str:
    """Each lowercase letter replaced by the next one (z by a): a second toy "language"."""
    return "".join(chr((ord(c) - 97 + 1) % 26 + 97) if c.islower() else c for c in text)


SPARSE_LANGS = ("en", "up", "next")
SPARSE_TASKS = {"up": str.upper, "next": next_letter}
SPARSE_HELD_OUT = ["quixotic", "vex", "jumping", "zebra", "mild"]  # never in its training


def train_toy_sparse(steps: int = 500, phase1: int = 200, seed: int = 0) -> SparseTransformer:
    """A byte-level `SparseTransformer` (decoder feed-forward sparsity, 2 of 4 blocks) trained
    on English -> "up" and English -> "next" words, phase 1 then phase 2 with the paper's loss
    weights (c_s 0.1, c_d 0.02, c_t 0.1); about 12 s on one thread."""
    torch.manual_seed(seed)
    tok = ByteTokenizer()
    m = SparseTransformer(
        SparseTransformerConfig(
            vocab_size=tok.vocab_size, d_model=64, n_heads=4, enc_layers=2, dec_layers=1,
            d_ff=256, dropout=0.0, max_len=40, languages=SPARSE_LANGS, sparse=("ffn",),
            sides=("decoder",), ffn_blocks=4, ffn_active=2,
        )
    )  # fmt: skip
    rng = random.Random(3)
    words = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
        for _ in range(4000)
    ]
    words = [w for w in words if w not in SPARSE_HELD_OUT]
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50, max(0.02, (steps - s) / (0.6 * steps)))
    )
    targets = list(SPARSE_TASKS)
    decoder_langs = [SPARSE_LANGS.index(t) for t in targets]
    c = m.config
    m.train()
    for step in range(steps):
        m.set_phase(1 if step < phase1 else 2)
        rows = words[(step * 64) % len(words) :][:64]
        tgt_langs = [targets[i % 2] for i in range(len(rows))]
        src = _padded([tok.encode(w, "en") for w in rows], c.pad_id)
        tgt = [tok.encode(SPARSE_TASKS[t](w), t) for w, t in zip(rows, tgt_langs, strict=True)]
        langs = torch.tensor(
            [[0] * len(rows), [SPARSE_LANGS.index(t) for t in tgt_langs]]
        )  # (2, B) source and target language of each row
        logits = m(src, _padded([[c.bos_id, *t] for t in tgt], c.pad_id), langs)
        loss = F.cross_entropy(
            logits.transpose(1, 2), _padded([[*t, c.eos_id] for t in tgt], c.pad_id),
            ignore_index=c.pad_id, label_smoothing=0.1,
        )  # fmt: skip
        aux = m.score_losses(decoder_langs=decoder_langs)
        if step < phase1:
            loss = loss + 0.1 * aux["sparsity"]
        else:
            loss = loss + 0.02 * aux["disparity"] + 0.1 * aux["topk"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    m.eval()
    return m
