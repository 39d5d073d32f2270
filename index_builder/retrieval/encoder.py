"""Sentences to n-gram vectors with a model bundle's encoder (the dense method's token view).

A sentence is tokenised with the bundle's SentencePiece model exactly as the translator does
(Moses punctuation normalisation, no BOS/EOS, cut at the model's `max_len`), encoded once,
and each n-gram ``[a, b)`` of sub-word positions becomes the mean of its encoder states.

Corpus encoding is split into fixed chunks: sentences sorted by (length, index), then cut
every `batch_size` sentences. A chunk's vectors depend only on its composition, so the
in-process path and the Ray path (`--ray`, the same chunks on other processes) give
identical floats at the same thread count, and so identical stores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from index_builder.retrieval.ngrams import ngram_spans
from models.artifacts import ArtifactError
from models.bundle import LoadedBundle, load_bundle
from models.data import pad_batch
from models.tokenizer import Tokenizer
from models.translator import TOKENIZER_FILE


def bundle_sha256(manifest: dict[str, Any]) -> str:
    """The identity of a bundle's encoder: sha256 of its architecture, config and file hashes.

    Not the weights' hash alone: the SentencePiece model (a file) and the config (in the
    manifest) change the vectors too. Not the manifest file's hash: `update_eval` rewrites the
    manifest with new scores, which changes no vector.
    """
    identity = {k: manifest.get(k) for k in ("architecture", "config", "files")}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NgramBlock:
    """N-gram vectors of one width for some sentences: vector g is sentence `row[g]`'s n-gram
    starting at sub-word `start[g]`."""

    vectors: np.ndarray  # (G, D) float32
    row: np.ndarray  # (G,) int64: the sentence (a chunk position, or a pair id once assembled)
    start: np.ndarray  # (G,) int32


class Encoder:
    """A verified bundle's tokenizer and encoder: text -> sub-word ids -> states (T, D)."""

    def __init__(self, bundle: LoadedBundle) -> None:
        self.bundle = bundle
        self.model = bundle.model.eval()
        self.tokenizer = Tokenizer(bundle.file(TOKENIZER_FILE))
        self.source_lang: str = bundle.manifest["languages"]["source"]
        self.max_len: int = self.model.config.max_len
        self.dimension: int = self.model.config.d_model
        self.sha256 = bundle_sha256(bundle.manifest)

    @classmethod
    def load(cls, path: Path) -> Encoder:
        return cls(load_bundle(Path(path)))

    @property
    def path(self) -> Path:
        return self.bundle.path

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Sub-word ids of each text as the model reads its source, cut at `max_len`."""
        return [ids[: self.max_len] for ids in self.tokenizer.encode_batch(texts, self.source_lang)]

    def states(self, ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Final encoder states `(B, T, D)` float32 of non-empty id lists (right-padded)."""
        if any(len(s) == 0 for s in ids):
            raise ValueError("cannot encode an empty sentence (every key would be masked)")
        device = next(self.model.parameters()).device
        src = pad_batch([list(s) for s in ids]).to(device)  # (B, T)
        with torch.no_grad():
            return self.model.encode(src).memory.float().cpu()

    def piece_text(self, ids: Sequence[int]) -> str:
        """Detokenised text of a run of sub-word ids (the matched span of a neighbour)."""
        return self.tokenizer.decode(list(ids))


def encode_chunk(
    encoder: Encoder,
    ids: Sequence[Sequence[int]],
    widths: Sequence[int],
    all_positions: bool,
) -> list[NgramBlock]:
    """N-gram mean vectors of non-empty sentences, one block per width (rows = positions in
    `ids`); the reduced n-gram set, or every position with `all_positions`."""
    return ngram_blocks(encoder.states(ids), ids, widths, all_positions)


def ngram_blocks(
    states: torch.Tensor,
    ids: Sequence[Sequence[int]],
    widths: Sequence[int],
    all_positions: bool,
) -> list[NgramBlock]:
    """`encode_chunk` from encoder states `(B, T, D)` of `ids` already computed (right-padded;
    padding is never summed)."""
    states = states.double()  # (B, T, D); sums in float64, then float32
    prefix = torch.zeros(states.size(0), states.size(1) + 1, states.size(2), dtype=torch.float64)
    prefix[:, 1:] = states.cumsum(dim=1)
    blocks = []
    for width in widths:
        rows, starts, ends = [], [], []
        for r, seq in enumerate(ids):
            for a, b in ngram_spans(len(seq), width, 1 if all_positions else None):
                rows.append(r)
                starts.append(a)
                ends.append(b)
        row, start, end = (torch.tensor(x, dtype=torch.long) for x in (rows, starts, ends))
        sums = prefix[row, end] - prefix[row, start]  # (G, D)
        means = (sums / (end - start).unsqueeze(1).double()).float()
        blocks.append(
            NgramBlock(means.numpy(), row.numpy().astype(np.int64), start.numpy().astype(np.int32))
        )
    return blocks


