"""Columns of strings stored as one UTF-8 blob plus int64 offsets.

A store's pair texts and vocabulary are kept this way so that opening a 100k-pair store reads
two buffers instead of building a Python string per row, and a lookup decodes only the string
it needs.
"""

from __future__ import annotations

import codecs
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
        if offsets[0] != 0:
            raise ValueError(f"offsets start at {offsets[0]}, not 0")
        if offsets[-1] != len(blob):
            raise ValueError(f"offsets end at {offsets[-1]}, not at the blob size {len(blob)}")
        falls = np.flatnonzero(np.diff(offsets) < 0)
        if len(falls):
            i = int(falls[0])
            raise ValueError(
                f"offsets decrease at index {i + 1} ({offsets[i]} to {offsets[i + 1]})"
            )
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
    def from_bytes(cls, blob: bytes, offsets: np.ndarray, name: str) -> TextColumn:
        """The column `save` wrote as `name`, over `blob` (not copied) and `offsets`, once
        both are checked: ValueError naming the file when an offset is out of order or a
        string is not UTF-8."""
        try:
            column = cls(np.frombuffer(blob, dtype=np.uint8), offsets)
        except ValueError as e:
            raise ValueError(f"{name}.offsets.npy: {e}") from e
        column._check_utf8(name)
        return column

    def _check_utf8(self, name: str, chunk: int = 1 << 20) -> None:
        """Every string decodes: the blob is UTF-8 and no offset splits a character."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        n = len(self._blob)
        for lo in range(0, n, chunk):
            held = len(decoder.getstate()[0])  # bytes of a character the last chunk split
            try:
                decoder.decode(self._blob[lo : lo + chunk].tobytes(), final=lo + chunk >= n)
            except UnicodeDecodeError as e:
                at = lo - held + e.start
                row = int(np.searchsorted(self._offsets, at, side="right")) - 1
                raise ValueError(
                    f"{name}.bin: string {row} is not UTF-8 (byte {self._blob[at]:#04x} at {at})"
                ) from e
        inner = self._offsets[(self._offsets > 0) & (self._offsets < n)]
        split = np.flatnonzero(self._blob[inner] & 0xC0 == 0x80)  # a continuation byte
        if len(split):
            at = int(inner[split[0]])
            row = int(np.searchsorted(self._offsets, at, side="left"))
            raise ValueError(f"{name}.offsets.npy: string {row} starts inside a character ({at})")


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
