"""Parallel data for training: encode once, cache as numpy arrays, batch by tokens.

Token-based batches (not sentence counts) keep the memory and the work per step even when
sentence lengths range from two-word UI strings to forty-word documentation paragraphs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.artifacts import sha256_file
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


@dataclass
class EncodedCorpus:
    """Ragged id sequences stored flat: sequence i is ids[offsets[i]:offsets[i+1]]."""

    src_ids: np.ndarray
    src_off: np.ndarray
    tgt_ids: np.ndarray
    tgt_off: np.ndarray

    def __len__(self) -> int:
        return len(self.src_off) - 1

    def src(self, i: int) -> np.ndarray:
        return self.src_ids[self.src_off[i] : self.src_off[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_ids[self.tgt_off[i] : self.tgt_off[i + 1]]

    @property
    def src_lens(self) -> np.ndarray:
        return np.diff(self.src_off)

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.diff(self.tgt_off)


def _flatten(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(seqs) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(s) for s in seqs])
    ids = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(off[-1]))
    return ids, off


def read_lines(path: Path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def encode_corpus(
    tok: Tokenizer,
    src_file: Path,
    tgt_file: Path,
    src_lang: str,
    tgt_lang: str,
    max_len: int,
    cache_dir: Path | None = None,
) -> EncodedCorpus:
    """Encode a line-aligned pair of files; pairs longer than `max_len` tokens are dropped.

    With `cache_dir`, the arrays are saved as .npy under a key made of the files' and the
    tokenizer's hashes, so a resumed run does not tokenise again.
    """
    key = None
    if cache_dir is not None:
        parts = [sha256_file(p)[:16] for p in (src_file, tgt_file, tok.model_file)]
        key = Path(cache_dir) / f"enc-{'-'.join(parts)}-{max_len}"
        if (key / "done").is_file():
            arrays = [np.load(key / f"{n}.npy") for n in ("si", "so", "ti", "to")]
            return EncodedCorpus(*arrays)
    src_lines, tgt_lines = read_lines(src_file), read_lines(tgt_file)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{src_file} and {tgt_file} differ in line count")
    src = tok.encode_batch(src_lines, src_lang)
    tgt = tok.encode_batch(tgt_lines, tgt_lang)
    keep = [i for i in range(len(src)) if 0 < len(src[i]) <= max_len and 0 < len(tgt[i]) < max_len]
    si, so = _flatten([src[i] for i in keep])
    ti, to = _flatten([tgt[i] for i in keep])
    corpus = EncodedCorpus(si, so, ti, to)
    if key is not None:
        key.mkdir(parents=True, exist_ok=True)
        for name, arr in zip(("si", "so", "ti", "to"), (si, so, ti, to), strict=True):
            np.save(key / f"{name}.npy", arr)
        (key / "done").write_text("ok")
    return corpus


def token_batches(corpus: EncodedCorpus, max_tokens: int, seed: int) -> list[np.ndarray]:
    """Index batches whose padded size (rows x longest sequence + 1) stays under max_tokens.

    Sorting by length (with a seeded random tie-break) keeps padding low; the batch order is
    shuffled with the same seed, so an epoch is reproducible from (corpus, max_tokens, seed).
    """
    rng = np.random.default_rng(seed)
    src_lens, tgt_lens = corpus.src_lens, corpus.tgt_lens
    order = np.lexsort((rng.random(len(corpus)), src_lens, tgt_lens))
    batches, start = [], 0
    longest = 0
    for pos, i in enumerate(order):
        width = max(longest, int(src_lens[i]), int(tgt_lens[i]) + 1)
        if (pos - start + 1) * width > max_tokens and pos > start:
            batches.append(order[start:pos])
            start, width = pos, max(int(src_lens[i]), int(tgt_lens[i]) + 1)
        longest = width
    batches.append(order[start:])
    rng.shuffle(batches)
    return batches


def collate(
    corpus: EncodedCorpus, idx: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src (B,S), tgt_in (B,T) = BOS + y, tgt_out (B,T) = y + EOS), padded with PAD_ID."""
    srcs = [corpus.src(i) for i in idx]
    tgts = [corpus.tgt(i) for i in idx]
    s_len = max(len(s) for s in srcs)
    t_len = max(len(t) for t in tgts) + 1
    src = torch.full((len(idx), s_len), PAD_ID, dtype=torch.long)
    tin = torch.full((len(idx), t_len), PAD_ID, dtype=torch.long)
    tout = torch.full((len(idx), t_len), PAD_ID, dtype=torch.long)
    for r, (s, t) in enumerate(zip(srcs, tgts, strict=True)):
        src[r, : len(s)] = torch.from_numpy(s.astype(np.int64))
        tt = torch.from_numpy(t.astype(np.int64))
        tin[r, 0] = BOS_ID
        tin[r, 1 : len(t) + 1] = tt
        tout[r, : len(t)] = tt
        tout[r, len(t)] = EOS_ID
    return src, tin, tout


def pad_batch(seqs: list[list[int]]) -> torch.Tensor:
    width = max(1, max(len(s) for s in seqs))
    out = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    for r, s in enumerate(seqs):
        out[r, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out