def corpus_chunks(ids: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Sentence indices in encoding chunks: non-empty ones sorted by (length, index), cut every
    `batch_size`. Both encoding paths use exactly these chunks."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: (len(ids[i]), i))
    return [order[lo : lo + batch_size] for lo in range(0, len(order), batch_size)]


ChunkResults = list[list[NgramBlock]]


def _encode_in_process(
    encoder: Encoder,
    ids: Sequence[Sequence[int]],
    chunks: list[list[int]],
    widths: Sequence[int],
    all_positions: bool,
    progress: bool,
) -> ChunkResults:
    return [
        encode_chunk(encoder, [ids[i] for i in chunk], widths, all_positions)
        for chunk in tqdm(chunks, desc="encoding", unit=" chunks", disable=not progress)
    ]


class ChunkWorker:
    """Body of a Ray actor: loads the bundle once, checks it is the driver's, encodes chunks.

    One torch thread per worker, as Ray gives each actor one CPU. A chunk's floats do not
    depend on the thread count with this CPU build of torch (1 and 2 threads give equal
    encoder states; the Ray test compares whole stores built both ways).
    """

    def __init__(self, bundle_path: str, sha256: str) -> None:
        torch.set_num_threads(1)
        self.encoder = Encoder.load(Path(bundle_path))
        if self.encoder.sha256 != sha256:
            raise ArtifactError(f"{bundle_path}: bundle changed since the build started")

    def encode(
        self, ids: list[list[int]], widths: list[int], all_positions: bool
    ) -> list[NgramBlock]:
        return encode_chunk(self.encoder, ids, widths, all_positions)


def _encode_with_ray(
    encoder: Encoder,
    ids: Sequence[Sequence[int]],
    chunks: list[list[int]],
    widths: Sequence[int],
    all_positions: bool,
    progress: bool,
) -> ChunkResults:
    """The same chunks, encoded by one Ray actor per CPU of the cluster (a local one if Ray
    is not initialised); results are collected in chunk order."""
    import ray  # only with --ray: importing Ray costs seconds

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(include_dashboard=False, log_to_driver=False)
    try:
        n_workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        actor_cls = ray.remote(num_cpus=1)(ChunkWorker)
        workers = [actor_cls.remote(str(encoder.path), encoder.sha256) for _ in range(n_workers)]
        refs = [
            workers[c % n_workers].encode.remote(
                [list(ids[i]) for i in chunk], list(widths), all_positions
            )
            for c, chunk in enumerate(chunks)
        ]
        results: ChunkResults = []
        for ref in tqdm(refs, desc=f"encoding ({n_workers} Ray workers)", disable=not progress):
            results.append(ray.get(ref))
        for w in workers:
            ray.kill(w)
        return results
    finally:
        if started_here:
            ray.shutdown()


def encode_corpus(
    encoder: Encoder,
    sources: Sequence[str],
    widths: Sequence[int],
    all_positions: bool,
    batch_size: int,
    progress: bool = False,
    use_ray: bool = False,
) -> list[NgramBlock]:
    """N-gram vectors of a corpus, one block per width, rows = pair ids, ordered by (pair id,
    start); sentences with no sub-word (empty) have none."""
    ids: list[list[int]] = []
    with tqdm(total=len(sources), desc="tokenising", unit=" sents", disable=not progress) as bar:
        for lo in range(0, len(sources), 1024):
            ids += encoder.token_ids([sources[i] for i in range(lo, min(lo + 1024, len(sources)))])
            bar.update(min(1024, len(sources) - lo))
    chunks = corpus_chunks(ids, batch_size)
    run: Callable[..., ChunkResults] = _encode_with_ray if use_ray else _encode_in_process
    results = run(encoder, ids, chunks, widths, all_positions, progress)
    blocks = []
    for w in range(len(widths)):
        parts = [res[w] for res in results]
        if not parts:
            dim = encoder.dimension
            blocks.append(NgramBlock(np.zeros((0, dim), np.float32), np.zeros(0, np.int64),
                                     np.zeros(0, np.int32)))  # fmt: skip
            continue
        owner = np.concatenate(
            [np.asarray(c, dtype=np.int64)[p.row] for c, p in zip(chunks, parts, strict=True)]
        )
        start = np.concatenate([p.start for p in parts])
        order = np.lexsort((start, owner))  # pair order: independent of the chunking
        vectors = np.concatenate([p.vectors for p in parts])[order]
        blocks.append(NgramBlock(np.ascontiguousarray(vectors), owner[order], start[order]))
    return blocks
