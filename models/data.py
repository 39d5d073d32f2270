"""Parallel data for training: encode once, cache as numpy arrays, batch by tokens.

Token-based batches (not sentence counts) keep the memory and the work per step even when
sentence lengths range from two-word UI strings to forty-word documentation paragraphs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.artifacts import sha256_file
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, tokenizer_id


@dataclass
class EncodedCorpus:
    """Ragged id sequences stored flat: sequence i is ids[offsets[i]:offsets[i+1]]."""

    src_ids: np.ndarray
    src_off: np.ndarray
    tgt_ids: np.ndarray
    tgt_off: np.ndarray
    lines: np.ndarray  # (n,) line number in the files of each kept pair
    # (n,) each kept line's language pair, an index into the pairs `encode_corpus` was given
    # (a multilingual corpus); None: one pair for every line
    pairs: np.ndarray | None = None

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
    pair_file: Path | None = None,
    pairs: tuple[tuple[str, str], ...] = (),
) -> EncodedCorpus:
    """Encode a line-aligned pair of files; pairs longer than `max_len` tokens are dropped.

    `pair_file` (a multilingual corpus): each line's pair as `src-tgt`, one of `pairs`; each
    side is then normalised as its own language, and the corpus keeps each line's pair.
    With `cache_dir`, the arrays are saved as .npy under a key made of the files' and the
    tokenizer's hashes, so a resumed run does not tokenise again.
    """
    names = ("si", "so", "ti", "to", "ln") + (("pi",) if pair_file is not None else ())
    key = None
    if cache_dir is not None:
        files = (src_file, tgt_file) + ((pair_file,) if pair_file is not None else ())
        parts = [sha256_file(p)[:16] for p in files] + [tokenizer_id(tok)[:16]]
        # "enc3": Chinese and Japanese keep their full-width punctuation since this version;
        # an older cache of the same files encoded them otherwise
        key = Path(cache_dir) / f"enc3-{'-'.join(parts)}-{max_len}"
        if (key / "done").is_file():
            return EncodedCorpus(*[np.load(key / f"{n}.npy") for n in names])
    src_lines, tgt_lines = read_lines(src_file), read_lines(tgt_file)
    if len(src_lines) != len(tgt_lines):
        raise ValueError(f"{src_file} and {tgt_file} differ in line count")
    if pair_file is None:
        line_pairs = np.zeros(len(src_lines), dtype=np.int64)
        langs = [(src_lang, tgt_lang)]
    else:
        line_pairs = _line_pairs(pair_file, len(src_lines), pairs)
        langs = list(pairs)
    src: list[list[int]] = [[] for _ in src_lines]
    tgt: list[list[int]] = [[] for _ in tgt_lines]
    for p, (s_lang, t_lang) in enumerate(langs):  # each side normalised as its language
        rows = np.flatnonzero(line_pairs == p).tolist()
        for i, ids in zip(
            rows, tok.encode_batch([src_lines[i] for i in rows], s_lang), strict=True
        ):
            src[i] = ids
        for i, ids in zip(
            rows, tok.encode_batch([tgt_lines[i] for i in rows], t_lang), strict=True
        ):
            tgt[i] = ids
    keep = [i for i in range(len(src)) if 0 < len(src[i]) <= max_len and 0 < len(tgt[i]) < max_len]
    si, so = _flatten([src[i] for i in keep])
    ti, to = _flatten([tgt[i] for i in keep])
    ln = np.asarray(keep, dtype=np.int64)
    arrays = [si, so, ti, to, ln] + ([line_pairs[ln]] if pair_file is not None else [])
    if key is not None:
        key.mkdir(parents=True, exist_ok=True)
        for name, arr in zip(names, arrays, strict=True):
            np.save(key / f"{name}.npy", arr)
        (key / "done").write_text("ok")
    return EncodedCorpus(*arrays)


def _line_pairs(path: Path, lines: int, pairs: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Each line's index into `pairs`, read from a `.pairs` file (`src-tgt` per line)."""
    index = {f"{s}-{t}": i for i, (s, t) in enumerate(pairs)}
    names = read_lines(path)
    if len(names) != lines:
        raise ValueError(f"{path}: {len(names)} lines for a corpus of {lines}")
    out = np.empty(lines, dtype=np.int64)
    for n, name in enumerate(names):
        if name not in index:
            raise ValueError(f"{path}:{n + 1}: pair {name!r} is not one of {sorted(index)}")
        out[n] = index[name]
    return out


