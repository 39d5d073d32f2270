"""What every retrieval method returns and the one call it answers.

Methods (IDF sentence, IDF n-gram, dense n-gram) differ only in how they score; the service,
the `neighbours` job and the retrieval-memory model see `Retriever.search` and `Neighbour`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Neighbour:
    """One retrieved training pair and why it was retrieved.

    `span` is the half-open token range ``[start, end)`` of the query that matched, in the
    method's token view (words for the sparse methods, sub-words for the dense one); None when
    the whole sentence was compared. `matched` is the text of the neighbour's side of the
    match: the corpus n-gram for n-gram methods, the shared terms for sentence retrieval.
    `edit`: the sequence number of the live edit that added the pair (`index_builder.edits`;
    its `pair_id` is then -1), None for a pair of the store version itself.
    """

    pair_id: int
    source: str
    target: str
    score: float
    span: tuple[int, int] | None
    matched: str
    edit: int | None = None


@runtime_checkable
class Retriever(Protocol):
    """A batch of source sentences in, for each a ranked list of at most `k` neighbours out.

    `exclude`, when given, holds for each query the pair ids it must never retrieve (the
    query's own pair when neighbours are precomputed for a training corpus); they are skipped
    before ranking, so they do not cost a neighbour slot.
    """

    def search(
        self,
        queries: Sequence[str],
        k: int,
        exclude: Sequence[Collection[int]] | None = None,
    ) -> list[list[Neighbour]]: ...


def check_search_args(
    queries: Sequence[str], k: int, exclude: Sequence[Collection[int]] | None
) -> None:
    """The argument checks every `Retriever.search` makes before any work."""
    if isinstance(queries, str):
        raise TypeError("queries must be a sequence of sentences, not one string")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if exclude is not None and len(exclude) != len(queries):
        raise ValueError(f"exclude has {len(exclude)} entries for {len(queries)} queries")
