"""Columns of strings stored as one UTF-8 blob plus int64 offsets, memory-mappable.

A store's pair texts and vocabulary are kept this way so that opening a 100k-pair store maps
two files instead of parsing them, and a lookup decodes only the string it needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class TextColumn(Sequence[str]):
    """Immutable strings over one byte blob: item i is ``blob[offsets[i]:offsets[i + 1]]``."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        if blob.dtype != np.uint8 or blob.ndim != 1:
            raise ValueError("blob must be a 1-d uint8 array")
        if offsets.dtype != np.int64 or offsets.ndim != 1 or len(offsets) < 1:
            raise ValueError("offsets must be a non-empty 1-d int64 array")
        if offsets[0] != 0 or offsets[-1] != len(blob) or np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must start at 0, never decrease and end at the blob size")
        self._blob = blob
        self._offsets = offsets

    @classmethod
    def from_strings(cls, texts: Iterable[str]) -> TextColumn:
        encoded = [t.encode("utf-8") for t in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        return cls(blob, offsets)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} strings")
        i %= n
        return self._blob[self._offsets[i] : self._offsets[i + 1]].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self[i]

    def save(self, directory: Path, name: str) -> None:
        """Write ``<name>.bin`` (the blob) and ``<name>.offsets.npy``."""
        (Path(directory) / f"{name}.bin").write_bytes(self._blob.tobytes())
        np.save(Path(directory) / f"{name}.offsets.npy", self._offsets, allow_pickle=False)

    @classmethod
    def open(cls, directory: Path, name: str) -> TextColumn:
        """Map a column written by `save`; nothing is read until a string is asked for."""
        blob_path = Path(directory) / f"{name}.bin"
        if blob_path.stat().st_size == 0:  # np.memmap refuses empty files
            blob = np.zeros(0, dtype=np.uint8)
        else:
            blob = np.memmap(blob_path, dtype=np.uint8, mode="r")
        offsets = np.load(
            Path(directory) / f"{name}.offsets.npy", mmap_mode="r", allow_pickle=False
        )
        return cls(blob, offsets)


@dataclass(frozen=True)
class PairTexts:
    """The source and target sides of a store's pairs; pair id i is position i in both."""

    sources: TextColumn
    targets: TextColumn

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.targets):
            raise ValueError(f"{len(self.sources)} sources but {len(self.targets)} targets")

    def __len__(self) -> int:
        return len(self.sources)

    @classmethod
    def from_strings(cls, sources: Sequence[str], targets: Sequence[str]) -> PairTexts:
        return cls(TextColumn.from_strings(sources), TextColumn.from_strings(targets))