@dataclass
class EncodedNeighbours:
    """Retrieved pairs of every line of a corpus, as ids: line i owns rows off[i]:off[i+1]."""

    off: np.ndarray  # (lines + 1,)
    src: EncodedCorpus  # row r: the r-th retrieved pair (its `lines` are the store pair ids)

    def __len__(self) -> int:
        return len(self.off) - 1

    def of(self, line: int) -> list[tuple[list[int], list[int]]]:
        """(source ids, target ids) of the pairs retrieved for `line`, best first."""
        rows = range(int(self.off[line]), int(self.off[line + 1]))
        return [(self.src.src(r).tolist(), self.src.tgt(r).tolist()) for r in rows]


def read_neighbours(path: Path, lines: int, k: int) -> list[list[dict]]:
    """The JSON Lines of `ragmt neighbours`: record i must have id i; keep the first `k`.

    Raises ValueError naming the file and line when the file does not match the corpus.
    """
    out: list[list[dict]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                record = json.loads(raw)
                found = record["neighbours"]
                ident = record["id"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a neighbours record ({e})") from None
            if ident != n - 1:
                raise ValueError(f"{path}:{n}: id {ident}, expected {n - 1} (one line per pair)")
            out.append(found[:k])
    if len(out) != lines:
        raise ValueError(f"{path}: {len(out)} records for a corpus of {lines} lines")
    return out


def encode_neighbours(
    tok: Tokenizer,
    path: Path,
    lines: int,
    src_lang: str,
    tgt_lang: str,
    k: int,
    max_len: int,
    cache_dir: Path | None = None,
) -> EncodedNeighbours:
    """Tokenise the first `k` neighbours of each of `lines` corpus lines, each side cut to
    `max_len`; a neighbour with an empty side is dropped (the model cannot read it)."""
    key = None
    if cache_dir is not None:
        parts = [sha256_file(path)[:16], tokenizer_id(tok)[:16]]
        key = Path(cache_dir) / f"nb-{'-'.join(parts)}-{k}-{max_len}"
        if (key / "done").is_file():
            arrays = [np.load(key / f"{n}.npy") for n in ("off", "si", "so", "ti", "to", "ln")]
            return EncodedNeighbours(arrays[0], EncodedCorpus(*arrays[1:]))
    records = read_neighbours(path, lines, k)
    flat = [nb for found in records for nb in found]
    src = [s[:max_len] for s in tok.encode_batch([nb["source"] for nb in flat], src_lang)]
    tgt = [t[:max_len] for t in tok.encode_batch([nb["target"] for nb in flat], tgt_lang)]
    counts, keep, r = [], [], 0
    for found in records:
        kept = [r + j for j in range(len(found)) if src[r + j] and tgt[r + j]]
        keep.extend(kept)
        counts.append(len(kept))
        r += len(found)
    off = np.zeros(len(records) + 1, dtype=np.int64)
    off[1:] = np.cumsum(counts)
    si, so = _flatten([src[i] for i in keep])
    ti, to = _flatten([tgt[i] for i in keep])
    ln = np.asarray([int(flat[i]["pair_id"]) for i in keep], dtype=np.int64)
    out = EncodedNeighbours(off, EncodedCorpus(si, so, ti, to, ln))
    if key is not None:
        key.mkdir(parents=True, exist_ok=True)
        arrays = {"off": off, "si": si, "so": so, "ti": ti, "to": to, "ln": ln}
        for name, arr in arrays.items():
            np.save(key / f"{name}.npy", arr)
        (key / "done").write_text("ok")
    return out


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
